package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/apitest"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
)

// keyed is a purchase of qty units by buyer with an Idempotency-Key.
func keyed(campaign, buyer, key, body string) *http.Request {
	return request("POST", "/v1/campaigns/"+campaign+"/purchases", body, "X-User-ID", buyer, "Idempotency-Key", key)
}

// serve serves r through the spec checker and returns the recorded answer.
func (h *harness) serve(t *testing.T, r *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	return apitest.Serve(t, h.spec, h.srv.Handler(), r)
}

func (h *harness) remaining(t *testing.T, campaign string) int64 {
	t.Helper()
	n, _, err := h.redis.Remaining(context.Background(), campaign)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestIdempotencyKey(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "ik", "name": "Keys", "stock": 50, "per_user_limit": 3}`)

	t.Run("a retry replays the first answer byte for byte", func(t *testing.T) {
		first := h.serve(t, keyed("ik", "alice", "k-1", `{"quantity": 1}`))
		if first.Code != http.StatusAccepted {
			t.Fatalf("first: %d %s", first.Code, first.Body)
		}
		for _, body := range []string{`{"quantity": 1}`, `{ "quantity" : 1 }`} { // the same request, spelled otherwise
			again := h.serve(t, keyed("ik", "alice", `"k-1"`, body)) // the draft's quoted form is the same key
			if again.Code != first.Code || again.Body.String() != first.Body.String() {
				t.Errorf("retry answered %d %q, first %d %q", again.Code, again.Body, first.Code, first.Body)
			}
			if again.Header().Get("Idempotent-Replayed") != "true" {
				t.Errorf("a replay lacks Idempotent-Replayed: %v", again.Header())
			}
		}
		if first.Header().Get("Idempotent-Replayed") != "" {
			t.Error("the first answer says it is a replay")
		}
		if got := h.remaining(t, "ik"); got != 49 {
			t.Errorf("remaining %d after one keyed purchase retried twice, want 49", got)
		}
	})

	t.Run("another body is 422", func(t *testing.T) {
		h.fail(t, keyed("ik", "alice", "k-1", `{"quantity": 2}`), 422, events.IdempotencyKeyReused)
		if got := h.remaining(t, "ik"); got != 49 {
			t.Errorf("remaining %d, want 49", got)
		}
	})

	t.Run("keys are scoped to the buyer and the campaign", func(t *testing.T) {
		a := h.do(t, keyed("ik", "alice", "k-shared", `{"quantity": 1}`), 202)
		b := h.do(t, keyed("ik", "bob", "k-shared", `{"quantity": 2}`), 202)
		if a["order_id"] == b["order_id"] {
			t.Errorf("alice and bob share an order: %v", a["order_id"])
		}
		o := h.do(t, request("GET", "/v1/orders/"+b["order_id"].(string), "", user("bob")...), 200)
		wantField(t, o, "user_id", "bob")
		wantField(t, o, "quantity", 2)
		if ca, _ := o["created_at"].(string); !strings.HasPrefix(ca, time.Now().UTC().Format("2006-01-02")) {
			t.Errorf("a keyed pending order's created_at is %v", o["created_at"])
		}
	})

	t.Run("in flight is 409 with Retry-After", func(t *testing.T) {
		// The first request holds the key's lease: plant it as a request stopped mid-way would.
		api.BeginKey(t, h.srv, "ik", "carol", "k-busy", 1)
		rec := h.serve(t, keyed("ik", "carol", "k-busy", `{"quantity": 1}`))
		if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), string(events.IdempotencyInProgress)) {
			t.Fatalf("during the first request: %d %s", rec.Code, rec.Body)
		}
		if rec.Header().Get("Retry-After") == "" {
			t.Error("409 idempotency_in_progress without Retry-After")
		}
		h.fail(t, keyed("ik", "carol", "k-busy", `{"quantity": 2}`), 422, events.IdempotencyKeyReused)
	})

	t.Run("a retry after a crash finishes the first reservation", func(t *testing.T) {
		// The first request reserved (for the api's two minutes), then its process died before
		// producing: the lease runs out and the retry takes over, reserving nothing new.
		id := api.BeginKey(t, h.srv, "ik", "dave", "k-crash", 2)
		if _, err := h.redis.Reserve(context.Background(), "ik", id, "dave", 2, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		before := h.remaining(t, "ik")
		h.mr.FastForward(time.Minute) // miniredis's clock for TTLs
		h.mr.SetTime(time.Now().Add(time.Minute))
		defer h.mr.SetTime(time.Time{})
		m := h.do(t, keyed("ik", "dave", "k-crash", `{"quantity": 2}`), 202)
		wantField(t, m, "order_id", id)
		if got := h.remaining(t, "ik"); got != before {
			t.Errorf("the retry took units again: remaining %d, want %d", got, before)
		}
		h.confirm(t, id) // its event was produced by the retry
	})

	t.Run("records survive a restart and are shared by replicas", func(t *testing.T) {
		first := h.serve(t, keyed("ik", "erin", "k-restart", `{"quantity": 1}`))
		other := api.New(h.cfg, h.store, h.redis, nil) // another process on the same Redis
		t.Cleanup(other.Close)
		rec := apitest.Serve(t, h.spec, other.Handler(), keyed("ik", "erin", "k-restart", `{"quantity": 1}`))
		if rec.Code != first.Code || rec.Body.String() != first.Body.String() {
			t.Errorf("another replica answered %d %s, the first %d %s", rec.Code, rec.Body, first.Code, first.Body)
		}
	})

	t.Run("after the key expires the same body still names the same order", func(t *testing.T) {
		first := h.do(t, keyed("ik", "frank", "k-old", `{"quantity": 1}`), 202)
		h.mr.FastForward(25 * time.Hour)
		again := h.serve(t, keyed("ik", "frank", "k-old", `{"quantity": 1}`))
		if again.Code != 202 || !strings.Contains(again.Body.String(), first["order_id"].(string)) || again.Header().Get("Idempotent-Replayed") != "" {
			t.Errorf("after expiry: %d %s %v", again.Code, again.Body, again.Header())
		}
		h.fail(t, keyed("ik", "frank", "k-old", `{"quantity": 2}`), 422, events.IdempotencyKeyReused)
	})

	t.Run("a refusal is not remembered", func(t *testing.T) {
		h.fail(t, keyed("ik", "alice", "k-limit", `{"quantity": 3}`), 409, events.LimitExceeded) // alice holds 2 of 3
		h.fail(t, keyed("ik", "alice", "k-limit", `{"quantity": 3}`), 409, events.LimitExceeded)
		h.do(t, keyed("ik", "alice", "k-limit", `{"quantity": 1}`), 202) // a corrected body may reuse it
	})

	t.Run("concurrent retries reserve once", func(t *testing.T) {
		before := h.remaining(t, "ik")
		var wg sync.WaitGroup
		codes := make(chan int, 20)
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec := httptest.NewRecorder()
				h.srv.Handler().ServeHTTP(rec, keyed("ik", "grace", "k-race", `{"quantity": 1}`))
				codes <- rec.Code
			}()
		}
		wg.Wait()
		close(codes)
		var accepted int
		for c := range codes {
			switch c {
			case 202:
				accepted++
			case 409:
			default:
				t.Errorf("a concurrent retry answered %d", c)
			}
		}
		if accepted == 0 {
			t.Error("no retry was accepted")
		}
		if got := h.remaining(t, "ik"); got != before-1 {
			t.Errorf("20 concurrent retries took %d units, want 1", before-got)
		}
	})
}

func TestIdempotencyKeyWhenKafkaFails(t *testing.T) {
	h := newHarness(t, func(c *api.Config) { c.Brokers, c.ProduceTimeout = []string{"127.0.0.1:1"}, 300*time.Millisecond })
	h.createCampaign(t, `{"id": "ikf", "name": "No Kafka", "stock": 5, "per_user_limit": 5}`)
	first := h.serve(t, keyed("ikf", "alice", "k-1", `{"quantity": 2}`))
	if first.Code != http.StatusServiceUnavailable {
		t.Fatalf("purchase with Kafka down: %d %s", first.Code, first.Body)
	}
	if first.Header().Get("Retry-After") == "" { // as every 503 (README)
		t.Errorf("the cancelled order's 503 has no Retry-After")
	}
	if got := h.remaining(t, "ikf"); got != 5 {
		t.Errorf("remaining %d after the cancelled order, want 5", got)
	}
	// The key names the cancelled order for good: the retry is told so, byte for byte.
	again := h.serve(t, keyed("ikf", "alice", "k-1", `{"quantity": 2}`))
	if again.Code != first.Code || again.Body.String() != first.Body.String() || again.Header().Get("Retry-After") == "" {
		t.Errorf("retry answered %d %s (Retry-After %q), first %d %s", again.Code, again.Body, again.Header().Get("Retry-After"), first.Code, first.Body)
	}
	// Even once the record is gone, the order's id finds it cancelled and reserves nothing.
	h.mr.FastForward(25 * time.Hour)
	h.fail(t, keyed("ikf", "alice", "k-1", `{"quantity": 2}`), 503, events.Unavailable)
	if got := h.remaining(t, "ikf"); got != 5 {
		t.Errorf("remaining %d, want 5", got)
	}
	id := api.KeyedOrderID(h.srv, "ikf", "alice", "k-1")
	o := h.do(t, request("GET", "/v1/orders/"+id, "", user("alice")...), 200)
	wantField(t, o, "status", events.Failed)
	wantField(t, o, "reason", events.ReasonProduce)
}

func TestKeyedOrderID(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	s := api.New(api.Config{OrderIDSecret: []byte("order-id-secret-of-at-least-32-bytes"), Logger: quiet}, nil, nil, nil)
	seen := map[string]bool{}
	for _, tc := range [][3]string{
		{"c", "alice", "k"}, {"c", "alice", "k2"}, {"c", "bob", "k"}, {"c2", "alice", "k"},
		{"c", "ali", "cek"}, {"c", "alice:", "k"}, {strings.Repeat("c", 64), strings.Repeat("u", 128), strings.Repeat("k", 255)},
	} {
		id := api.KeyedOrderID(s, tc[0], tc[1], tc[2])
		if c, ok := events.CampaignOf(id); !ok || c != tc[0] {
			t.Errorf("%q is not an order id of campaign %q", id, tc[0])
		}
		if _, ok := events.IDTime(id); ok {
			t.Errorf("events.IDTime takes %q for a time-ordered id", id)
		}
		if id != api.KeyedOrderID(s, tc[0], tc[1], tc[2]) {
			t.Errorf("%v: the id is not stable", tc)
		}
		if seen[id] {
			t.Errorf("%v: id %q collides", tc, id)
		}
		seen[id] = true
	}
	// Keyed by the deployment's secret: apis that share it derive the same id, and nobody
	// without it can, whatever they know of the buyer and the key.
	same := api.New(api.Config{OrderIDSecret: []byte("order-id-secret-of-at-least-32-bytes"), Logger: quiet}, nil, nil, nil)
	other := api.New(api.Config{OrderIDSecret: []byte("another-order-id-secret-of-32-bytes"), Logger: quiet}, nil, nil, nil)
	fromJWT := api.New(api.Config{JWTSecret: []byte("jwt-secret-of-at-least-32-bytes!!!"), Logger: quiet}, nil, nil, nil)
	fromJWT2 := api.New(api.Config{JWTSecret: []byte("jwt-secret-of-at-least-32-bytes!!!"), Logger: quiet}, nil, nil, nil)
	alone, alone2 := api.New(api.Config{Logger: quiet}, nil, nil, nil), api.New(api.Config{Logger: quiet}, nil, nil, nil)
	id := api.KeyedOrderID(s, "c", "alice", "first-try")
	switch {
	case api.KeyedOrderID(same, "c", "alice", "first-try") != id:
		t.Error("two apis with one secret derive different ids")
	case api.KeyedOrderID(other, "c", "alice", "first-try") == id:
		t.Error("another secret derives the same id")
	case api.KeyedOrderID(fromJWT, "c", "alice", "first-try") != api.KeyedOrderID(fromJWT2, "c", "alice", "first-try"):
		t.Error("two apis with one JWT secret derive different ids")
	case api.KeyedOrderID(alone, "c", "alice", "first-try") == api.KeyedOrderID(alone2, "c", "alice", "first-try"):
		t.Error("two apis without secrets derive the same id: the key would be public")
	}
	// The records share their campaign's hash tag, so one script touches one slot.
	tag := func(k string) string { return k[strings.Index(k, "{") : strings.Index(k, "}")+1] }
	if got, want := tag(api.IdempotencyRedisKey("c1", "x")), tag(lua.KeysOf("c1").Stock); got != want {
		t.Errorf("record hash tag %s, campaign's %s", got, want)
	}
}
