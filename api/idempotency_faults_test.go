package api_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/apitest"
	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// flakyProducer fails every produce while fail is set; with deliver, the record reaches Kafka
// all the same and only its acknowledgement is lost.
type flakyProducer struct {
	api.Producer
	fail, deliver atomic.Bool
}

func (p *flakyProducer) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	switch {
	case !p.fail.Load():
		p.Producer.Produce(ctx, r, promise)
	case p.deliver.Load():
		p.Producer.Produce(ctx, r, func(r *kgo.Record, _ error) { promise(r, errors.New("acknowledgement lost")) })
	default:
		promise(r, errors.New("broker down"))
	}
}

func (p *flakyProducer) TryProduce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.Produce(ctx, r, promise)
}

// flakyRedis fails Release while failRelease is set (a timeout, a failover).
type flakyRedis struct {
	*lua.Redis
	failRelease atomic.Bool
}

func (r *flakyRedis) Release(ctx context.Context, orderID string) (lua.Outcome, error) {
	if r.failRelease.Load() {
		return lua.Outcome{}, errors.New("i/o timeout")
	}
	return r.Redis.Release(ctx, orderID)
}

// downStore cannot fail orders (the database is unreachable).
type downStore struct{ *store.Store }

func (downStore) FailOrderFenced(context.Context, events.Event, string, store.Fence) (store.Order, error) {
	return store.Order{}, errors.New("connection refused")
}

// replica starts another api on the harness's dependencies (its own breaker and sold-out flag).
func (h *harness) replica(t *testing.T, st api.Store, r api.Redis, p api.Producer) *api.Server {
	t.Helper()
	s := api.New(h.cfg, st, r, p)
	t.Cleanup(s.Close)
	return s
}

// TestKeyedRetryOfAnOrderFailedInTheStore: the produce failed, the api failed the order in the
// store, and only Redis's release failed. The order is failed for good (the consumer never
// confirms a failed order), so the buyer is told it was cancelled, and so is a retry of the key
// at another api. The key used to be forgotten as if the outcome were unknown: the retry found
// the reservation still pending, produced it again and answered 202 for an order that would
// never be confirmed.
func TestKeyedRetryOfAnOrderFailedInTheStore(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "rf", "name": "Release fails", "stock": 5, "per_user_limit": 5}`)
	p := &flakyProducer{Producer: kafkatest.Client(t, h.brokers)}
	rd := &flakyRedis{Redis: h.redis}
	p.fail.Store(true)
	rd.failRelease.Store(true)
	first := apitest.Serve(t, h.spec, h.replica(t, h.store, rd, p).Handler(), keyed("rf", "alice", "k-1", `{"quantity": 1}`))
	if first.Code != http.StatusServiceUnavailable {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	id := api.KeyedOrderID(h.srv, "rf", "alice", "k-1")
	if o, err := h.store.Order(context.Background(), id); err != nil || o.Status != events.Failed {
		t.Fatalf("the store has %+v, %v; want it failed", o, err)
	}

	// Kafka and Redis are back; the buyer retries with the same key (here at another api).
	p.fail.Store(false)
	rd.failRelease.Store(false)
	again := apitest.Serve(t, h.spec, h.replica(t, h.store, rd, p).Handler(), keyed("rf", "alice", "k-1", `{"quantity": 1}`))
	o, err := h.store.Order(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if again.Code == http.StatusAccepted && o.Status == events.Failed {
		t.Errorf("the retry answered %d %s for order %s, which the store holds %s: it will never be confirmed",
			again.Code, strings.TrimSpace(again.Body.String()), id, o.Status)
	}
}

// TestKeyedRetryOfAnUnsettledOrderWhileSoldOut: the produce's acknowledgement was lost and the
// store could not fail the order, so its outcome is not known and the key is forgotten: "the
// retry queues that order again" (README). Once this api had seen the campaign sold out (the
// order's own reservation holding the last unit), its fast path peeked at the key, found no
// record and answered 409 sold_out without asking Redis; the consumer then confirmed the order
// the buyer had been told they could not have. A key with no record whose order holds a
// reservation goes on now, and the reserve script answers for that order.
func TestKeyedRetryOfAnUnsettledOrderWhileSoldOut(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "so", "name": "Sold out", "stock": 1, "per_user_limit": 1}`)
	p := &flakyProducer{Producer: kafkatest.Client(t, h.brokers)}
	p.fail.Store(true)
	p.deliver.Store(true)
	first := apitest.Serve(t, h.spec, h.replica(t, downStore{h.store}, h.redis, p).Handler(), keyed("so", "alice", "k-1", `{"quantity": 1}`))
	if first.Code != http.StatusServiceUnavailable || !strings.Contains(first.Body.String(), "not known yet") {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	id := api.KeyedOrderID(h.srv, "so", "alice", "k-1")

	other := h.replica(t, h.store, h.redis, kafkatest.Client(t, h.brokers))
	bob := apitest.Serve(t, h.spec, other.Handler(), request("POST", "/v1/campaigns/so/purchases", `{"quantity": 1}`, user("bob")...))
	if bob.Code != http.StatusConflict {
		t.Fatalf("bob: %d %s", bob.Code, bob.Body)
	}
	again := apitest.Serve(t, h.spec, other.Handler(), keyed("so", "alice", "k-1", `{"quantity": 1}`))
	h.confirm(t, id) // the event reached Kafka after all: the consumer confirms it
	o, err := h.store.Order(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if again.Code != http.StatusAccepted {
		t.Errorf("the retry answered %d %s; its order %s is %s", again.Code, strings.TrimSpace(again.Body.String()), id, o.Status)
	}
}

// TestKeyedRetryOfACancelledOrderAfterRedisLoss: the first purchase could not be queued, so its
// order was cancelled (503, remembered under its key) and the store holds it failed. Then Redis
// lost its data, and the compensator's guard rebuilt the campaign from the store. The rebuild
// restored the records of confirmed orders only, so the key's record and the order's released
// record were both gone: the retry derived the same order id from the key, reserved it anew and
// answered 202 for an order the store holds failed, its units held until the sweeper gave them
// back at the deadline. Redis keeps an ended order's record for the retention exactly so that a
// retry finds it ended; the rebuild now restores those records too.
func TestKeyedRetryOfACancelledOrderAfterRedisLoss(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "rl", "name": "Redis lost", "stock": 5, "per_user_limit": 5}`)
	p := &flakyProducer{Producer: kafkatest.Client(t, h.brokers)}
	p.fail.Store(true)
	first := apitest.Serve(t, h.spec, h.replica(t, h.store, h.redis, p).Handler(), keyed("rl", "alice", "k-1", `{"quantity": 2}`))
	if first.Code != http.StatusServiceUnavailable || !strings.Contains(first.Body.String(), "was cancelled") {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	ctx := context.Background()
	id := api.KeyedOrderID(h.srv, "rl", "alice", "k-1")
	if o, err := h.store.Order(ctx, id); err != nil || o.Status != events.Failed {
		t.Fatalf("the store has %+v, %v; want it failed", o, err)
	}

	// Redis loses its data; the guard's round rebuilds the campaign from the store.
	h.mr.FlushAll()
	comp, err := compensator.New(compensator.Config{Brokers: h.brokers, Topics: h.topics, RebuildGrace: time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)}, h.store, h.redis)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(comp.Close)
	if err := comp.CheckRedis(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.remaining(t, "rl"); got != 5 {
		t.Fatalf("remaining after the rebuild: %d, want 5", got)
	}

	p.fail.Store(false)
	again := apitest.Serve(t, h.spec, h.replica(t, h.store, h.redis, p).Handler(), keyed("rl", "alice", "k-1", `{"quantity": 2}`))
	o, err := h.store.Order(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if again.Code != http.StatusServiceUnavailable || !strings.Contains(again.Body.String(), "was cancelled") {
		t.Errorf("the retry answered %d %s for order %s, which the store holds %s; want it told cancelled",
			again.Code, strings.TrimSpace(again.Body.String()), id, o.Status)
	}
	if got := h.remaining(t, "rl"); got != 5 {
		t.Errorf("remaining after the retry: %d, want 5 (the cancelled order's units taken again)", got)
	}
}

// TestKeyedRetryAfterADeathBetweenFailAndRelease: the first purchase's produce failed and the
// api failed its order in the store, then died before Redis released the reservation and before
// the key's answer was remembered (or Redis refused both). The key's retry found the
// reservation still pending, produced it again and answered 202, remembered for good, for an
// order the store holds failed and the consumer never confirms.
func TestKeyedRetryAfterADeathBetweenFailAndRelease(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "fr", "name": "Died half way", "stock": 5, "per_user_limit": 5}`)
	ctx := context.Background()
	id := api.KeyedOrderID(h.srv, "fr", "alice", "k-1")
	res, err := h.redis.Reserve(ctx, "fr", id, "alice", 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ev := events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: time.Now().UTC(),
		OrderID: id, CampaignID: "fr", UserID: "alice", Quantity: 2, Deadline: res.Deadline}
	if _, err := h.store.FailOrderFenced(ctx, ev, events.ReasonProduce, store.Fence{}); err != nil {
		t.Fatal(err)
	}

	again := h.serve(t, keyed("fr", "alice", "k-1", `{"quantity": 2}`))
	if again.Code != http.StatusServiceUnavailable || !strings.Contains(again.Body.String(), "was cancelled") {
		t.Errorf("the retry answered %d %s for order %s, which the store holds failed; want it told cancelled",
			again.Code, strings.TrimSpace(again.Body.String()), id)
	}
	if got := h.remaining(t, "fr"); got != 5 {
		t.Errorf("remaining after the retry: %d, want 5 (the failed order's units given back)", got)
	}
}

// hungStore's Order reads wait until their context ends, as on a database that stopped
// answering mid-query (a full disk, a lock held for good, a network cut without a reset).
type hungStore struct{ *store.Store }

func (hungStore) Order(ctx context.Context, _ string) (store.Order, error) {
	<-ctx.Done()
	return store.Order{}, ctx.Err()
}

// TestKeyedRetryWhileTheStoreHangs: a keyed retry that finds its reservation still pending asks
// the store whether an earlier attempt failed the order. That read had no bound of its own: on
// a store that stopped answering, the purchase waited as long as its buyer did, past the key's
// lease (a retry then takes the key over while this one goes on), holding a connection. It is
// bounded as cancel's steps are (ProduceTimeout), and a store that cannot say lets the purchase
// go on, as before the check.
func TestKeyedRetryWhileTheStoreHangs(t *testing.T) {
	logs := &levelCounter{n: map[slog.Level]int{}}
	h := newHarness(t, func(c *api.Config) { c.ProduceTimeout, c.Logger = time.Second, slog.New(logs) })
	h.createCampaign(t, `{"id": "sh", "name": "Store hangs", "stock": 5, "per_user_limit": 5}`)
	id := api.KeyedOrderID(h.srv, "sh", "alice", "k-1")
	// Reserved a moment ago by a first attempt that stopped before its produce (not overdue).
	if _, err := h.redis.Reserve(context.Background(), "sh", id, "alice", 2, time.Hour); err != nil {
		t.Fatal(err)
	}
	srv := h.replica(t, hungStore{h.store}, h.redis, kafkatest.Client(t, h.brokers))
	answered := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		answered <- apitest.Serve(t, h.spec, srv.Handler(), keyed("sh", "alice", "k-1", `{"quantity": 2}`))
	}()
	select {
	case again := <-answered:
		if again.Code != http.StatusAccepted {
			t.Errorf("the retry answered %d %s; want 202, the store not saying the order failed", again.Code, strings.TrimSpace(again.Body.String()))
		}
		// The store's silence is a failed dependency, said at WARN.
		if n := logs.take(); n[slog.LevelWarn] == 0 {
			t.Errorf("the store's read timed out and nothing was logged at WARN: %v", n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the keyed retry still waits on the hung store after 20 s (its lease is 30 s)")
	}
}

// TestOrderReadWhileTheStoreHangs: GET /v1/orders/{id} read the store with the request's
// context alone: on a store that stopped answering it waited as long as its client did (and a
// stopping api's drain with it). It answers 503 once orderReadTimeout has passed.
func TestOrderReadWhileTheStoreHangs(t *testing.T) {
	spec := apitest.LoadSpec(t)
	synctest.Test(t, func(t *testing.T) {
		srv := api.New(api.Config{InsecureUserHeader: true, Logger: slog.New(slog.DiscardHandler)},
			hungStore{}, unreadableRedis{}, nil) // the store's error is answered: Redis's is not used
		defer srv.Close()
		ctx, hangUp := context.WithCancel(context.Background())
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/orders/"+events.NewOrderID("sh"), nil)
		req.Header.Set("X-User-ID", "alice")
		answered := make(chan *httptest.ResponseRecorder, 1)
		go func() {
			answered <- apitest.Serve(t, spec, srv.Handler(), req)
		}()
		defer func() { hangUp(); synctest.Wait() }() // a test that fails leaves no request in the bubble
		time.Sleep(api.OrderReadTimeout - time.Nanosecond)
		synctest.Wait()
		select {
		case got := <-answered:
			t.Fatalf("GET of an order on a hung store answered %d before %v", got.Code, api.OrderReadTimeout)
		default:
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		select {
		case got := <-answered:
			if got.Code != http.StatusServiceUnavailable {
				t.Errorf("GET of an order on a hung store answered %d %s; want 503", got.Code, strings.TrimSpace(got.Body.String()))
			}
		default:
			t.Fatalf("GET of an order still waits on the hung store %v after it asked", api.OrderReadTimeout)
		}
	})
}

// TestKeyedRetryNearItsReservationsDeadline: the first purchase reserved and stopped before its
// produce; the key's retry comes when the reservation's deadline has passed (or is close). It
// found the reservation still pending, produced it with that deadline and answered 202, and the
// sweeper, finding the order overdue and not stored, failed it before the consumer stored it:
// a 202 remembered for good for an order that was over. The retry now cancels the order, as
// the sweeper would, and says so; its units are back on sale.
func TestKeyedRetryNearItsReservationsDeadline(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "pd", "name": "Past deadline", "stock": 5, "per_user_limit": 5}`)
	ctx := context.Background()
	id := api.KeyedOrderID(h.srv, "pd", "alice", "k-1")
	if _, err := h.redis.Reserve(ctx, "pd", id, "alice", 2, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // past the reservation's 50 ms deadline

	again := h.serve(t, keyed("pd", "alice", "k-1", `{"quantity": 2}`))
	if again.Code != http.StatusServiceUnavailable || !strings.Contains(again.Body.String(), "was cancelled") {
		t.Errorf("the retry past its reservation's deadline answered %d %s; want it told cancelled",
			again.Code, strings.TrimSpace(again.Body.String()))
	}
	// As a failed produce: nobody knows whether the first attempt's event reached Kafka.
	if o, err := h.store.Order(ctx, id); err != nil || o.Status != events.Failed || o.Reason != events.ReasonProduce {
		t.Errorf("order %s in the store: %+v, %v; want failed, %s", id, o, err, events.ReasonProduce)
	}
	if got := h.remaining(t, "pd"); got != 5 {
		t.Errorf("remaining after the retry: %d, want 5", got)
	}
}

// TestKeyedRetryWhileTheBreakerIsOpen: the first purchase's event reached Kafka but its
// acknowledgement was lost and the store could not fail it, so the api answered 503 "not known
// yet" and forgot the key; the consumer then confirmed the order. Kafka kept failing for other
// buyers and the api's breaker opened. The key's retry was refused before the reserve script
// could answer for its order: 503 "nothing was reserved", to a buyer whose order is confirmed.
func TestKeyedRetryWhileTheBreakerIsOpen(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "bo", "name": "Breaker open", "stock": 10, "per_user_limit": 5}`)
	p := &flakyProducer{Producer: kafkatest.Client(t, h.brokers)}
	p.fail.Store(true)
	p.deliver.Store(true)
	srv := h.replica(t, downStore{h.store}, h.redis, p).Handler()
	first := apitest.Serve(t, h.spec, srv, keyed("bo", "alice", "k-1", `{"quantity": 1}`))
	if first.Code != http.StatusServiceUnavailable || !strings.Contains(first.Body.String(), "not known yet") {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	id := api.KeyedOrderID(h.srv, "bo", "alice", "k-1")
	h.confirm(t, id) // the event reached Kafka after all

	// Kafka goes on failing: three bursts of failed produces open this api's breaker.
	p.deliver.Store(false)
	for i := range 3 {
		if i > 0 {
			time.Sleep(300 * time.Millisecond) // failures within 250 ms of a burst's first are one
		}
		apitest.Serve(t, h.spec, srv, request("POST", "/v1/campaigns/bo/purchases", `{"quantity": 1}`, user("bob")...))
	}
	refused := apitest.Serve(t, h.spec, srv, request("POST", "/v1/campaigns/bo/purchases", `{"quantity": 1}`, user("carol")...))
	if refused.Code != http.StatusServiceUnavailable || !strings.Contains(refused.Body.String(), "nothing was reserved") {
		t.Fatalf("the breaker is not open: %d %s", refused.Code, refused.Body)
	}

	again := apitest.Serve(t, h.spec, srv, keyed("bo", "alice", "k-1", `{"quantity": 1}`))
	if again.Code != http.StatusAccepted || !strings.Contains(again.Body.String(), id) {
		t.Errorf("the retry answered %d %s for order %s, which is confirmed", again.Code, strings.TrimSpace(again.Body.String()), id)
	}
}

// TestKeyedRetryNearItsDeadlineWhileTheStoreFails: the overdue retry of
// TestKeyedRetryNearItsReservationsDeadline, while the store refuses writes. The store cannot
// fail the order, so the purchase goes on as designed, but the store's error was dropped
// without a word: a failed dependency is logged at WARN.
func TestKeyedRetryNearItsDeadlineWhileTheStoreFails(t *testing.T) {
	logs := &levelCounter{n: map[slog.Level]int{}}
	h := newHarness(t, func(c *api.Config) { c.Logger = slog.New(logs) })
	h.createCampaign(t, `{"id": "pf", "name": "Past deadline, store down", "stock": 5, "per_user_limit": 5}`)
	id := api.KeyedOrderID(h.srv, "pf", "alice", "k-1")
	if _, err := h.redis.Reserve(context.Background(), "pf", id, "alice", 2, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // past the reservation's 50 ms deadline
	srv := h.replica(t, downStore{h.store}, h.redis, kafkatest.Client(t, h.brokers))
	logs.take()
	again := apitest.Serve(t, h.spec, srv.Handler(), keyed("pf", "alice", "k-1", `{"quantity": 2}`))
	if n := logs.take(); n[slog.LevelWarn]+n[slog.LevelError] == 0 {
		t.Errorf("the store refused to fail the overdue order (answer %d) and nothing was logged at WARN: %v", again.Code, n)
	}
}

// TestSoldOutKeyedPurchaseTakesNoProbe: while the Kafka breaker is open it lets one purchase a
// cooldown through as a probe. A keyed purchase of a campaign this api knows is sold out took
// that probe and then was refused by the flag, before Redis or Kafka: Kafka was back, and a
// buyer of a campaign on sale was still refused 503, for another cooldown, and for as long as
// a keyed crowd of a sold-out campaign took every probe first.
func TestSoldOutKeyedPurchaseTakesNoProbe(t *testing.T) {
	h := newHarness(t, func(c *api.Config) { c.SoldOutTTL = time.Minute })
	h.createCampaign(t, `{"id": "gone", "name": "Sold out", "stock": 1, "per_user_limit": 1}`)
	h.createCampaign(t, `{"id": "open", "name": "On sale", "stock": 10, "per_user_limit": 5}`)
	p := &flakyProducer{Producer: kafkatest.Client(t, h.brokers)}
	srv := h.replica(t, h.store, h.redis, p).Handler()
	buy := func(r *http.Request) *httptest.ResponseRecorder { return apitest.Serve(t, h.spec, srv, r) }

	if got := buy(request("POST", "/v1/campaigns/gone/purchases", `{"quantity": 1}`, user("ann")...)); got.Code != http.StatusAccepted {
		t.Fatalf("the last unit: %d %s", got.Code, got.Body)
	}
	if got := buy(keyed("gone", "bob", "k-0", `{"quantity": 1}`)); got.Code != http.StatusConflict { // Redis says sold out: flagged
		t.Fatalf("after the last unit: %d %s", got.Code, got.Body)
	}
	p.fail.Store(true)
	for i := range 3 {
		if i > 0 {
			time.Sleep(300 * time.Millisecond) // failures within 250 ms of a burst's first are one
		}
		buy(request("POST", "/v1/campaigns/open/purchases", `{"quantity": 1}`, user("carol")...))
	}
	if got := buy(request("POST", "/v1/campaigns/open/purchases", `{"quantity": 1}`, user("carol")...)); got.Code != http.StatusServiceUnavailable {
		t.Fatalf("the breaker is not open: %d %s", got.Code, got.Body)
	}
	p.fail.Store(false) // Kafka is back
	// Past the breaker's cooldown (1 s), by the api's clock: the next purchase may probe.
	time.Sleep(1100 * time.Millisecond)

	if got := buy(keyed("gone", "bob", "k-1", `{"quantity": 1}`)); got.Code != http.StatusConflict {
		t.Fatalf("a keyed purchase of the sold-out campaign: %d %s", got.Code, got.Body)
	}
	if got := buy(request("POST", "/v1/campaigns/open/purchases", `{"quantity": 1}`, user("dave")...)); got.Code != http.StatusAccepted {
		t.Errorf("the probe after Kafka came back answered %d %s; want 202", got.Code, strings.TrimSpace(got.Body.String()))
	}
}
