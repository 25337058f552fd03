package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/apitest"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// TestCampaignControlsContract walks the operator's campaign controls, each answer checked
// against the spec: close, extend, add stock, bulk compensation, cancel, and who may.
func TestCampaignControlsContract(t *testing.T) {
	h := newHarness(t)
	camp := h.createCampaign(t, `{"id": "ctl", "name": "Controls", "stock": 4, "per_user_limit": 2}`)
	wantField(t, camp, "state", "on_sale")
	admin := h.bearer()
	post := func(path, body string, headers ...string) *http.Request {
		return request("POST", "/v1/admin/campaigns/ctl/"+path, body, headers...)
	}

	// Only the admin.
	for _, path := range []string{"close", "cancel", "compensate"} {
		h.fail(t, post(path, ""), http.StatusUnauthorized, events.Unauthorized)
	}
	h.fail(t, request("POST", "/v1/admin/campaigns/nope/close", "", admin...), http.StatusNotFound, events.CampaignNotFound)

	// Sold out, then two units more are on sale at once.
	first := h.buy(t, "ctl", "ann", 2)
	h.buy(t, "ctl", "bob", 2)
	h.fail(t, request("POST", "/v1/campaigns/ctl/purchases", `{"quantity": 1}`, user("cid")...), http.StatusConflict, events.SoldOut)
	wantField(t, h.do(t, request("GET", "/v1/campaigns/ctl", ""), http.StatusOK), "state", "sold_out")
	h.fail(t, post("stock", `{"add": 0}`, admin...), http.StatusBadRequest, events.Invalid)
	h.fail(t, post("stock", `{}`, admin...), http.StatusBadRequest, events.Invalid)
	added := h.do(t, post("stock", `{"add": 2}`, admin...), http.StatusOK)
	wantField(t, added, "stock", float64(6))
	wantField(t, added, "remaining", float64(2))
	wantField(t, added, "state", "on_sale")
	wantField(t, h.do(t, request("GET", "/v1/campaigns/ctl", ""), http.StatusOK), "stock", float64(6)) // at once, not a second later
	h.buy(t, "ctl", "cid", 1)

	// Closed: refused at once; extended: on sale again.
	closed := h.do(t, post("close", "", admin...), http.StatusOK)
	wantField(t, closed, "state", "ended")
	wantField(t, h.do(t, request("GET", "/v1/campaigns/ctl", ""), http.StatusOK), "state", "ended")
	h.fail(t, request("POST", "/v1/campaigns/ctl/purchases", `{"quantity": 1}`, user("dan")...), http.StatusConflict, events.Ended)
	h.do(t, post("close", "", admin...), http.StatusOK) // again: nothing to do
	h.fail(t, post("extend", `{"ends_at": "2001-01-01T00:00:00Z"}`, admin...), http.StatusBadRequest, events.Invalid)
	h.fail(t, post("extend", `{}`, admin...), http.StatusBadRequest, events.Invalid)
	ends := time.Now().Add(time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	extended := h.do(t, post("extend", `{"ends_at": "`+ends+`"}`, admin...), http.StatusOK)
	wantField(t, extended, "ends_at", ends)
	wantField(t, extended, "state", "on_sale")
	wantField(t, h.do(t, request("GET", "/v1/campaigns/ctl", ""), http.StatusOK), "ends_at", ends)

	// Any buyer's order, to the admin only.
	h.fail(t, request("GET", "/v1/admin/orders/"+first, ""), http.StatusUnauthorized, events.Unauthorized)
	wantField(t, h.do(t, request("GET", "/v1/admin/orders/"+first, "", admin...), http.StatusOK), "user_id", "ann")
	h.fail(t, request("GET", "/v1/admin/orders/ctl.nosuchorder", "", admin...), http.StatusNotFound, events.OrderNotFound)

	// Bulk compensation: the confirmed order is refunded, the pending ones released; twice.
	h.confirm(t, first)
	for _, bad := range []string{`{"status": "paid"}`, `{"status": null}`, `{"status": 1}`, `{"state": "pending"}`, `null`} {
		h.fail(t, post("compensate", bad, admin...), http.StatusBadRequest, events.Invalid)
	}
	refunded := h.do(t, post("compensate", `{"status": "confirmed"}`, admin...), http.StatusOK)
	wantTally(t, refunded, 0, 1, 0)
	released := h.do(t, post("compensate", "", admin...), http.StatusOK)
	wantTally(t, released, 2, 0, 0)
	wantTally(t, h.do(t, post("compensate", "", admin...), http.StatusOK), 0, 0, 0)
	wantField(t, h.do(t, request("GET", "/v1/campaigns/ctl", ""), http.StatusOK), "remaining", float64(6))

	// Cancelled: every unit back, and nothing changes it any more.
	again := h.buy(t, "ctl", "eve", 1)
	cancelled := h.do(t, post("cancel", "", admin...), http.StatusOK)
	wantTally(t, cancelled, 1, 0, 0)
	inner, _ := cancelled["campaign"].(map[string]any)
	wantField(t, inner, "state", "cancelled")
	wantField(t, inner, "remaining", float64(6))
	wantField(t, h.do(t, request("GET", "/v1/campaigns/ctl", ""), http.StatusOK), "state", "cancelled")
	wantField(t, h.do(t, request("GET", "/v1/admin/orders/"+again, "", admin...), http.StatusOK), "status", "failed")
	wantTally(t, h.do(t, post("cancel", "", admin...), http.StatusOK), 0, 0, 0)
	h.fail(t, post("stock", `{"add": 1}`, admin...), http.StatusConflict, events.CampaignCancelled)
	h.fail(t, post("stock", `{"stock": 6}`, admin...), http.StatusConflict, events.CampaignCancelled) // its stock already
	h.fail(t, post("extend", `{"ends_at": "`+ends+`"}`, admin...), http.StatusConflict, events.CampaignCancelled)
	h.fail(t, request("POST", "/v1/campaigns/ctl/purchases", `{"quantity": 1}`, user("fay")...), http.StatusConflict, events.Ended)
}

// TestInterruptedRefundIsFinishedByARerun: a refund that stopped between the store and Redis
// (Redis failed under it) is finished by running the control again, as the README promises:
// "run again, they finish what an interrupted run left". Until then the store counts the units
// back and Redis still holds them, and the buyer's: conservation (I1) is broken and the units
// are never on sale again.
func TestInterruptedRefundIsFinishedByARerun(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "rf", "name": "Refunds", "stock": 4, "per_user_limit": 2}`)
	id := h.buy(t, "rf", "ann", 2)
	h.confirm(t, id)
	admin := h.bearer()
	refund := func() *http.Request {
		return request("POST", "/v1/admin/campaigns/rf/compensate", `{"status": "confirmed"}`, admin...)
	}

	// The bulk refund stores the refund, then waits at Redis, which dies under it.
	h.gate.close()
	answered := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.srv.Handler().ServeHTTP(rec, refund())
		answered <- rec
	}()
	within(t, 10*time.Second, "the refund reaches Redis", func() bool { return h.gate.held.Load() > 0 })
	h.mr.Close()
	h.gate.open()
	rec := <-answered
	body := rec.Body.String()
	if rec.Code != http.StatusServiceUnavailable || strings.Contains(body, "changed nothing") || !strings.Contains(body, "run this again") ||
		!strings.Contains(body, "refunded 1") {
		t.Errorf("the interrupted refund answered %d %s; want 503 saying that running it again finishes it, not that nothing changed, "+
			"and that it refunded the order", rec.Code, body)
	}
	if err := h.mr.Restart(); err != nil {
		t.Fatal(err)
	}
	wantField(t, h.do(t, request("GET", "/v1/admin/orders/"+id, "", admin...), http.StatusOK), "status", "refunded")
	if got := h.remaining(t, "rf"); got != 2 {
		t.Fatalf("after the interrupted refund Redis has %d units left; want 2, the refund's not given back yet", got)
	}

	// Run again, as the operator is told to: it finishes the refund, which the first run
	// counted.
	wantTally(t, h.do(t, refund(), http.StatusOK), 0, 0, 1)
	if got := h.remaining(t, "rf"); got != 4 {
		t.Errorf("after the rerun Redis has %d units left of 4; the refunded order's 2 never came back", got)
	}
	h.campaignShows(t, "rf", "sold", 0)
	// The buyer's count came back with the units: ann may buy her limit again.
	again := h.buy(t, "rf", "ann", 2)

	// Finished is finished: a third run, and a cancel, find no refund left to do.
	wantTally(t, h.do(t, refund(), http.StatusOK), 0, 0, 0)
	wantTally(t, h.do(t, request("POST", "/v1/admin/campaigns/rf/cancel", "", admin...), http.StatusOK), 1, 0, 0)
	wantField(t, h.do(t, request("GET", "/v1/admin/orders/"+again, "", admin...), http.StatusOK), "status", "failed")
	if got := h.remaining(t, "rf"); got != 4 {
		t.Errorf("after the cancel Redis has %d units left of 4", got)
	}
}

func wantTally(t *testing.T, m map[string]any, released, refunded, unchanged float64) {
	t.Helper()
	wantField(t, m, "released", released)
	wantField(t, m, "refunded", refunded)
	wantField(t, m, "unchanged", unchanged)
}

// TestControlsBeforeTheStartSellNothing: a campaign closed or cancelled before its start was
// left the window [start, start+1ms), which Redis opened: at the first millisecond of the
// planned sale a cancelled campaign took an order its buyer stayed charged for. The window
// is empty now, the campaign reads ended, and an extension reopens it at its planned start.
func TestControlsBeforeTheStartSellNothing(t *testing.T) {
	for _, control := range []string{"close", "cancel"} {
		t.Run(control, func(t *testing.T) {
			h := newHarness(t)
			start := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
			h.createCampaign(t, fmt.Sprintf(`{"id": "early", "name": "Stopped early", "stock": 5, "per_user_limit": 5, "starts_at": %q}`,
				start.Format(time.RFC3339)))
			h.do(t, request("POST", "/v1/admin/campaigns/early/"+control, "", h.bearer()...), http.StatusOK)
			before, err := h.store.Campaign(context.Background(), "early")
			if err != nil {
				t.Fatal(err)
			}
			// Run again, the control changes nothing: not even the version the sweeper syncs by.
			h.do(t, request("POST", "/v1/admin/campaigns/early/"+control, "", h.bearer()...), http.StatusOK)
			if after, err := h.store.Campaign(context.Background(), "early"); err != nil || after != before {
				t.Errorf("a second %s before the start left %+v, %v; want it unchanged from %+v", control, after, err, before)
			}
			h.fail(t, request("POST", "/v1/campaigns/early/purchases", `{"quantity": 1}`, user("ann")...), http.StatusConflict, events.Ended)
			h.mr.SetTime(start) // Redis's clock at the first millisecond of the planned sale
			h.fail(t, request("POST", "/v1/campaigns/early/purchases", `{"quantity": 1}`, user("bob")...), http.StatusConflict, events.Ended)
			wantField(t, h.do(t, request("GET", "/v1/campaigns/early", ""), http.StatusOK), "state", map[string]string{"close": "ended", "cancel": "cancelled"}[control])
			if control == "close" {
				ends := start.Add(time.Hour).Format(time.RFC3339)
				extended := h.do(t, request("POST", "/v1/admin/campaigns/early/extend", `{"ends_at": "`+ends+`"}`, h.bearer()...), http.StatusOK)
				wantField(t, extended, "state", "scheduled")
				wantField(t, extended, "starts_at", start.Format("2006-01-02T15:04:05Z"))
			}
		})
	}
}

// TestAddStockPastTheMaximumIsABadRequest: an add that would take the stock past its maximum is
// the client's mistake, 400, whatever its size; not a 503 that tells the admin to retry.
func TestAddStockPastTheMaximumIsABadRequest(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "big", "name": "Big", "stock": 5, "per_user_limit": 1}`)
	for _, add := range []string{"1099511627776", "9223372036854775807", "9223372036854775803"} {
		h.fail(t, request("POST", "/v1/admin/campaigns/big/stock", `{"add": `+add+`}`, h.bearer()...), http.StatusBadRequest, events.Invalid)
	}
	wantField(t, h.do(t, request("GET", "/v1/campaigns/big", ""), http.StatusOK), "stock", float64(5))
}

// TestCompensationOutlivesItsClient: an order's compensation runs to its end when the admin
// stops waiting (a client timeout, a closed console tab), as the campaign controls do: half of
// a refund is no answer.
func TestCompensationOutlivesItsClient(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "gone", "name": "Gone", "stock": 4, "per_user_limit": 2}`)
	id := h.buy(t, "gone", "ann", 2)
	h.confirm(t, id)

	h.gate.close()
	ctx, cancel := context.WithCancel(context.Background())
	answered := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.srv.Handler().ServeHTTP(rec, request("POST", "/v1/admin/orders/"+id+"/compensate", "", h.bearer()...).WithContext(ctx))
		answered <- rec
	}()
	within(t, 10*time.Second, "the refund reaches Redis", func() bool { return h.gate.held.Load() > 0 })
	cancel() // the admin's client gives up
	h.gate.open()
	rec := <-answered
	t.Logf("answered the gone client: %d %s", rec.Code, rec.Body)
	wantField(t, h.do(t, request("GET", "/v1/admin/orders/"+id, "", h.bearer()...), http.StatusOK), "status", "refunded")
	if got := h.remaining(t, "gone"); got != 4 {
		t.Errorf("the order is refunded in the store, yet Redis has %d units left of 4", got)
	}
}

// lostChangeAnswer is a store that changes the campaign and then loses the answer, as a timeout
// or a connection dropped after the commit does.
type lostChangeAnswer struct{ *store.Store }

func (s lostChangeAnswer) ChangeCampaign(ctx context.Context, id string, change func(*store.Campaign) error) (store.Campaign, []store.Order, error) {
	c, refunded, err := s.Store.ChangeCampaign(ctx, id, change)
	if err != nil {
		return c, refunded, err
	}
	return store.Campaign{}, nil, fmt.Errorf("change campaign %s: %w", id, context.DeadlineExceeded)
}

// TestAddStockWithItsAnswerLostSaysNotToAddAgain: the store added the units and its answer was
// lost. The admin was told the request changed nothing and to try again; an add sent again adds
// again, so the campaign sold twice the units the operator meant to put on sale.
func TestAddStockWithItsAnswerLostSaysNotToAddAgain(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "lost", "name": "Lost answer", "stock": 4, "per_user_limit": 2}`)
	srv := h.replica(t, lostChangeAnswer{h.store}, h.redis, kafkatest.Client(t, h.brokers))
	rec := apitest.Serve(t, h.spec, srv.Handler(), request("POST", "/v1/admin/campaigns/lost/stock", `{"add": 2}`, h.bearer()...))
	c, err := h.store.Campaign(context.Background(), "lost")
	if err != nil || c.Stock != 6 {
		t.Fatalf("the store has %+v, %v; want the units added", c, err)
	}
	if body := rec.Body.String(); rec.Code != http.StatusServiceUnavailable || strings.Contains(body, "changed nothing") || !strings.Contains(body, `\"stock\"`) {
		t.Errorf("an add whose answer was lost answered %d %s; want 503 saying it may have been made, and to send the total as stock", rec.Code, strings.TrimSpace(body))
	}
}

// redisDownForControls is Redis that takes no operator's change and cannot list a campaign's
// pending reservations: down for the length of a cancel.
type redisDownForControls struct{ *lua.Redis }

func (redisDownForControls) Sync(context.Context, lua.Campaign) (lua.Synced, error) {
	return 0, errors.New("i/o timeout")
}

func (redisDownForControls) Pending(context.Context, string, int) ([]string, error) {
	return nil, errors.New("i/o timeout")
}

// TestCancelWhoseOrdersAreLeftSaysToRunItAgain: the cancel was stored, Redis did not take the
// closed sale, and then its orders could not be resolved. The answer was the Redis step's
// "nothing needs running again", yet only running the cancel again releases and refunds its
// orders: nothing else does, and the buyers stayed charged.
func TestCancelWhoseOrdersAreLeftSaysToRunItAgain(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "cx", "name": "Cancel", "stock": 4, "per_user_limit": 2}`)
	order := h.buy(t, "cx", "ann", 1)
	srv := h.replica(t, h.store, redisDownForControls{h.redis}, kafkatest.Client(t, h.brokers))
	rec := apitest.Serve(t, h.spec, srv.Handler(), request("POST", "/v1/admin/campaigns/cx/cancel", "", h.bearer()...))
	if body := rec.Body.String(); rec.Code != http.StatusServiceUnavailable || !strings.Contains(body, "run this again") {
		t.Errorf("a cancel whose orders were left answered %d %s; want 503 saying to run it again", rec.Code, strings.TrimSpace(body))
	}
	if res, err := h.redis.Reservation(context.Background(), order); err != nil || res.State != lua.StatePending {
		t.Fatalf("order %s: %+v, %v; want it still pending, for the rerun to release", order, res, err)
	}
	h.do(t, request("POST", "/v1/admin/campaigns/cx/cancel", "", h.bearer()...), http.StatusOK)
	if got := h.remaining(t, "cx"); got != 4 {
		t.Errorf("remaining after the rerun: %d, want 4", got)
	}
}

// TestControlsWithoutABodyRefuseOne: close, cancel and an order's compensation take no body.
// One sent with fields was ignored: an operator's close with {"ends_at": tomorrow} ended the
// sale at once. A body with fields is refused and changes nothing; none, or {}, is the control.
func TestControlsWithoutABodyRefuseOne(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "nb", "name": "No body", "stock": 4, "per_user_limit": 2}`)
	order := h.buy(t, "nb", "ann", 1)
	for _, path := range []string{"/v1/admin/campaigns/nb/close", "/v1/admin/campaigns/nb/cancel", "/v1/admin/orders/" + order + "/compensate"} {
		h.fail(t, request("POST", path, `{"ends_at": "2099-01-01T00:00:00Z"}`, h.bearer()...), http.StatusBadRequest, events.Invalid)
	}
	wantField(t, h.do(t, request("GET", "/v1/campaigns/nb", ""), http.StatusOK), "state", "on_sale")
	if res, err := h.redis.Reservation(context.Background(), order); err != nil || res.State != lua.StatePending {
		t.Errorf("order %s after the refused compensation: %+v, %v; want it pending", order, res, err)
	}
	h.do(t, request("POST", "/v1/admin/campaigns/nb/close", `{}`, h.bearer()...), http.StatusOK)
}

// TestBulkCompensationWithAnEmptyChunkedBody: a body the client streams (no Content-Length)
// and that turns out empty is no body: both kinds of orders, as the spec says of an absent
// one. It was refused 400 "this request needs a JSON body".
func TestBulkCompensationWithAnEmptyChunkedBody(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "ch", "name": "Chunked", "stock": 4, "per_user_limit": 2}`)
	h.buy(t, "ch", "ann", 1)
	req := request("POST", "/v1/admin/campaigns/ch/compensate", "", h.bearer()...)
	req.Body, req.ContentLength = io.NopCloser(strings.NewReader("")), -1
	wantTally(t, h.do(t, req, http.StatusOK), 1, 0, 0)
}

// paidUnitsDown is a store that makes changes but cannot sum paid units right after.
type paidUnitsDown struct{ *store.Store }

func (paidUnitsDown) PaidUnits(context.Context, string) (int64, error) {
	return 0, errors.New("connection refused")
}

// TestAddStockWhoseViewFailsSaysItWasMade: the units were added, in the store and in Redis, and
// then the campaign could not be read back to answer. The answer was "the request changed
// nothing, try again": sent again, an add adds again.
func TestAddStockWhoseViewFailsSaysItWasMade(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "vf", "name": "View fails", "stock": 4, "per_user_limit": 2, "payment_window_seconds": 60}`)
	srv := h.replica(t, paidUnitsDown{h.store}, h.redis, kafkatest.Client(t, h.brokers))
	rec := apitest.Serve(t, h.spec, srv.Handler(), request("POST", "/v1/admin/campaigns/vf/stock", `{"add": 2}`, h.bearer()...))
	if got := h.remaining(t, "vf"); got != 6 {
		t.Fatalf("remaining %d, want the 2 units added", got)
	}
	if body := rec.Body.String(); strings.Contains(body, "changed nothing") || !strings.Contains(body, "was changed") {
		t.Errorf("an add made whose view failed answered %d %s; want it to say the campaign was changed", rec.Code, strings.TrimSpace(body))
	}
}

// TestEndedCampaignOnceLostByRedisSaysEnded: an api that once found a campaign missing from
// Redis (it lost its data; the store had the campaign) answered "being restored" to its
// purchases, and went on answering so after the campaign ended and its keys left Redis,
// until the api restarted: buyers told to retry a sale that was over. It now asks the store,
// through the campaign cache, each time, and says the campaign has ended.
func TestEndedCampaignOnceLostByRedisSaysEnded(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "kr", "name": "Known", "stock": 5, "per_user_limit": 1}`)
	h.mr.FlushAll()
	h.fail(t, request("POST", "/v1/campaigns/kr/purchases", `{"quantity": 1}`, user("ann")...), http.StatusServiceUnavailable, events.Unavailable)
	h.do(t, request("POST", "/v1/admin/campaigns/kr/close", "", h.bearer()...), http.StatusOK)
	c, err := h.store.Campaign(context.Background(), "kr")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.redis.Drop(context.Background(), "kr", c.Version); err != nil {
		t.Fatal(err)
	}
	h.fail(t, request("POST", "/v1/campaigns/kr/purchases", `{"quantity": 1}`, user("bob")...), http.StatusConflict, events.Ended)
}

// syncFails is Redis that takes no operator's change: a cancel's Redis step fails, and its
// orders are given back all the same.
type syncFails struct{ *lua.Redis }

func (syncFails) Sync(context.Context, lua.Campaign) (lua.Synced, error) {
	return 0, errors.New("i/o timeout")
}

// confirmedUnreadable is a store whose confirmed orders cannot be read: a cancel stops after
// releasing the pending reservations.
type confirmedUnreadable struct{ *store.Store }

func (confirmedUnreadable) Confirmed(context.Context, string) ([]store.Order, error) {
	return nil, errors.New("read tcp 10.0.0.2:5432: connection reset by peer")
}

// TestCancelThatFailsPartWaySaysWhatItGaveBack: a cancel whose Redis step failed, or which
// stopped part way, has released and refunded orders already, and Cancel returns its tally with
// the error. The answer was the error alone, so the operator never learned what the cancel gave
// back (the command prints it). The answer keeps its code, and says the tally.
func TestCancelThatFailsPartWaySaysWhatItGaveBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   func(*store.Store) api.Store
		r    func(*lua.Redis) api.Redis
		want []string
	}{
		{"its sale behind", func(s *store.Store) api.Store { return s }, func(r *lua.Redis) api.Redis { return syncFails{r} },
			[]string{"nothing needs running again", "released 1, refunded 0, unchanged 0"}},
		{"stopped part way", func(s *store.Store) api.Store { return confirmedUnreadable{s} }, func(r *lua.Redis) api.Redis { return r },
			[]string{"released 1, refunded 0, unchanged 0", "run this again to finish it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.createCampaign(t, `{"id": "pw", "name": "Part way", "stock": 4, "per_user_limit": 2}`)
			h.buy(t, "pw", "ann", 1)
			srv := h.replica(t, tc.st(h.store), tc.r(h.redis), kafkatest.Client(t, h.brokers))
			rec := apitest.Serve(t, h.spec, srv.Handler(), request("POST", "/v1/admin/campaigns/pw/cancel", "", h.bearer()...))
			body := rec.Body.String()
			if rec.Code != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"unavailable"`) {
				t.Errorf("answered %d %s; want 503 unavailable", rec.Code, strings.TrimSpace(body))
			}
			for _, want := range tc.want {
				if !strings.Contains(body, want) {
					t.Errorf("answered %s; want it to say %q", strings.TrimSpace(body), want)
				}
			}
		})
	}
}

// paidUnreadable is the store with its paid units unreadable: a campaign with a payment window
// cannot be shown.
type paidUnreadable struct{ api.Store }

func (paidUnreadable) PaidUnits(context.Context, string) (int64, error) {
	return 0, errors.New("connection refused")
}

// TestCancelDoneButUnshownSaysWhatItGaveBack: a cancel that released and refunded its orders,
// then could not read its campaign back, answered the read's own error ("changed nothing, try
// again"), with no word of what it gave back, which a second cancel does not count again. It
// says the campaign was changed, and what became of its orders.
func TestCancelDoneButUnshownSaysWhatItGaveBack(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "cu", "name": "Unshown", "stock": 4, "per_user_limit": 2, "payment_window_seconds": 60}`)
	h.buy(t, "cu", "ann", 1)
	srv := h.replica(t, paidUnreadable{h.store}, h.redis, kafkatest.Client(t, h.brokers))
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, request("POST", "/v1/admin/campaigns/cu/cancel", "", h.bearer()...))
	body := rec.Body.String()
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(body, "was changed") || !strings.Contains(body, "released 1") {
		t.Errorf("cancel answered %d %s; want 503 saying the campaign was changed and that it released 1", rec.Code, body)
	}
}
