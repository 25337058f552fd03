package api_test

// The stories of a careless or hostile client, and of dependencies that fail under it: hang-ups
// while Redis works, half-made campaigns, outages that must not leak, refusals that must not page
// anyone, orders that must not be told apart by time, and readiness that means it.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/apitest"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/store"
)

// pipelineGate is a go-redis hook that holds every command and pipeline while it is shut, so a
// test can act while a request waits on Redis.
type pipelineGate struct {
	mu   sync.Mutex
	shut chan struct{} // nil while open
	held atomic.Int64  // commands and pipelines that waited at the gate
}

func (g *pipelineGate) wait() {
	g.mu.Lock()
	shut := g.shut
	g.mu.Unlock()
	if shut != nil {
		g.held.Add(1)
		<-shut
	}
}

func (g *pipelineGate) close() { g.mu.Lock(); g.shut = make(chan struct{}); g.mu.Unlock() }

func (g *pipelineGate) open() {
	g.mu.Lock()
	close(g.shut)
	g.shut = nil
	g.mu.Unlock()
}

func (g *pipelineGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *pipelineGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.wait()
		return next(ctx, cmd)
	}
}
func (g *pipelineGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.wait()
		return next(ctx, cmds)
	}
}

// TestHangUpsKeepNoStock: 300 buyers whose clients hang up while their purchases wait on Redis.
// Every unit their purchases took belongs to an order on its way to the consumer (an
// OrderRequested event), so none is held for the sweeper's deadline, and the stock nobody took
// still sells to the next buyers to the last unit.
func TestHangUpsKeepNoStock(t *testing.T) {
	const stock, buyers = 1000, 300
	h := newHarness(t, func(c *api.Config) { c.ReservationTTL = time.Hour }) // only an order can account for a unit
	h.createCampaign(t, fmt.Sprintf(`{"id":"hang","name":"Hang-ups","stock":%d,"per_user_limit":1}`, stock))

	hangUpWhileOnRedis(t, h, buyers, func(ctx context.Context, base string, i int) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/campaigns/hang/purchases", strings.NewReader(`{"quantity":1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User-ID", fmt.Sprintf("hung-%d", i))
		return req
	})

	snap, err := h.redis.Snapshot(context.Background(), "hang")
	if err != nil {
		t.Fatal(err)
	}
	queued := requestedOrders(t, h)
	held := 0
	for _, r := range snap.Reservations {
		held += r.Quantity
		if !queued[r.OrderID] {
			t.Errorf("order %s holds %d units but was never queued: nobody gets them until its deadline", r.OrderID, r.Quantity)
		}
	}
	if snap.Remaining+int64(held) != stock {
		t.Errorf("remaining %d + reserved %d != stock %d", snap.Remaining, held, stock)
	}
	t.Logf("%d hung-up buyers: %d units reserved, every one queued as an order; remaining %d", buyers, held, snap.Remaining)
	for i := range snap.Remaining { // the rest sells to the last unit
		h.buy(t, "hang", fmt.Sprintf("next-%d", i), 1)
	}
	h.fail(t, request("POST", "/v1/campaigns/hang/purchases", `{"quantity":1}`, user("late")...), http.StatusConflict, events.SoldOut)
}

// requestedOrders returns the order ids of every OrderRequested event on the harness's topic.
func requestedOrders(t *testing.T, h *harness) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.brokers...), kgo.ConsumeTopics(h.topics.Requested),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, h.topics.Requested)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	out := map[string]bool{}
	for n := int64(0); n < want; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d events on %s", n, want, h.topics.Requested)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			n++
			ev, err := events.Decode(rec.Value)
			if err != nil {
				t.Fatalf("decode %s: %v", rec.Value, err)
			}
			out[ev.OrderID] = true
		})
	}
	return out
}

// hangUpWhileOnRedis sends n requests made by req to a server over h, hangs every client up
// once all n are being served and at least one waits on Redis, and returns once every handler
// has finished.
func hangUpWhileOnRedis(t *testing.T, h *harness, n int, req func(ctx context.Context, base string, i int) *http.Request) {
	t.Helper()
	var started, ctxDone atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		go func() { <-r.Context().Done(); ctxDone.Add(1) }()
		h.srv.Handler().ServeHTTP(w, r)
	}))
	h.gate.close()
	ctx, hangUp := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if resp, err := http.DefaultClient.Do(req(ctx, srv.URL, i)); err == nil {
				resp.Body.Close()
			}
		})
	}
	// Bounded: a request that never reaches Redis (or a server that never sees its client go)
	// spun here until go test's timeout. On the way out the gate opens, so the handlers end.
	waitFor := func(what string, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !done(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				hangUp()
				h.gate.open()
				t.Fatalf("after a minute, not yet %s: %d of %d requests started, %d waited on Redis, %d seen gone",
					what, started.Load(), n, h.gate.held.Load(), ctxDone.Load())
			}
		}
	}
	waitFor("every request served and one waiting on Redis", func() bool {
		return started.Load() >= int64(n) && h.gate.held.Load() > 0
	})
	hangUp()
	wg.Wait()
	waitFor("every client seen gone", func() bool { return ctxDone.Load() >= int64(n) })
	h.gate.open()
	srv.Close() // waits for every handler to finish
}

// TestCreateCampaignNeverHalfway: a campaign's creation ends with the campaign on sale, or
// stored and put on sale once Redis answers, whether its client hangs up, Redis is down or
// Redis's answer is lost; Redis never sells a campaign the store does not have.
func TestCreateCampaignNeverHalfway(t *testing.T) {
	t.Run("the admin hangs up", func(t *testing.T) {
		h := newHarness(t)
		hangUpWhileOnRedis(t, h, 1, func(ctx context.Context, base string, _ int) *http.Request {
			req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/campaigns", strings.NewReader(`{"id":"gone","name":"Hung up","stock":5,"per_user_limit":1}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+h.admin)
			return req
		})
		wantField(t, h.do(t, request("GET", "/v1/campaigns/gone", ""), http.StatusOK), "remaining", 5)
		h.buy(t, "gone", "alice", 1)
	})
	t.Run("redis is down", func(t *testing.T) {
		h := newHarness(t)
		addr := h.mr.Addr()
		h.mr.Close()
		body := `{"id":"later","name":"Later","stock":5,"per_user_limit":1}`
		h.createdNotOnSale(t, body, "later")
		if _, err := h.store.Campaign(context.Background(), "later"); err != nil {
			t.Fatalf("the store lacks the campaign, which the compensator or a retry would put on sale: %v", err)
		}
		if err := h.mr.StartAddr(addr); err != nil {
			t.Fatal(err)
		}
		wantField(t, h.createCampaign(t, body), "remaining", 5) // the retry puts it on sale
		h.buy(t, "later", "alice", 1)
	})
	// The script ran and its answer was lost (a timeout, a connection dropped after it): an
	// error does not say that Redis lacks the campaign. Deleted from the store, it would sell
	// there all the same: orders the consumer cannot store, and pending ones the sweeper, which
	// visits the store's campaigns, never releases.
	t.Run("redis loads it and the answer is lost", func(t *testing.T) {
		h := newHarness(t)
		answering := h.srv
		h.srv = api.New(h.cfg, h.store, lostLoadAnswer{h.redis}, kafkatest.Client(t, h.brokers))
		t.Cleanup(h.srv.Close)
		body := `{"id":"lost","name":"Lost answer","stock":5,"per_user_limit":1}`
		h.createdNotOnSale(t, body, "lost")
		h.buy(t, "lost", "alice", 1) // Redis sells it, whatever the answer said
		if _, err := h.store.Campaign(context.Background(), "lost"); err != nil {
			t.Fatalf("Redis sells campaign lost, which the store does not have: %v", err)
		}
		h.srv = answering
		wantField(t, h.createCampaign(t, body), "remaining", 4) // the retry answers the campaign as it is
		if c, err := h.store.Campaign(context.Background(), "lost"); err != nil || !c.OnSale {
			t.Errorf("after the retry the store has %+v, %v; want it on sale", c, err)
		}
	})
}

// createdNotOnSale posts the creation of campaign id with body, and checks that it is answered
// 503, saying that the campaign was created.
func (h *harness) createdNotOnSale(t *testing.T, body, id string) {
	t.Helper()
	m := h.do(t, request("POST", "/v1/campaigns", body, h.bearer()...), http.StatusServiceUnavailable)
	e, _ := m["error"].(map[string]any)
	if msg, _ := e["message"].(string); e["code"] != string(events.Unavailable) || !strings.Contains(msg, "campaign "+id+" was created") {
		t.Errorf("the creation answered %v; want it to say that campaign %s was created", m, id)
	}
}

// failingBody is a request body whose read fails as a slow client's does at the read timeout.
type failingBody struct{}

func (failingBody) Read([]byte) (int, error) {
	return 0, fmt.Errorf("read tcp 127.0.0.1:8080->127.0.0.1:51234: i/o timeout")
}

// TestOutagesSayNoMore: with the store gone, or a body that cannot be read, every answer says
// what the client needs and nothing of the dependency's or the server's own words.
func TestOutagesSayNoMore(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id":"o1","name":"Outage","stock":5,"per_user_limit":1}`)
	order := h.buy(t, "o1", "alice", 1)

	slow := request("POST", "/v1/campaigns/o1/purchases", "", user("bob")...)
	slow.Body, slow.ContentLength = io.NopCloser(failingBody{}), -1
	slow.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder() // not apitest.Serve, which would read the body itself
	h.srv.Handler().ServeHTTP(rec, slow)
	if rec.Code != http.StatusBadRequest {
		t.Errorf("a body that cannot be read: %d %s", rec.Code, rec.Body)
	}
	noInternals(t, "a body that cannot be read", rec.Body.String())

	h.store.Close()
	h.fail(t, request("GET", "/v1/campaigns/o1", ""), http.StatusServiceUnavailable, events.Unavailable)
	h.fail(t, request("GET", "/v1/orders/"+order, "", user("alice")...), http.StatusServiceUnavailable, events.Unavailable)
	h.fail(t, request("POST", "/v1/campaigns", `{"id":"o2","name":"Later","stock":1,"per_user_limit":1}`, h.bearer()...), http.StatusServiceUnavailable, events.Unavailable)
	h.fail(t, request("POST", "/v1/campaigns/nope/purchases", `{"quantity":1}`, user("carol")...), http.StatusServiceUnavailable, events.Unavailable)
	h.fail(t, request("POST", "/v1/admin/orders/"+order+"/compensate", "", h.bearer()...), http.StatusServiceUnavailable, events.Unavailable)
}

// levelCounter is a slog handler that counts records by level.
type levelCounter struct {
	mu sync.Mutex
	n  map[slog.Level]int
}

func (l *levelCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *levelCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n[r.Level]++
	return nil
}
func (l *levelCounter) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *levelCounter) WithGroup(string) slog.Handler      { return l }

func (l *levelCounter) take() map[slog.Level]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.n
	l.n = map[slog.Level]int{}
	return n
}

// TestRefusalLogLevels: a refusal the api expects (sold out, a campaign being restored) is
// logged at DEBUG, a dependency that fails at WARN; neither is an ERROR for the person on call.
func TestRefusalLogLevels(t *testing.T) {
	logs := &levelCounter{n: map[slog.Level]int{}}
	h := newHarness(t, func(c *api.Config) { c.Logger = slog.New(logs) })
	h.createCampaign(t, `{"id":"l1","name":"Levels","stock":0,"per_user_limit":1}`)
	h.createCampaign(t, `{"id":"l2","name":"Frozen","stock":5,"per_user_limit":1}`)
	if _, err := h.redis.Freeze(context.Background(), "l2"); err != nil {
		t.Fatal(err)
	}
	logs.take()
	for range 10 {
		h.fail(t, request("POST", "/v1/campaigns/l1/purchases", `{"quantity":1}`, user("ann")...), http.StatusConflict, events.SoldOut)
		h.fail(t, request("POST", "/v1/campaigns/l2/purchases", `{"quantity":1}`, user("ann")...), http.StatusServiceUnavailable, events.Unavailable)
	}
	if n := logs.take(); n[slog.LevelError]+n[slog.LevelWarn] != 0 || n[slog.LevelDebug] != 20 {
		t.Errorf("expected refusals logged %v, want 20 at DEBUG and nothing above", n)
	}
	h.store.Close()
	h.fail(t, request("GET", "/v1/campaigns/l1", ""), http.StatusServiceUnavailable, events.Unavailable)
	if n := logs.take(); n[slog.LevelError] != 0 || n[slog.LevelWarn] != 1 {
		t.Errorf("a failed dependency logged %v, want one WARN", n)
	}
}

// TestOrderNotYoursCostsTheSame: another buyer's order, confirmed or pending, and an order that
// does not exist get the same answer after the same work (the same Redis commands; the store is
// asked once in each case).
func TestOrderNotYoursCostsTheSame(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id":"n1","name":"Not yours","stock":5,"per_user_limit":2}`)
	confirmed, pending := h.buy(t, "n1", "bob", 1), h.buy(t, "n1", "bob", 1)
	h.confirm(t, confirmed)
	var answers []string
	var commands []int64
	for _, id := range []string{confirmed, pending, "n1.06h0rsx4wyb3q6hsykas4jrv8w", "n1.k0000000000000000000000000"} {
		before := h.commands.n.Load()
		rec := apitest.Serve(t, h.spec, h.srv.Handler(), request("GET", "/v1/orders/"+id, "", user("alice")...))
		commands = append(commands, h.commands.n.Load()-before)
		answers = append(answers, fmt.Sprint(rec.Code, strings.ReplaceAll(rec.Body.String(), id, "ID")))
	}
	for i := range answers {
		if answers[i] != answers[0] || commands[i] != commands[0] {
			t.Errorf("answers %q after %v Redis commands: want one answer after the same work", answers, commands)
			break
		}
	}
}

// TestNotReadyWithoutLeaders: an api whose requested topic has no partition leaders (here: no
// topic at all) is not ready, though Kafka answers pings: it could not serve a purchase.
func TestNotReadyWithoutLeaders(t *testing.T) {
	h := newHarness(t, func(c *api.Config) { c.Topics = events.NewTopics("absent-" + strings.ToLower(events.NewID())) })
	ready := h.do(t, request("GET", "/readyz", ""), http.StatusServiceUnavailable)
	if ready["kafka"] != "unavailable" || ready["redis"] != "ok" || ready["store"] != "ok" {
		t.Errorf("readyz without the requested topic: %v", ready)
	}
}

// stuckCampaigns is a store whose reads of a campaign wait until they are given up.
type stuckCampaigns struct{ api.Store }

func (stuckCampaigns) Campaign(ctx context.Context, _ string) (store.Campaign, error) {
	<-ctx.Done()
	return store.Campaign{}, ctx.Err()
}

// TestHangUpsLogNoWarnings: a client that hangs up while its request waits on the store makes
// the read fail, and nobody reads the 503; a WARN each, at the per-address rate, would let
// anyone fill the operators' log with "a dependency failed" lines while nothing failed.
func TestHangUpsLogNoWarnings(t *testing.T) {
	hungUp := func(r *http.Request) *http.Request {
		ctx, cancel := context.WithCancel(r.Context())
		cancel()
		return r.WithContext(ctx)
	}
	warnings := func(logs *levelCounter) int {
		n := logs.take()
		return n[slog.LevelWarn] + n[slog.LevelError]
	}
	t.Run("order", func(t *testing.T) {
		logs := &levelCounter{n: map[slog.Level]int{}}
		h := newHarness(t, func(c *api.Config) { c.Logger = slog.New(logs) })
		logs.take()
		for range 100 {
			h.srv.Handler().ServeHTTP(httptest.NewRecorder(), hungUp(request("GET", "/v1/orders/o1.06h0rsx4wyb3q6hsykas4jrv8w", "", user("ann")...)))
		}
		if n := warnings(logs); n != 0 {
			t.Errorf("100 reads of an order whose clients hung up logged %d warnings; want none", n)
		}
	})
	t.Run("campaign", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			logs := &levelCounter{n: map[slog.Level]int{}}
			srv := api.New(api.Config{Logger: slog.New(logs)}, stuckCampaigns{}, nil, nil)
			defer srv.Close()
			logs.take()
			for i := range 100 {
				srv.Handler().ServeHTTP(httptest.NewRecorder(), hungUp(request("GET", fmt.Sprint("/v1/campaigns/c", i), "")))
			}
			if n := warnings(logs); n != 0 {
				t.Errorf("100 reads of campaigns whose clients hung up logged %d warnings; want none", n)
			}
			time.Sleep(10 * time.Second) // the shared reads run on to their timeout: let them end
		})
	})
}

// lostCreateAnswer is a store that creates the campaign and then loses the answer, as a timeout
// or a connection dropped after the commit does.
type lostCreateAnswer struct{ *store.Store }

func (s lostCreateAnswer) CreateCampaign(ctx context.Context, c store.Campaign) error {
	if err := s.Store.CreateCampaign(ctx, c); err != nil {
		return err
	}
	return fmt.Errorf("create campaign %s: %w", c.ID, context.DeadlineExceeded)
}

// TestCreateCampaignWithoutAnIDSaysWhichToRetry: a creation without an id that fails half way
// (stored, not on sale; or stored with its answer lost) leaves a campaign under an id the server
// chose, which goes on sale once the compensator sees it. The answer told the admin to send the
// request again, or that it changed nothing: sent again as it was, it created a second campaign
// with the same stock. The answer names the id, and sent again with it the creation finishes.
func TestCreateCampaignWithoutAnIDSaysWhichToRetry(t *testing.T) {
	const body = `{"name": "No id", "stock": 5, "per_user_limit": 1}`
	for _, tc := range []struct {
		name      string
		redisDown bool
		lostStore bool
	}{
		{name: "redis is down", redisDown: true},
		{name: "the store's answer is lost", lostStore: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			addr := h.mr.Addr()
			srv := h.srv
			if tc.redisDown {
				h.mr.Close()
			}
			if tc.lostStore {
				srv = h.replica(t, lostCreateAnswer{h.store}, h.redis, kafkatest.Client(t, h.brokers))
			}
			rec := apitest.Serve(t, h.spec, srv.Handler(), request("POST", "/v1/campaigns", body, h.bearer()...))
			stored, err := h.store.Campaigns(context.Background())
			if err != nil || len(stored) != 1 {
				t.Fatalf("the store has %v, %v; want the one campaign", stored, err)
			}
			id := stored[0].ID
			if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `\"id\": \"`+id+`\"`) {
				t.Errorf("the creation answered %d %s; want 503 naming the id %q to send again", rec.Code, strings.TrimSpace(rec.Body.String()), id)
			}
			if tc.redisDown {
				if err := h.mr.StartAddr(addr); err != nil {
					t.Fatal(err)
				}
			}
			wantField(t, h.createCampaign(t, `{"id": "`+id+`", `+body[1:]), "id", id)
			if all, err := h.store.Campaigns(context.Background()); err != nil || len(all) != 1 {
				t.Errorf("after the retry the store has %d campaigns, %v; want one", len(all), err)
			}
		})
	}
}

// TestUnknownCampaignsPastTheBudgetLogAtDebug: purchases of made-up campaign ids, past the
// budget of store reads for unknown ids, are refused 503 as a GET of such an id is, and the
// refusal, expected, is logged at DEBUG: any buyer could otherwise write a WARN per request.
func TestUnknownCampaignsPastTheBudgetLogAtDebug(t *testing.T) {
	logs := &levelCounter{n: map[slog.Level]int{}}
	h := newHarness(t, func(c *api.Config) { c.Logger = slog.New(logs) })
	refused := 0
	for i := range 3 * api.UnknownReads {
		rec := h.serve(t, request("POST", fmt.Sprintf("/v1/campaigns/made-up-%d/purchases", i), `{"quantity":1}`, user("ann")...))
		switch rec.Code {
		case http.StatusNotFound:
		case http.StatusServiceUnavailable:
			refused++
		default:
			t.Fatalf("made-up-%d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if refused == 0 {
		t.Fatal("no purchase went past the budget of unknown ids")
	}
	if n := logs.take(); n[slog.LevelError]+n[slog.LevelWarn] != 0 {
		t.Errorf("%d purchases refused past the budget of unknown ids logged %v, want nothing above DEBUG", refused, n)
	}
}
