package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
)

func TestRateLimits(t *testing.T) {
	h := newHarness(t, func(c *api.Config) {
		c.UserLimit = api.Limit{Rate: 0.01, Burst: 3} // slow enough that no token comes back during the test
		c.IPLimit = api.Limit{Rate: 0.01, Burst: 7}
	})
	h.createCampaign(t, `{"id": "rl", "name": "Rates", "stock": 100, "per_user_limit": 100}`)
	order := h.buy(t, "rl", "alice", 1)

	t.Run("per buyer", func(t *testing.T) {
		for range 2 { // the burst of 3, less the purchase above
			h.do(t, request("GET", "/v1/orders/"+order, "", user("alice")...), 200)
		}
		rec := h.serve(t, request("GET", "/v1/orders/"+order, "", user("alice")...))
		if rec.Code != http.StatusTooManyRequests {
			t.Fatalf("past the buyer's burst: %d %s", rec.Code, rec.Body)
		}
		if s, err := strconv.Atoi(rec.Header().Get("Retry-After")); err != nil || s < 1 {
			t.Errorf("Retry-After %q", rec.Header().Get("Retry-After"))
		}
		h.fail(t, request("POST", "/v1/campaigns/rl/purchases", `{"quantity": 1}`, user("alice")...), 429, events.RateLimited)
		h.buy(t, "rl", "bob", 1) // another buyer has a bucket of his own
	})

	t.Run("per address", func(t *testing.T) {
		// 7 requests from 192.0.2.1 so far (httptest's address); the next is one too many,
		// whoever the buyer, and anonymous reads count too.
		h.fail(t, request("GET", "/v1/campaigns/rl", ""), 429, events.RateLimited)
		h.fail(t, request("POST", "/v1/campaigns/rl/purchases", `{"quantity": 1}`, user("carol")...), 429, events.RateLimited)
		r := request("GET", "/v1/campaigns/rl", "")
		r.RemoteAddr = "198.51.100.7:1234"
		h.do(t, r, 200)
		// Spoofed X-Forwarded-For is ignored unless proxies are trusted.
		r = request("GET", "/v1/campaigns/rl", "", "X-Forwarded-For", "203.0.113.9")
		h.fail(t, r, 429, events.RateLimited)
		// Probes are never limited.
		h.do(t, request("GET", "/healthz", ""), 200)
	})

	t.Run("an IPv6 client is its /64", func(t *testing.T) {
		from := func(addr string) *http.Request {
			r := request("GET", "/v1/campaigns/rl", "")
			r.RemoteAddr = "[" + addr + "]:1234"
			return r
		}
		for i := range 7 { // one burst for the whole /64, whichever address in it
			h.do(t, from(fmt.Sprintf("2001:db8:1:2::%x", i+1)), 200)
		}
		h.fail(t, from("2001:db8:1:2:ffff:ffff:ffff:ffff"), 429, events.RateLimited)
		h.do(t, from("2001:db8:1:3::1"), 200) // the next /64 is another client
	})

	t.Run("an IPv4 client written as IPv6 is the same client", func(t *testing.T) {
		// A dual-stack listener, or a proxy's X-Forwarded-For, may write 198.51.100.20 as
		// ::ffff:198.51.100.20: a client alternating the two had twice its burst.
		from := func(addr string) *http.Request {
			r := request("GET", "/v1/campaigns/rl", "")
			r.RemoteAddr = "[" + addr + "]:1234"
			if !strings.Contains(addr, ":") {
				r.RemoteAddr = addr + ":1234"
			}
			return r
		}
		for i := range 7 {
			h.do(t, from([]string{"198.51.100.20", "::ffff:198.51.100.20"}[i%2]), 200)
		}
		h.fail(t, from("::ffff:198.51.100.20"), 429, events.RateLimited)
		h.fail(t, from("198.51.100.20"), 429, events.RateLimited)
	})
}

// TestLimiterUnderChurn: a client that churns keys (200,000 user ids or addresses in a second)
// stays limited on every one of them, and the memory they took is given back once they are
// idle, not by forgetting live buckets.
func TestLimiterUnderChurn(t *testing.T) {
	// In a bubble: the limiter turns its generations over on a timer of the real clock too, and
	// 200,000 keys under -race on a loaded machine took longer than its 5 s period (150,372 of
	// them limited, the rest forgotten by two turns). Time stands still while the test runs.
	synctest.Test(t, func(t *testing.T) {
		l := api.NewLimiter(api.Limit{Rate: 1, Burst: 1})
		now := time.Now()
		const keys = 200_000
		for i := range keys {
			l.Allow(fmt.Sprintf("churn-%d", i), now.Add(time.Duration(i)*time.Second/keys))
		}
		refused := 0
		for i := range keys {
			if ok, _ := l.Allow(fmt.Sprintf("churn-%d", i), now.Add(time.Second-time.Millisecond)); !ok {
				refused++
			}
		}
		// Within the second each key's bucket refills by less than a token: only keys first seen
		// early enough get one back.
		if refused < keys*9/10 {
			t.Errorf("%d of %d churned keys limited on their second request, want nearly all", refused, keys)
		}
		if n := l.Size(); n != keys {
			t.Errorf("%d buckets held, want %d: none forgotten while live", n, keys)
		}
		// Idle for two periods: every bucket is full again, and forgotten.
		l.Allow("later", now.Add(time.Hour))
		if n := l.Size(); n != 1 {
			t.Errorf("%d buckets an hour on, want 1", n)
		}
	})
}

func TestLimiterBuckets(t *testing.T) {
	now := time.Now()
	l := api.NewLimiter(api.Limit{Rate: 1, Burst: 1})
	if ok, _ := l.Allow("k", now); !ok {
		t.Fatal("first request refused")
	}
	if ok, wait := l.Allow("k", now); ok || wait <= 0 || wait > time.Second {
		t.Errorf("second request at once: ok %v, wait %v", ok, wait)
	}
	if ok, _ := l.Allow("k", now.Add(time.Second)); !ok {
		t.Error("refused after the bucket refilled")
	}
	// Buckets that filled up again are forgotten at the next sweep.
	l.Allow("other", now.Add(time.Hour))
	if n := l.Size(); n != 1 {
		t.Errorf("%d buckets after an hour, want 1", n)
	}
	// Zero limits nothing.
	l = api.NewLimiter(api.Limit{})
	for range 100 {
		if ok, _ := l.Allow("k", now); !ok {
			t.Fatal("a zero Limit refused a request")
		}
	}
}

// TestSoldOutFlag checks that buyers of a sold-out campaign are refused without a Redis
// command, and that the campaign sells again once stock comes back.
func TestSoldOutFlag(t *testing.T) {
	// The flag must outlast bob's refusal and the 51 requests after it, which took over 200 ms
	// on a loaded machine (-cpu 1): the flag lapsed mid-way and a buyer cost a Redis command.
	const ttl = time.Second
	h := newHarness(t, func(c *api.Config) { c.SoldOutTTL = ttl })
	h.createCampaign(t, `{"id": "so", "name": "Few", "stock": 2, "per_user_limit": 2}`)
	first := h.buy(t, "so", "alice", 2)
	h.fail(t, request("POST", "/v1/campaigns/so/purchases", `{"quantity": 1}`, user("bob")...), 409, events.SoldOut)

	before := h.commands.n.Load()
	for i := range 50 {
		h.fail(t, request("POST", "/v1/campaigns/so/purchases", `{"quantity": 1}`, user(fmt.Sprintf("b%d", i))...), 409, events.SoldOut)
	}
	if n := h.commands.n.Load() - before; n != 0 {
		t.Errorf("50 buyers of a sold-out campaign cost %d Redis commands, want 0", n)
	}

	// A keyed retry of a purchase that succeeded is still replayed, at the cost of one read.
	if err := h.redis.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	before = h.commands.n.Load()
	h.fail(t, keyed("so", "carol", "k-1", `{"quantity": 1}`), 409, events.SoldOut)
	if n := h.commands.n.Load() - before; n != 1 {
		t.Errorf("a keyed buyer of a sold-out campaign cost %d Redis commands, want 1", n)
	}

	// Units released by another process are on sale here after the flag's TTL.
	if _, err := h.redis.Release(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + 50*time.Millisecond)
	h.buy(t, "so", "dave", 1)

	// Units released by this process are on sale at once.
	h.fail(t, request("POST", "/v1/campaigns/so/purchases", `{"quantity": 2}`, user("erin")...), 409, events.SoldOut)
	h.do(t, request("POST", "/v1/admin/orders/"+h.buy(t, "so", "frank", 1)+"/compensate", "", h.bearer()...), 200)
	h.buy(t, "so", "erin", 1)
}

// TestTimeWindows checks that a campaign sells only inside its window, by Redis's clock.
func TestTimeWindows(t *testing.T) {
	h := newHarness(t)
	now := time.Now().UTC()
	h.createCampaign(t, fmt.Sprintf(`{"id": "tw", "name": "Window", "stock": 5, "per_user_limit": 5, "starts_at": %q, "ends_at": %q}`,
		now.Add(time.Hour).Format(time.RFC3339), now.Add(2*time.Hour).Format(time.RFC3339)))
	buy := func(u string) *http.Request {
		return request("POST", "/v1/campaigns/tw/purchases", `{"quantity": 1}`, user(u)...)
	}
	h.fail(t, buy("alice"), 409, events.NotStarted)
	h.mr.SetTime(now.Add(90 * time.Minute)) // Redis's clock, not this host's
	h.buy(t, "tw", "alice", 1)
	h.mr.SetTime(now.Add(2 * time.Hour))
	h.fail(t, buy("bob"), 409, events.Ended)
	h.mr.SetTime(now.Add(-time.Hour))
	h.fail(t, buy("bob"), 409, events.NotStarted)
	h.mr.SetTime(time.Time{})
	h.fail(t, buy("bob"), 409, events.NotStarted)
}

// heldRefusals holds the api's purchases that Redis refused as sold out until told, as if
// Redis's answer were still on its way back.
type heldRefusals struct {
	*lua.Redis
	refused, answer chan struct{}
}

func (r *heldRefusals) Reserve(ctx context.Context, campaign, orderID, user string, qty int, ttl time.Duration) (lua.Reservation, error) {
	res, err := r.Redis.Reserve(ctx, campaign, orderID, user, qty, ttl)
	if events.ErrorCode(err) == events.SoldOut {
		select {
		case r.refused <- struct{}{}:
		default: // a later refusal: the test waits for the first only
		}
		<-r.answer
	}
	return res, err
}

// TestSoldOutFlagRacingAGiveBack: Redis refuses a purchase as sold out, and before its answer
// reaches the api, units come back through this api (it drops its flag). The refusal is
// true of the moment Redis ran, not of now: it must not set the flag again, or every buyer is
// refused for the flag's TTL while the units are there.
func TestSoldOutFlagRacingAGiveBack(t *testing.T) {
	// No reader of the results topic: the flag is this api's own doing only.
	h := newHarness(t, func(c *api.Config) { c.SoldOutTTL, c.Brokers = time.Hour, nil })
	h.createCampaign(t, `{"id": "race", "name": "Race", "stock": 1, "per_user_limit": 1}`)
	r := &heldRefusals{Redis: h.redis, refused: make(chan struct{}, 1), answer: make(chan struct{})}
	srv := h.replica(t, h.store, r, kafkatest.Client(t, h.brokers))
	serve := func(req *http.Request) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec
	}
	first := h.buy(t, "race", "alice", 1)

	refused := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		refused <- serve(request("POST", "/v1/campaigns/race/purchases", `{"quantity": 1}`, user("bob")...))
	}()
	<-r.refused // Redis said sold out; the api has not heard it yet
	if rec := serve(request("POST", "/v1/admin/orders/"+first+"/compensate", "", h.bearer()...)); rec.Code != http.StatusOK {
		t.Fatalf("compensate: %d %s", rec.Code, rec.Body)
	}
	close(r.answer)
	if rec := <-refused; rec.Code != http.StatusConflict {
		t.Fatalf("bob: %d %s, want 409 as Redis answered", rec.Code, rec.Body)
	}
	if rec := serve(request("POST", "/v1/campaigns/race/purchases", `{"quantity": 1}`, user("carol")...)); rec.Code != http.StatusAccepted {
		t.Errorf("carol, with the unit given back: %d %s, want 202", rec.Code, rec.Body)
	}
}
