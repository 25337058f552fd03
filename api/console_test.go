package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// TestConsoleContract checks what the console's endpoints answer: the page with a policy that
// allows only its own files, and the admin-only stream of snapshots, each checked against the
// ConsoleSnapshot schema, that sees a sale as it happens.
func TestConsoleContract(t *testing.T) {
	h := newHarness(t)
	srv := httptest.NewServer(h.srv.Handler())
	defer srv.Close()

	page, err := http.Get(srv.URL + "/console")
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	if csp := page.Header.Get("Content-Security-Policy"); page.StatusCode != http.StatusOK || !strings.Contains(csp, "script-src 'self'") ||
		strings.Contains(csp, "unsafe-inline") || page.Header.Get("X-Frame-Options") != "DENY" || page.Header.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("the page: %d %v", page.StatusCode, page.Header)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	root, err := noRedirect.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	root.Body.Close()
	if root.StatusCode != http.StatusFound || root.Header.Get("Location") != "/console" {
		t.Errorf("GET /: %d %s", root.StatusCode, root.Header.Get("Location"))
	}
	h.fail(t, request("GET", "/v1/admin/console/events", ""), http.StatusUnauthorized, "unauthorized")

	h.createCampaign(t, `{"id": "live", "name": "Live", "stock": 10, "per_user_limit": 3}`)
	h.buy(t, "live", "ann", 3)

	stream := openConsole(t, srv.URL, h.admin)
	defer stream.close()
	schema := h.spec.Components.Schemas["ConsoleSnapshot"].Value
	var snaps []api.ConsoleSnapshot
	for len(snaps) < 3 {
		s, raw := stream.next(t)
		if err := schema.VisitJSON(raw, openapi3.MultiErrors()); err != nil {
			t.Errorf("a snapshot breaks the ConsoleSnapshot schema: %v\n%v", err, raw)
		}
		snaps = append(snaps, s)
		if len(snaps) == 1 {
			h.buy(t, "live", "bob", 2) // the next snapshots see it
		}
	}
	if gap := snaps[2].At.Sub(snaps[1].At); gap < 500*time.Millisecond || gap > 3*time.Second {
		t.Errorf("snapshots %v apart, want about a second", gap)
	}
	var live *api.ConsoleCampaign
	for i := range snaps[2].Campaigns {
		if snaps[2].Campaigns[i].ID == "live" {
			live = &snaps[2].Campaigns[i]
		}
	}
	if live == nil || live.Remaining != 5 || live.Pending != 5 || live.State != "on_sale" {
		t.Fatalf("the campaign in the last snapshot: %+v", live)
	}
	var accepted float64
	for _, s := range snaps[1:] {
		accepted += s.Purchases["accepted"]
	}
	if accepted <= 0 || snaps[1].ConsumerLag < 0 {
		t.Errorf("the purchase after the first snapshot is not in the next ones: %+v %+v", snaps[1], snaps[2])
	}
}

// countingStore counts the console's per-snapshot query.
type countingStore struct {
	api.Store
	calls atomic.Int64
}

func (c *countingStore) UnitsByStatus(ctx context.Context, campaigns []string) ([]store.Units, error) {
	c.calls.Add(1)
	return c.Store.UnitsByStatus(ctx, campaigns)
}

// TestConsoleQueriesOncePerSecond opens three consoles at once: the store is asked once a
// second for all of them, not once per page, and with none open it is not asked at all.
func TestConsoleQueriesOncePerSecond(t *testing.T) {
	h := newHarness(t)
	st := &countingStore{Store: h.store}
	srv := api.New(h.cfg, st, h.redis, kafkatest.Client(t, h.brokers))
	defer srv.Close()
	web := httptest.NewServer(srv.Handler())
	defer web.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var snapshots atomic.Int64
	start := time.Now()
	for range 3 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", web.URL+"/v1/admin/console/events", nil)
			req.Header.Set("Authorization", "Bearer "+h.admin)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			lines := bufio.NewScanner(resp.Body)
			for lines.Scan() {
				if strings.HasPrefix(lines.Text(), "data: ") && snapshots.Add(1) == 9 {
					cancel() // three snapshots each
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	calls := st.calls.Load()
	t.Logf("%d snapshots to 3 pages in %v: %d store queries", snapshots.Load(), elapsed.Round(time.Millisecond), calls)
	if snapshots.Load() < 9 || calls > int64(elapsed/time.Second)+2 {
		t.Errorf("%d snapshots, %d queries in %v: want one query a second for all the pages", snapshots.Load(), calls, elapsed)
	}
	// Every page gone: the loop stops, after at most the snapshot it was in.
	within(t, 10*time.Second, "the snapshot loop stops once no page is open", func() bool { return goroutines("api.(*console).run(") == 0 })
	if after := st.calls.Load(); after > calls+1 {
		t.Errorf("the store was asked %d more times with no page open", after-calls)
	}
}

func TestGivenBackBy(t *testing.T) {
	for _, tc := range []struct {
		status events.Status
		reason string
		want   string
	}{
		{events.Confirmed, "", ""},
		{events.Paid, "", ""},
		{events.Refunded, events.ReasonOperator, "operator refund"},
		{events.Expired, events.ReasonUnpaid, "payment window"},
		// Their units not back in Redis yet: being given back, not given back.
		{events.Refunded, "", ""},
		{events.Expired, "", ""},
		{events.Failed, events.ReasonExpired, "sweeper"},
		{events.Failed, events.ReasonOperator, "operator"},
		{events.Failed, events.ReasonProduce, "api (produce failed)"},
		{events.Failed, events.ReasonStoreSoldOut, "dead letter (store_sold_out)"},
		// Stored by a replay or by the consumer meeting the event again after a restore: the
		// label says what is known, not which of them stored it.
		{events.Failed, events.ReasonReleasedBeforeReplay, "unknown (given back in Redis before the store had the order)"},
	} {
		if got := api.GivenBackBy(tc.status, tc.reason); got != tc.want {
			t.Errorf("GivenBackBy(%s, %q) = %q, want %q", tc.status, tc.reason, got, tc.want)
		}
	}
}

// TestConsoleCloseWaitsForLoops: a page comes just after the last one left, while the loop
// told to stop is still in its snapshot (held at Redis); a second loop serves the new page, and
// Server.Close waits for both.
func TestConsoleCloseWaitsForLoops(t *testing.T) {
	h := newHarness(t)
	srv := httptest.NewServer(h.srv.Handler())
	defer srv.Close()
	if n := goroutines("api.(*console).run("); n != 0 {
		t.Fatalf("%d snapshot loops before any page opened", n)
	}

	// A campaign of the store alone (never put on sale) is one the snapshot asks Redis about,
	// and one that can be deleted again.
	held := store.Campaign{ID: "held", Name: "Held", Stock: 10, PerUserLimit: 3, CreatedAtMs: time.Now().UnixMilli()}
	if err := h.store.CreateCampaign(context.Background(), held); err != nil {
		t.Fatal(err)
	}
	c := openConsole(t, srv.URL, h.admin)
	defer c.close()
	c.next(t)
	h.gate.close()
	opened := false
	defer func() {
		if !opened { // or Server.Close, in the cleanup, waits on the held loop for ever
			h.gate.open()
		}
	}()
	within(t, 10*time.Second, "the loop's next snapshot waits at Redis", func() bool { return h.gate.held.Load() > 0 })
	c.close()
	within(t, 10*time.Second, "the page's stream ends", func() bool { return goroutines("api.(*Server).consoleEvents(") == 0 })
	// Without the campaign, the next loop's snapshots do not ask Redis. No path of seckill deletes
	// a campaign: the test does it in SQL.
	if _, err := h.store.DB().Exec(`DELETE FROM campaigns WHERE id = 'held'`); err != nil {
		t.Fatalf("delete the campaign: %v", err)
	}
	d := openConsole(t, srv.URL, h.admin)
	defer d.close()
	d.next(t)
	if n := goroutines("api.(*console).run("); n != 2 {
		t.Fatalf("%d snapshot loops, want the held one and the new page's", n)
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		h.srv.Close()
	}()
	select {
	case <-closed:
		t.Errorf("Server.Close returned while a stopped loop was still in its snapshot")
	case <-time.After(300 * time.Millisecond):
	}
	h.gate.open()
	opened = true
	<-closed
	if n := goroutines("api.(*console).run("); n != 0 {
		t.Errorf("%d snapshot loops still running after Server.Close returned", n)
	}
}

// within fails the test unless cond holds within d.
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
	}
}

// consoleStream is one page's stream of console snapshots.
type consoleStream struct {
	lines *bufio.Scanner
	close context.CancelFunc
}

// openConsole opens the snapshot stream as a page does, with the admin token.
func openConsole(t *testing.T, base, admin string) *consoleStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/admin/console/events", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		t.Fatalf("the stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	return &consoleStream{lines: lines, close: func() { cancel(); resp.Body.Close() }}
}

// next returns the stream's next snapshot, decoded and as JSON values.
func (c *consoleStream) next(t *testing.T) (api.ConsoleSnapshot, any) {
	t.Helper()
	for c.lines.Scan() {
		data, ok := strings.CutPrefix(c.lines.Text(), "data: ")
		if !ok {
			continue
		}
		var s api.ConsoleSnapshot
		var raw any
		if err := json.Unmarshal([]byte(data), &s); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(data), &raw); err != nil {
			t.Fatal(err)
		}
		return s, raw
	}
	t.Fatalf("the stream ended before a snapshot: %v", c.lines.Err())
	return api.ConsoleSnapshot{}, nil
}

// goroutines counts the goroutines whose stack holds fn, of every server in the process.
func goroutines(fn string) int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), fn)
}

// darkShard is a Redis whose shard holding one campaign is out of reach: it refuses the
// connection, or with hang, takes every packet and answers none (a partition), so that a call
// waits until its context ends.
type darkShard struct {
	api.Redis
	campaign string
	hang     bool
}

func (r darkShard) Sale(ctx context.Context, campaign string) (lua.Sale, error) {
	switch {
	case campaign != r.campaign:
		return r.Redis.Sale(ctx, campaign)
	case r.hang:
		<-ctx.Done()
		return lua.Sale{}, ctx.Err()
	}
	return lua.Sale{}, errors.New("dial tcp 10.0.0.7:6379: connection refused")
}

// TestConsoleShowsEveryCampaignWithAShardDown: on a Cluster with one shard down, the console's
// snapshot lost every campaign row after the first one on that shard, and with the rows the
// page's buttons, in the incident an operator opens it for. Every row is shown, the campaign
// Redis cannot tell with the store's figures, and the snapshot names it.
func TestConsoleShowsEveryCampaignWithAShardDown(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "older", "name": "Older", "stock": 10, "per_user_limit": 3}`)
	h.createCampaign(t, `{"id": "dark", "name": "On the dark shard", "stock": 10, "per_user_limit": 3}`)
	snap := firstSnapshot(t, h, h.store, darkShard{Redis: h.redis, campaign: "dark"})
	shown := map[string]int64{}
	for _, c := range snap.Campaigns {
		shown[c.ID] = c.Remaining
	}
	if r, ok := shown["older"]; !ok || r != 10 {
		t.Errorf("the campaign after the dark one: shown %v (remaining %d); want it, with 10 left", ok, r)
	}
	if r, ok := shown["dark"]; !ok || r != 10 {
		t.Errorf("the dark campaign: shown %v (remaining %d); want it, with the store's 10", ok, r)
	}
	if !slices.ContainsFunc(snap.Errors, func(e string) bool { return strings.HasPrefix(e, "campaign dark: Redis cannot tell") }) {
		t.Errorf("the snapshot's errors %q do not name the campaign Redis cannot tell", snap.Errors)
	}
}

// TestConsoleShowsEveryCampaignWithAShardHanging: a shard that does not answer at all must
// cost the snapshot that shard's campaign, not the time of every campaign after it and of the
// consumer lag, which Redis has nothing to do with.
func TestConsoleShowsEveryCampaignWithAShardHanging(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "older", "name": "Older", "stock": 10, "per_user_limit": 3}`)
	h.createCampaign(t, `{"id": "dark", "name": "On the dark shard", "stock": 10, "per_user_limit": 3}`)
	snap := firstSnapshot(t, h, h.store, darkShard{Redis: h.redis, campaign: "dark", hang: true})
	for _, e := range snap.Errors {
		if !strings.HasPrefix(e, "campaign dark: ") {
			t.Errorf("the snapshot says %q: only the dark campaign cannot be read", e)
		}
	}
	if snap.ConsumerLag < 0 {
		t.Errorf("consumer lag %d: not read, with Kafka up", snap.ConsumerLag)
	}
}

// campaignsDown is a store that cannot list campaigns.
type campaignsDown struct{ api.Store }

func (campaignsDown) NewestCampaigns(context.Context, int) ([]store.Campaign, error) {
	return nil, errors.New("dial tcp 10.0.0.5:5432: connection refused")
}

// TestConsoleSaysWhatCannotBeRead: a source that fails is named in the snapshot with what the
// operator can act on; the dependency's own words go to the log. It read "campaigns: internal
// error", which says a bug of ours where the store was down.
func TestConsoleSaysWhatCannotBeRead(t *testing.T) {
	h := newHarness(t)
	snap := firstSnapshot(t, h, campaignsDown{h.store}, h.redis)
	if !slices.Contains(snap.Errors, "campaigns: cannot be read right now") {
		t.Errorf("the snapshot's errors with the store down: %q; want campaigns: cannot be read right now", snap.Errors)
	}
}

// TestConsoleRefusedWhileDraining: a console stream asked of a draining api started a snapshot
// loop (a Kafka client, a read of every source) for a page the shutdown would end within
// seconds. It is refused with 503, as a closed api's is, and no loop starts; the page
// reconnects through the load balancer to another api.
func TestConsoleRefusedWhileDraining(t *testing.T) {
	refused := func(t *testing.T, code int, header http.Header, body []byte) {
		t.Helper()
		var e struct{ Error struct{ Code events.Code } }
		json.Unmarshal(body, &e)
		if code != http.StatusServiceUnavailable || e.Error.Code != events.Unavailable || header.Get("Retry-After") == "" {
			t.Errorf("the console's stream: %d %q, Retry-After %q; want 503 unavailable with a Retry-After", code, e.Error.Code, header.Get("Retry-After"))
		}
	}
	t.Run("while /readyz says draining", func(t *testing.T) {
		h := newHarness(t, func(c *api.Config) { c.DrainDelay = time.Hour }) // ended by closing the listener
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- h.srv.Serve(ctx, ln) }()
		base := "http://" + ln.Addr().String()
		cancel()
		within(t, 10*time.Second, "the api drains", func() bool {
			resp, err := http.Get(base + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusServiceUnavailable
		})
		sctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
		defer stop()
		req, _ := http.NewRequestWithContext(sctx, "GET", base+"/v1/admin/console/events", nil)
		req.Header.Set("Authorization", "Bearer "+h.admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		// Counted while the answer is open: a loop started for it runs until it ends.
		if n := goroutines("api.(*console).run("); n != 0 {
			t.Errorf("%d snapshot loops started while the api drains", n)
		}
		if resp.StatusCode == http.StatusOK {
			stop() // a stream: its body would not end by itself
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		refused(t, resp.StatusCode, resp.Header, body)
		ln.Close()
		if err := <-served; err == nil {
			t.Error("Serve returned no error with its listener closed under it")
		}
	})
	t.Run("after the shutdown, before Close", func(t *testing.T) {
		h := newHarness(t) // no drain delay: the shutdown starts at once
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := h.srv.Serve(ctx, ln); err != nil {
			t.Fatal(err)
		}
		// A request the server read as its shutdown began reaches the handler after it.
		rec := httptest.NewRecorder()
		h.srv.Handler().ServeHTTP(rec, request("GET", "/v1/admin/console/events", "", h.bearer()...))
		refused(t, rec.Code, rec.Header(), rec.Body.Bytes())
	})
}

// storeGoesDown is a store that cannot list campaigns once down is set.
type storeGoesDown struct {
	api.Store
	down atomic.Bool
}

func (s *storeGoesDown) NewestCampaigns(ctx context.Context, n int) ([]store.Campaign, error) {
	if s.down.Load() {
		return campaignsDown{}.NewestCampaigns(ctx, n)
	}
	return s.Store.NewestCampaigns(ctx, n)
}

// TestConsoleKeepsTheRowsWhileTheStoreIsDown: the campaign table emptied while the store was
// down, in the outage an operator opens the console for, with only the error line left. The
// last rows read stay, marked with when they were read.
func TestConsoleKeepsTheRowsWhileTheStoreIsDown(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "kept", "name": "Kept", "stock": 10, "per_user_limit": 3}`)
	h.buy(t, "kept", "ann", 2)
	st := &storeGoesDown{Store: h.store}
	srv := api.New(h.cfg, st, h.redis, kafkatest.Client(t, h.brokers))
	defer srv.Close()
	web := httptest.NewServer(srv.Handler())
	defer web.Close()
	stream := openConsole(t, web.URL, h.admin)
	defer stream.close()
	good, _ := stream.next(t)
	if len(good.Campaigns) != 1 || good.CampaignsAsOf != nil {
		t.Fatalf("the snapshot with the store up: %+v", good)
	}
	st.down.Store(true)
	schema := h.spec.Components.Schemas["ConsoleSnapshot"].Value
	for range 3 { // the snapshot taken as the store went down may have read it still
		stale, raw := stream.next(t)
		if len(stale.Errors) == 0 {
			continue
		}
		if err := schema.VisitJSON(raw, openapi3.MultiErrors()); err != nil {
			t.Errorf("the stale snapshot breaks the ConsoleSnapshot schema: %v\n%v", err, raw)
		}
		if !slices.Contains(stale.Errors, "campaigns: cannot be read right now") {
			t.Errorf("the snapshot's errors with the store down: %q", stale.Errors)
		}
		if len(stale.Campaigns) != 1 || stale.Campaigns[0] != good.Campaigns[0] {
			t.Errorf("the rows with the store down: %+v; want the last ones read, %+v", stale.Campaigns, good.Campaigns)
		}
		if stale.CampaignsAsOf == nil || !stale.CampaignsAsOf.Equal(good.At) {
			t.Errorf("the rows are marked as of %v; want %v, when they were read", stale.CampaignsAsOf, good.At)
		}
		return
	}
	t.Fatal("no snapshot said the store cannot be read")
}

// firstSnapshot is the first console snapshot of an api of h's on st and r.
func firstSnapshot(t *testing.T, h *harness, st api.Store, r api.Redis) api.ConsoleSnapshot {
	t.Helper()
	srv := api.New(h.cfg, st, r, kafkatest.Client(t, h.brokers))
	defer srv.Close()
	web := httptest.NewServer(srv.Handler())
	defer web.Close()
	stream := openConsole(t, web.URL, h.admin)
	defer stream.close()
	snap, _ := stream.next(t)
	return snap
}

// TestConsoleShowsTheNewestCampaigns: a snapshot shows the newest campaigns, newest first, and
// no more than its bound, however many the store holds.
func TestConsoleShowsTheNewestCampaigns(t *testing.T) {
	h := newHarness(t)
	n := api.ConsoleCampaigns + 2
	for i := range n {
		c := store.Campaign{ID: fmt.Sprintf("c%03d", i), Name: "one of many", Stock: 1, PerUserLimit: 1, CreatedAtMs: int64(1000 + i)}
		if err := h.store.CreateCampaign(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	snap := firstSnapshot(t, h, h.store, h.redis)
	if len(snap.Campaigns) != api.ConsoleCampaigns {
		t.Fatalf("%d campaigns shown of %d, want the newest %d", len(snap.Campaigns), n, api.ConsoleCampaigns)
	}
	for i, c := range snap.Campaigns {
		if want := fmt.Sprintf("c%03d", n-1-i); c.ID != want {
			t.Fatalf("row %d shows %s, want %s (newest first)", i, c.ID, want)
		}
	}
}

// TestConsoleNoCrossSiteControl backs what keeps another site from running a control in an
// operator's browser. The page keeps the admin token in its own origin's sessionStorage and
// sends it only in the Authorization header, the only place the api takes it from (no cookie,
// no query: TestAdminRoutesTakeOnlyTheAdminToken): a cross-site form sends no such header and
// another site cannot read the token. As a second wall, the api grants no other origin a CORS
// preflight, so no other origin's script may send admin requests with headers or read their
// answers. A CORS middleware added for another origin (echo's default allows "*") fails it.
func TestConsoleNoCrossSiteControl(t *testing.T) {
	h := newHarness(t)
	for _, r := range h.adminRoutes(t) {
		method, path, _ := strings.Cut(r, " ")
		for _, origin := range []string{"https://evil.example", "null"} {
			req := httptest.NewRequest(http.MethodOptions, strings.Replace(path, ":id", "c1", 1), nil)
			req.Header.Set("Origin", origin)
			req.Header.Set("Access-Control-Request-Method", method)
			req.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
			w := httptest.NewRecorder()
			h.srv.Handler().ServeHTTP(w, req)
			for name := range w.Header() {
				if strings.HasPrefix(http.CanonicalHeaderKey(name), "Access-Control-Allow-") {
					t.Errorf("%s: a preflight from %s is answered %d with %s: %q", r, origin, w.Code, name, w.Header().Values(name))
				}
			}
		}
	}
}
