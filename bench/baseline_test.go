package bench

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// serveBaseline serves a baseline on a test server and returns its host:port.
func serveBaseline(t *testing.T, b Baseline) string {
	t.Helper()
	h, err := b.Handler()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func buy(t *testing.T, addr, campaign string, n int64, users Users) *LoadResult {
	t.Helper()
	res, err := Load{Addr: addr, Requests: n, Concurrency: 4,
		NewRequester: PurchaseRequests(addr, campaign, users, Identity{})}.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestConstantBaseline(t *testing.T) {
	addr := serveBaseline(t, Baseline{Kind: Constant})
	if res := buy(t, addr, "c", 20, Users{N: 5, Prefix: "u"}); res.Outcomes["202"] != 20 {
		t.Fatalf("outcomes %v", res.Outcomes)
	}
}

func TestBareReserveBaselineRunsTheScript(t *testing.T) {
	mr := miniredis.RunT(t)
	r := lua.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}))
	ctx := context.Background()
	if err := r.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadCampaign(ctx, lua.Campaign{ID: "bare", Remaining: 10, Limit: 1, StartsAt: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	addr := serveBaseline(t, Baseline{Kind: BareReserve, Redis: r})
	res := buy(t, addr, "bare", 30, Users{N: 20, Prefix: "u"})
	// 20 buyers, limit 1, stock 10: ten succeed, the rest hear sold_out.
	if res.Outcomes["202"] != 10 || res.Outcomes["409 sold_out"] != 20 {
		t.Fatalf("outcomes %v", res.Outcomes)
	}
	if left, _, _ := r.Remaining(ctx, "bare"); left != 0 {
		t.Errorf("remaining %d, want 0", left)
	}
}

func TestSyncDBBaselineSellsExactlyTheStock(t *testing.T) {
	st := storetest.MustOpen(t, storetest.SQLiteURL(t))
	ctx := context.Background()
	now := time.Now().UnixMilli()
	if err := st.CreateCampaign(ctx, store.Campaign{ID: "sync", Name: "s", Stock: 5, PerUserLimit: 1, StartsAtMs: now, CreatedAtMs: now}); err != nil {
		t.Fatal(err)
	}
	addr := serveBaseline(t, Baseline{Kind: SyncDB, Store: st})
	// 3 buyers, limit 1: 3 sales, then the limit; stock 5 is never reached.
	res := buy(t, addr, "sync", 12, Users{N: 3, Prefix: "a"})
	if res.Outcomes["202"] != 3 || res.Outcomes["409 limit_exceeded"] != 9 {
		t.Fatalf("outcomes %v", res.Outcomes)
	}
	res = buy(t, addr, "sync", 10, Users{N: 100, Prefix: "b"})
	if res.Outcomes["202"] != 2 || res.Outcomes["409 sold_out"] != 8 {
		t.Fatalf("outcomes %v", res.Outcomes)
	}
	c, err := st.Campaign(ctx, "sync")
	if err != nil || c.Sold != 5 {
		t.Fatalf("sold %d (%v), want 5", c.Sold, err)
	}
	var orders int
	if err := st.DB().Get(&orders, `SELECT count(*) FROM orders WHERE campaign_id = 'sync'`); err != nil || orders != 5 {
		t.Fatalf("%d orders (%v), want 5", orders, err)
	}
}

func TestBaselineNeedsItsDependency(t *testing.T) {
	for _, b := range []Baseline{{Kind: BareReserve}, {Kind: SyncDB}, {Kind: "nope"}} {
		if _, err := b.Handler(); err == nil {
			t.Errorf("%s baseline built without what it needs", b.Kind)
		}
	}
}

func TestBuyerFromHeaderOrToken(t *testing.T) {
	m := Identity{Secret: []byte("0123456789abcdef0123456789abcdef")}.minter()
	tok := string(m.appendToken(nil, []byte("alice")))
	for _, tc := range []struct {
		header, value, want string
	}{
		{"X-User-ID", "bob", "bob"},
		{"Authorization", "Bearer " + tok, "alice"},
		{"Authorization", "Bearer not.a.token", "anonymous"},
		{"", "", "anonymous"},
	} {
		r, _ := http.NewRequest("POST", "/", nil)
		if tc.header != "" {
			r.Header.Set(tc.header, tc.value)
		}
		if got := buyer(r); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.header, got, tc.want)
		}
	}
}

func TestServeDrainsOnCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h, _ := Baseline{Kind: Constant}.Handler()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- Serve(ctx, ln, h) }()
	if err := WaitHTTP(ctx, "http://"+ln.Addr().String()+"/healthz", nil, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after cancel: %v", err)
	}
}

func TestLogProblems(t *testing.T) {
	dir := t.TempDir()
	p, err := Start("/bin/sh", "noisy", dir, nil, "-c", `echo '{"level":"INFO","msg":"fine"}'; echo '{"level":"WARN","msg":"confirm reservations","err":"NOSCRIPT"}'; echo '{"level":"ERROR","msg":"boom"}'`)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		if exited, _ := p.Exited(); exited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("after a minute a shell that echoes three lines has not exited")
		}
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	w, e, first := p.LogProblems()
	if w != 1 || e != 1 || first != "confirm reservations: NOSCRIPT" {
		t.Fatalf("warns %d errors %d first %q", w, e, first)
	}
}

func TestMemStats(t *testing.T) {
	srv := httptest.NewServer(PprofHandler())
	defer srv.Close()
	ms, err := memStats(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if ms["HeapInuse"] <= 0 || ms["StackInuse"] <= 0 || ms["goroutines"] <= 0 {
		t.Fatalf("%v", ms)
	}
}
