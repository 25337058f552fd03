package api_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/apitest"
	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
	"github.com/seckill/seckill/store"
)

// replyHolder is a TCP proxy to a Redis server that, while frozen, passes every command on and
// holds back every reply: a Redis that runs what it is sent and whose answers do not come back
// (paused after the script ran, a network that drops the replies). Thawed, it passes the held
// replies on, to whichever client still reads them.
type replyHolder struct {
	addr string
	mu   sync.Mutex
	thaw chan struct{} // nil while thawed
}

func (p *replyHolder) freeze() { p.mu.Lock(); p.thaw = make(chan struct{}); p.mu.Unlock() }

func (p *replyHolder) unfreeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thaw != nil {
		close(p.thaw)
		p.thaw = nil
	}
}

func (p *replyHolder) wait() {
	p.mu.Lock()
	thaw := p.thaw
	p.mu.Unlock()
	if thaw != nil {
		<-thaw
	}
}

// holdReplies starts a replyHolder to upstream; it stops when the test ends.
func holdReplies(t *testing.T, upstream string) *replyHolder {
	t.Helper()
	p := &replyHolder{}
	p.addr = luatest.Proxy(t, upstream, p.wait)
	t.Cleanup(p.unfreeze) // before the proxy's own: its replies wait on p
	return p
}

// TestPurchaseWhileRedisHangs: a Redis that takes a purchase's script and does not answer (paused
// after it ran, a network that drops its replies). Each purchase waited for go-redis's timeouts
// and retries, 40 s measured, answered 503 only after the api's 15 s write timeout had ended
// the buyer's connection, and so did every buyer after it, each logging a WARN. Now a purchase
// gives up on Redis within a bound, the buyers after it are answered without going to Redis,
// and the outage is one WARN. The reservations whose answers were lost are pending with no
// order: the sweeper gives them back at their deadline, once, and the audit finds every unit.
func TestPurchaseWhileRedisHangs(t *testing.T) {
	logs := &levelCounter{n: map[slog.Level]int{}}
	h := newHarness(t, func(c *api.Config) { c.Logger = slog.New(logs) })
	const stock = 10
	h.createCampaign(t, fmt.Sprintf(`{"id": "hung", "name": "Hung Redis", "stock": %d, "per_user_limit": 1}`, stock))
	p := holdReplies(t, h.mr.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.addr}) // go-redis's defaults, as a redis:// URL has
	sent := &commandCounter{}
	rdb.AddHook(sent)
	r := lua.New(rdb)
	t.Cleanup(func() { r.Close() })
	cfg := h.cfg
	cfg.ReservationTTL = time.Millisecond // due for the sweeper as soon as Redis answers again
	srv := api.New(cfg, h.store, r, kafkatest.Client(t, h.brokers))
	t.Cleanup(srv.Close)
	buy := func(buyer string) *httptest.ResponseRecorder {
		return apitest.Serve(t, h.spec, srv.Handler(), request("POST", "/v1/campaigns/hung/purchases", `{"quantity": 1}`, user(buyer)...))
	}
	refused := func(buyer string, rec *httptest.ResponseRecorder) {
		t.Helper()
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" ||
			!strings.Contains(rec.Body.String(), `"code":"unavailable"`) {
			t.Errorf("%s: %d %s (Retry-After %q); want 503 unavailable with Retry-After", buyer, rec.Code, rec.Body, rec.Header().Get("Retry-After"))
		}
	}
	logs.take()

	p.freeze()
	// One buyer per pipeline of the coalescer: each waits for Redis, and gives up on it.
	for _, buyer := range []string{"alice", "bob"} {
		answered := make(chan *httptest.ResponseRecorder, 1)
		go func() { answered <- buy(buyer) }()
		select {
		case rec := <-answered:
			refused(buyer, rec)
		case <-time.After(10 * time.Second): // a bound, not a measurement: 10 times the purchase's
			rec := <-answered
			t.Fatalf("%s: no answer within 10s while Redis was silent; %d %s after it", buyer, rec.Code, rec.Body)
		}
	}
	// Every pipeline waits, the first longer than a purchase does: the next buyers are answered
	// without a command sent to Redis, with an Idempotency-Key too (its record is in Redis), and
	// so is a read of the campaign's page.
	before := sent.n.Load()
	refused("carol", buy("carol"))
	refused("frank", apitest.Serve(t, h.spec, srv.Handler(), keyed("hung", "frank", "k-1", `{"quantity": 1}`)))
	refused("the campaign's page", apitest.Serve(t, h.spec, srv.Handler(), request("GET", "/v1/campaigns/hung", "")))
	if n := sent.n.Load() - before; n != 0 {
		t.Errorf("carol's and frank's purchases and a read of the campaign sent %d commands to a Redis that answers nothing; want them refused at once", n)
	}
	if n := logs.take(); n[slog.LevelError] != 0 || n[slog.LevelWarn] != 1 {
		t.Errorf("four purchases Redis did not answer logged %v; want one WARN for the outage", n)
	}

	p.unfreeze()
	for i := 0; ; i++ { // purchases go through again once the pipelines have their answers
		buyer := fmt.Sprintf("dave-%d", i)
		rec := buy(buyer)
		if rec.Code == http.StatusAccepted {
			break
		}
		refused(buyer, rec)
		if i == 500 {
			t.Fatalf("Redis answers again and purchases are still refused: %d %s", rec.Code, rec.Body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx := context.Background()
	snap, err := h.redis.Snapshot(ctx, "hung")
	if err != nil {
		t.Fatal(err)
	}
	queued := requestedOrders(t, h)
	lost := map[string]bool{}
	for _, res := range snap.Reservations {
		if res.State == lua.StatePending && !queued[res.OrderID] {
			lost[res.User] = true
		}
	}
	if !lost["alice"] || !lost["bob"] {
		t.Errorf("reservations with no order: %v; want alice's and bob's, whose scripts ran and whose answers were lost", lost)
	}

	comp, err := compensator.New(compensator.Config{Brokers: h.brokers, Topics: h.topics, Logger: slog.New(slog.DiscardHandler)}, h.store, h.redis)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(comp.Close)
	for range 2 { // the second sweep gives nothing back twice
		if _, err := comp.SweepOnce(ctx, store.Fence{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.remaining(t, "hung"); got != stock {
		t.Errorf("remaining after the sweeps: %d, want %d (every reservation given back once)", got, stock)
	}
	rep, err := (&compensator.Auditor{Store: h.store, Redis: h.redis}).Audit(ctx, "hung")
	if err != nil || !rep.OK() {
		rep.Print(os.Stderr)
		t.Errorf("audit after the sweeps: %v", err)
	}
}
