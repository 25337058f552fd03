package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/apitest"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// harness is an api server on in-process dependencies (SQLite, miniredis, kfake) whose every
// exchange is checked against api/openapi.yaml.
type harness struct {
	spec    *openapi3.T
	srv     *api.Server
	admin   string
	kafka   *kfake.Cluster
	brokers []string
	topics  events.Topics
	store   *store.Store
	redis   *lua.Redis
	mr      *miniredis.Miniredis
	cfg     api.Config
	// commands counts the Redis commands the server sent, pipelined or not.
	commands *commandCounter
	// gate holds the server's Redis pipelines while it is shut.
	gate *pipelineGate
}

// adminRoutes returns every route ("METHOD /path") that takes the admin token, and fails the
// test if it finds fewer than the ten there are: a test over them must not pass on none.
func (h *harness) adminRoutes(t *testing.T) []string {
	t.Helper()
	var routes []string
	for _, r := range h.srv.Routes() {
		_, path, _ := strings.Cut(r, " ")
		if strings.HasPrefix(path, "/v1/admin/") || r == "POST /v1/campaigns" {
			routes = append(routes, r)
		}
	}
	if len(routes) < 10 {
		t.Fatalf("%d admin routes found, want every one of them", len(routes))
	}
	return routes
}

// newHarness starts a server; options change its configuration before it starts.
func newHarness(t *testing.T, options ...func(*api.Config)) *harness {
	t.Helper()
	h := &harness{spec: apitest.LoadSpec(t), admin: "admin-" + events.NewID(), commands: &commandCounter{}, gate: &pipelineGate{}}
	h.store = storetest.MustOpen(t, storetest.SQLiteURL(t))
	h.mr = miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: h.mr.Addr(), MaxRetries: -1, DialerRetries: 1}) // fail fast once Redis is stopped
	rdb.AddHook(h.commands)
	rdb.AddHook(h.gate)
	t.Cleanup(func() { rdb.Close() })
	h.redis = lua.New(rdb)
	// The gate stands for a Redis that is slow and answers: a purchase held at it must wait for
	// its answer, however long the test holds the gate on a busy machine.
	h.redis.SetAnswerWait(time.Minute)
	t.Cleanup(func() { h.redis.Close() })
	h.kafka = kafkatest.FakeCluster(t)
	h.brokers = h.kafka.ListenAddrs()
	h.topics = kafkatest.Topics(t, h.brokers)
	h.cfg = api.Config{
		AdminToken: h.admin, Topics: h.topics, ProduceTimeout: 10 * time.Second, Brokers: h.brokers,
		InsecureUserHeader: true, JWTSecret: []byte(testSecret), JWTIssuer: testIssuer,
		Logger: slog.New(slog.DiscardHandler),
	}
	for _, o := range options {
		o(&h.cfg)
	}
	// The producer's brokers are the config's, which an option may point where nothing answers;
	// an option that takes them away leaves the api without a reader, and it produces to ours.
	producerBrokers := h.cfg.Brokers
	if len(producerBrokers) == 0 {
		producerBrokers = h.brokers
	}
	h.srv = api.New(h.cfg, h.store, h.redis, kafkatest.Client(t, producerBrokers))
	t.Cleanup(h.srv.Close)
	return h
}

// commandCounter is a go-redis hook that counts commands.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// request builds a request; headers come in name, value pairs.
func request(method, path, body string, headers ...string) *http.Request {
	var r *http.Request
	if body == "" {
		r = httptest.NewRequest(method, path, nil)
	} else {
		r = httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	return r
}

// do serves r, checks the exchange against the spec and the status against want, and
// returns the decoded JSON body (nil if it is not JSON).
func (h *harness) do(t *testing.T, r *http.Request, want int) map[string]any {
	t.Helper()
	rec := apitest.Serve(t, h.spec, h.srv.Handler(), r)
	if rec.Code != want {
		t.Errorf("%s %s: status %d, want %d; body %s", r.Method, r.URL, rec.Code, want, rec.Body)
	}
	var m map[string]any
	if json.Unmarshal(rec.Body.Bytes(), &m) != nil {
		return nil
	}
	return m
}

// fail is do for an error answer: it checks the error code too.
func (h *harness) fail(t *testing.T, r *http.Request, want int, code events.Code) {
	t.Helper()
	m := h.do(t, r, want)
	e, _ := m["error"].(map[string]any)
	if got, _ := e["code"].(string); got != string(code) {
		t.Errorf("%s %s: error code %q, want %q; body %v", r.Method, r.URL, got, code, m)
	}
	msg, _ := e["message"].(string)
	noInternals(t, r.Method+" "+r.URL.String(), msg)
}

// internals are words of a dependency or of Go that a public answer must never carry: they
// belong in the log.
var internals = []string{"dial tcp", "read tcp", "connection refused", "i/o timeout", "127.0.0.1", "driver:",
	"sql:", "redis:", "json:", "Go struct", "Go value", "int64", "purchaseRequest", "campaignRequest"}

func noInternals(t *testing.T, what, body string) {
	t.Helper()
	for _, w := range internals {
		if strings.Contains(body, w) {
			t.Errorf("%s: the answer carries %q: %s", what, w, body)
		}
	}
}

// campaignShows reads campaign id until its field is want, and returns it: a page shows the
// store's counts as the store said at most a second ago.
func (h *harness) campaignShows(t *testing.T, id, field string, want any) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		m := h.do(t, request("GET", "/v1/campaigns/"+id, ""), http.StatusOK)
		if fmt.Sprint(m[field]) == fmt.Sprint(want) || time.Now().After(deadline) {
			wantField(t, m, field, want)
			return m
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *harness) bearer() []string { return []string{"Authorization", "Bearer " + h.admin} }

func user(name string) []string { return []string{"X-User-ID", name} }

func with(hs ...[]string) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h...)
	}
	return out
}

func (h *harness) createCampaign(t *testing.T, body string) map[string]any {
	t.Helper()
	return h.do(t, request("POST", "/v1/campaigns", body, h.bearer()...), http.StatusCreated)
}

func (h *harness) buy(t *testing.T, campaign, buyer string, qty int) string {
	t.Helper()
	m := h.do(t, request("POST", "/v1/campaigns/"+campaign+"/purchases", fmt.Sprintf(`{"quantity": %d}`, qty), user(buyer)...), http.StatusAccepted)
	id, _ := m["order_id"].(string)
	if id == "" {
		t.Fatalf("purchase answered no order id: %v", m)
	}
	return id
}

// confirm does the consumer's work for one order: it reads the OrderRequested event the
// purchase produced and stores it, then marks the reservation confirmed.
func (h *harness) confirm(t *testing.T, orderID string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.brokers...), kgo.ConsumeTopics(h.topics.Requested),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no OrderRequested event for %s on %s", orderID, h.topics.Requested)
		}
		for _, rec := range fs.Records() {
			ev, err := events.Decode(rec.Value)
			if err != nil {
				t.Fatalf("decode %s: %v", rec.Value, err)
			}
			if ev.OrderID != orderID {
				continue
			}
			if _, err := h.store.ConfirmOrders(ctx, []events.Event{ev}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.redis.Confirm(ctx, orderID); err != nil {
				t.Fatal(err)
			}
			res, err := events.Record(h.topics.Results, ev.New(events.OrderConfirmed, time.Now()))
			if err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(ctx, res).FirstErr(); err != nil {
				t.Fatalf("announce %s: %v", orderID, err)
			}
			return
		}
	}
}

func wantField(t *testing.T, m map[string]any, key string, want any) {
	t.Helper()
	if got := m[key]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s = %v, want %v (in %v)", key, got, want, m)
	}
}

// wantDependencyUp checks seckill_api_dependency_up of dep after a readyz that asked it.
func wantDependencyUp(t *testing.T, dep string, want float64) {
	t.Helper()
	if got := api.DependencyUp(dep); got != want {
		t.Errorf("seckill_api_dependency_up{dependency=%q} = %v, want %v", dep, got, want)
	}
}

// TestContract walks every operation through its documented answers on a real server, and
// checks each exchange against api/openapi.yaml.
func TestContract(t *testing.T) {
	h := newHarness(t)
	now := time.Now().UTC()
	var aliceOrder, bobOrder string

	t.Run("health", func(t *testing.T) {
		wantField(t, h.do(t, request("GET", "/healthz", ""), 200), "status", "ok")
		ready := h.do(t, request("GET", "/readyz", ""), 200)
		for _, dep := range []string{"redis", "kafka", "store"} {
			wantField(t, ready, dep, "ok")
			wantDependencyUp(t, dep, 1)
		}
		// Sales counters and the process's figures are for operators: --metrics-addr serves them.
		rec := httptest.NewRecorder()
		h.srv.Handler().ServeHTTP(rec, request("GET", "/metrics", ""))
		if rec.Code != http.StatusNotFound || strings.Contains(rec.Body.String(), "seckill_") {
			t.Errorf("GET /metrics on the public port: %d %s", rec.Code, rec.Body)
		}
	})

	t.Run("create campaigns", func(t *testing.T) {
		valid := `{"id": "c1", "name": "Lamp", "stock": 3, "per_user_limit": 2}`
		h.fail(t, request("POST", "/v1/campaigns", valid), 401, events.Unauthorized)
		h.fail(t, request("POST", "/v1/campaigns", valid, "Authorization", "Bearer wrong"), 401, events.Unauthorized)
		for _, body := range []string{
			`{"id": "c1", "name": "Lamp", "stock": 3, "per_user_limit": 2, "color": "red"}`,
			`{"name": "Lamp", "per_user_limit": 2}`,
			`{"name": "Lamp", "stock": -1, "per_user_limit": 2}`,
			`{"name": "Lamp", "stock": 3, "per_user_limit": 0}`,
			`{"name": "", "stock": 3, "per_user_limit": 1}`,
			`{"id": "has.dot", "name": "Lamp", "stock": 3, "per_user_limit": 1}`,
			`{"name": "Lamp", "stock": 3, "per_user_limit": 1, "starts_at": "2030-01-02T00:00:00Z", "ends_at": "2030-01-01T00:00:00Z"}`,
			`[]`,
		} {
			h.fail(t, request("POST", "/v1/campaigns", body, h.bearer()...), 400, events.Invalid)
		}
		c := h.createCampaign(t, valid)
		wantField(t, c, "id", "c1")
		wantField(t, c, "remaining", 3)
		wantField(t, c, "sold", 0)
		wantField(t, c, "ends_at", nil)
		wantField(t, h.createCampaign(t, valid), "id", "c1") // a retry: the campaign it created
		h.fail(t, request("POST", "/v1/campaigns", strings.Replace(valid, `"stock": 3`, `"stock": 4`, 1), h.bearer()...), 409, events.CampaignExists)
		if id, _ := h.createCampaign(t, `{"name": "No id", "stock": 0, "per_user_limit": 1}`)["id"].(string); id == "" {
			t.Error("a campaign created without an id got none")
		}
		h.createCampaign(t, fmt.Sprintf(`{"id": "future", "name": "Later", "stock": 5, "per_user_limit": 1, "starts_at": %q}`, now.Add(time.Hour).Format(time.RFC3339)))
		h.createCampaign(t, fmt.Sprintf(`{"id": "past", "name": "Over", "stock": 5, "per_user_limit": 1, "starts_at": %q, "ends_at": %q}`,
			now.Add(-2*time.Hour).Format(time.RFC3339), now.Add(-time.Hour).Format(time.RFC3339Nano)))

		got := h.do(t, request("GET", "/v1/campaigns/c1", ""), 200)
		wantField(t, got, "name", "Lamp")
		wantField(t, got, "remaining", 3)
		h.fail(t, request("GET", "/v1/campaigns/nope", ""), 404, events.CampaignNotFound)
		h.fail(t, request("GET", "/v1/campaigns/no.such", ""), 404, events.CampaignNotFound)
	})

	t.Run("purchases", func(t *testing.T) {
		buy := func(campaign, body string, headers ...string) *http.Request {
			return request("POST", "/v1/campaigns/"+campaign+"/purchases", body, headers...)
		}
		h.fail(t, buy("c1", `{"quantity": 1}`), 401, events.Unauthorized)
		for _, body := range []string{`{"quantity": 0}`, `{"quantity": 1, "coupon": "x"}`, `{"quantity": "1"}`, `{}`, `not json`, `{"quantity": 3}`} {
			h.fail(t, buy("c1", body, user("alice")...), 400, events.Invalid)
		}
		h.fail(t, buy("nope", `{"quantity": 1}`, user("alice")...), 404, events.CampaignNotFound)
		h.fail(t, buy("future", `{"quantity": 1}`, user("alice")...), 409, events.NotStarted)
		h.fail(t, buy("past", `{"quantity": 1}`, user("alice")...), 409, events.Ended)

		aliceOrder = h.buy(t, "c1", "alice", 2)
		if c, _ := events.CampaignOf(aliceOrder); c != "c1" {
			t.Errorf("order id %q is not of campaign c1", aliceOrder)
		}
		h.fail(t, buy("c1", `{"quantity": 1}`, user("alice")...), 409, events.LimitExceeded)
		h.fail(t, buy("c1", `{"quantity": 2}`, user("bob")...), 409, events.SoldOut)
		bobOrder = h.buy(t, "c1", "bob", 1)
		h.fail(t, buy("c1", `{"quantity": 1}`, user("carol")...), 409, events.SoldOut)

		c := h.do(t, request("GET", "/v1/campaigns/c1", ""), 200)
		wantField(t, c, "remaining", 0)
		wantField(t, c, "sold", 0)
	})

	t.Run("orders", func(t *testing.T) {
		path := "/v1/orders/" + aliceOrder
		h.fail(t, request("GET", path, ""), 401, events.Unauthorized)
		h.fail(t, request("GET", path, "", user("bob")...), 404, events.OrderNotFound)
		h.fail(t, request("GET", "/v1/orders/c1.nosuchorder", "", user("alice")...), 404, events.OrderNotFound)
		h.fail(t, request("GET", "/v1/orders/garbage", "", user("alice")...), 404, events.OrderNotFound)
		o := h.do(t, request("GET", path, "", user("alice")...), 200)
		wantField(t, o, "status", events.Pending)
		wantField(t, o, "quantity", 2)
		wantField(t, o, "user_id", "alice")

		h.confirm(t, aliceOrder)
		o = h.do(t, request("GET", path, "", user("alice")...), 200)
		wantField(t, o, "status", events.Confirmed)
		c := h.campaignShows(t, "c1", "sold", 2) // the consumer's count, at most a second late
		wantField(t, c, "remaining", 0)
	})

	t.Run("compensate", func(t *testing.T) {
		comp := func(id string, headers ...string) *http.Request {
			return request("POST", "/v1/admin/orders/"+id+"/compensate", "", headers...)
		}
		h.fail(t, comp(bobOrder), 401, events.Unauthorized)
		h.fail(t, comp(bobOrder, "Authorization", "Bearer wrong"), 401, events.Unauthorized)
		h.fail(t, comp("garbage", h.bearer()...), 404, events.OrderNotFound)
		h.fail(t, comp("c1.nosuchorder", h.bearer()...), 404, events.OrderNotFound)

		for range 2 { // the second call changes nothing
			wantField(t, h.do(t, comp(aliceOrder, h.bearer()...), 200), "status", events.Refunded)
		}
		o := h.do(t, comp(bobOrder, h.bearer()...), 200)
		wantField(t, o, "status", events.Failed)
		wantField(t, o, "reason", events.ReasonOperator)
		wantField(t, h.do(t, request("GET", "/v1/orders/"+bobOrder, "", user("bob")...), 200), "status", events.Failed)
		c := h.do(t, request("GET", "/v1/campaigns/c1", ""), 200)
		wantField(t, c, "remaining", 3)
		wantField(t, c, "sold", 0)
	})

	t.Run("router", func(t *testing.T) {
		h.fail(t, request("GET", "/nope", ""), 404, "not_found")
		h.fail(t, request("GET", "/v1/campaigns", ""), 405, "method_not_allowed")
		h.fail(t, request("DELETE", "/v1/campaigns/c1", ""), 405, "method_not_allowed")
	})

	t.Run("transport", func(t *testing.T) {
		ts := httptest.NewServer(h.srv.Handler())
		defer ts.Close()
		client := &http.Client{Transport: apitest.Transport(t, h.spec, nil)}
		resp, err := client.Post(ts.URL+"/v1/campaigns/c1/purchases", "application/json", strings.NewReader(`{"quantity": 1}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.Contains(string(body), `"unauthorized"`) {
			t.Errorf("purchase without a buyer: %d %s", resp.StatusCode, body)
		}
		req, _ := http.NewRequest("POST", ts.URL+"/v1/campaigns/c1/purchases", strings.NewReader(`{"quantity": 1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User-ID", "dave")
		resp, err = client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 202 {
			t.Errorf("purchase: %d", resp.StatusCode)
		}
	})

	t.Run("readiness is asked at most once a second", func(t *testing.T) {
		now := time.Now().Add(time.Hour) // past what readyz saw last
		api.SetReadyClock(h.srv, func() time.Time { return now })
		before := h.commands.n.Load()
		for range 100 {
			h.do(t, request("GET", "/readyz", ""), 200)
		}
		if pings := h.commands.n.Load() - before; pings != 1 {
			t.Errorf("100 readyz in one second sent Redis %d commands, want 1", pings)
		}
		now = now.Add(time.Second)
		h.do(t, request("GET", "/readyz", ""), 200)
		if pings := h.commands.n.Load() - before; pings != 2 {
			t.Errorf("a second later: %d commands in all, want 2", pings)
		}
	})

	// Last: it stops Redis.
	t.Run("unavailable", func(t *testing.T) {
		h.mr.Close()
		api.SetReadyClock(h.srv, func() time.Time { return time.Now().Add(2 * time.Hour) }) // past what readyz saw last
		ready := h.do(t, request("GET", "/readyz", ""), 503)
		if ready["redis"] != "unavailable" || ready["store"] != "ok" || ready["kafka"] != "ok" {
			t.Errorf("readyz with Redis down: %v", ready)
		}
		if rec := apitest.Serve(t, h.spec, h.srv.Handler(), request("GET", "/readyz", "")); rec.Header().Get("Retry-After") == "" {
			t.Errorf("readyz: 503 without Retry-After: %v", rec.Header())
		}
		// Unready, the api gets no buyers behind a load balancer: only this figure says why.
		wantDependencyUp(t, "redis", 0)
		wantDependencyUp(t, "kafka", 1)
		h.fail(t, request("GET", "/v1/campaigns/c1", ""), 503, events.Unavailable)
		h.fail(t, request("POST", "/v1/campaigns/c1/purchases", `{"quantity": 1}`, user("erin")...), 503, events.Unavailable)
		h.fail(t, request("POST", "/v1/campaigns", `{"id": "c9", "name": "Late", "stock": 1, "per_user_limit": 1}`, h.bearer()...), 503, events.Unavailable)
		h.fail(t, request("GET", "/v1/orders/c1.nosuchorder", "", user("alice")...), 503, events.Unavailable)
		rec := apitest.Serve(t, h.spec, h.srv.Handler(), request("GET", "/v1/campaigns/c1", ""))
		if rec.Header().Get("Retry-After") == "" {
			t.Errorf("503 without Retry-After: %v", rec.Header())
		}
	})
}

// recorder is a testing.TB that keeps what Check reports instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckCatchesBreaches makes sure the checker fails what it should, since the contract test
// passing means little otherwise.
func TestCheckCatchesBreaches(t *testing.T) {
	spec := apitest.LoadSpec(t)
	jsonHeader := http.Header{"Content-Type": {"application/json"}}
	errBody := func(code string) []byte {
		return []byte(`{"error": {"code": "` + code + `", "message": "m"}}`)
	}
	newReq := func(method, path, body string, headers ...string) *http.Request {
		var r *http.Request
		if body == "" {
			r, _ = http.NewRequest(method, path, nil)
		} else {
			r, _ = http.NewRequest(method, path, strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Set(headers[i], headers[i+1])
		}
		return r
	}
	purchase := func(headers ...string) *http.Request {
		return newReq("POST", "http://x/v1/campaigns/c1/purchases", `{"quantity": 1}`, headers...)
	}
	accepted := []byte(`{"order_id": "c1.01jbx2m3k4n5p6q7r8s9t0v1w2", "status": "pending"}`)
	for _, tc := range []struct {
		name   string
		req    *http.Request
		status int
		body   []byte
		breach string // "" when the exchange keeps the contract
	}{
		{"health ok", newReq("GET", "http://x/healthz", ""), 200, []byte(`{"status": "ok"}`), ""},
		{"health body of the wrong shape", newReq("GET", "http://x/healthz", ""), 200, []byte(`{"status": "fine"}`), "response breaks"},
		{"undocumented status", newReq("GET", "http://x/healthz", ""), 418, []byte(`{}`), "response breaks"},
		{"purchase accepted", purchase("X-User-ID", "u"), 202, accepted, ""},
		{"purchase without a buyer accepted", purchase(), 202, accepted, "request breaks"},
		{"purchase without a buyer refused", purchase(), 401, errBody("unauthorized"), ""},
		{"extra field in the answer", purchase("X-User-ID", "u"), 202, []byte(`{"order_id": "c1.x", "status": "pending", "n": 1}`), "response breaks"},
		{"code of another status", purchase("X-User-ID", "u"), 409, errBody("campaign_exists"), "response breaks"},
		{"code not in the enum", purchase("X-User-ID", "u"), 409, errBody("nope"), "response breaks"},
		{"refusal", purchase("X-User-ID", "u"), 409, errBody("sold_out"), ""},
		{"unknown path", newReq("GET", "http://x/nope", ""), 404, errBody("not_found"), ""},
		{"unknown path served", newReq("GET", "http://x/nope", ""), 200, []byte(`{}`), "no such operation"},
		{"unknown method", newReq("PUT", "http://x/healthz", ""), 405, errBody("method_not_allowed"), ""},
		{"router error of the wrong shape", newReq("PUT", "http://x/healthz", ""), 405, []byte(`{"error": "no"}`), "not an Error"},
		{"body already read", httptest.NewRequest("POST", "/v1/campaigns/c1/purchases", strings.NewReader(`{"quantity": 1}`)), 202, accepted, "no GetBody"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			apitest.Check(rec, spec, tc.req, tc.status, jsonHeader, tc.body)
			switch {
			case tc.breach == "" && len(rec.errs) > 0:
				t.Errorf("Check reported a breach of a good exchange: %v", rec.errs)
			case tc.breach != "" && (len(rec.errs) == 0 || !strings.Contains(strings.Join(rec.errs, "\n"), tc.breach)):
				t.Errorf("Check reported %q, want a report containing %q", rec.errs, tc.breach)
			}
		})
	}
}

// TestReadyWhileTheStoreHangs: a store that hangs rather than refuses (a failover behind a
// stale address) is reported and does not make the api unready, whichever dependency readyz
// asks first: it must not spend the time Redis and Kafka are given. In a bubble, the store's
// ping waits out readyTimeout at once.
func TestReadyWhileTheStoreHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		entered := make(chan struct{})
		// Redis answers readyz's ping only once the store's ping hangs, so an api that asked
		// Redis first would wait for the store as much as one that asked the store first. Kafka
		// is a test's producer (none): ready.
		srv := api.New(api.Config{Logger: slog.New(slog.DiscardHandler)}, hangingStore{entered: entered}, pingAfter{entered: entered}, nil)
		defer srv.Close()
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, request("GET", "/readyz", ""))
		var ready map[string]string
		if err := json.Unmarshal(rec.Body.Bytes(), &ready); err != nil {
			t.Fatal(err)
		}
		if rec.Code != http.StatusOK || ready["store"] != "unavailable" || ready["redis"] != "ok" || ready["kafka"] != "ok" {
			t.Errorf("readyz while the store hangs: %d %v, want 200 with only the store unavailable", rec.Code, ready)
		}
	})
}

// hangingStore is a store whose Ping closes entered and waits for the end of its context.
type hangingStore struct {
	*store.Store
	entered chan struct{}
}

func (s hangingStore) Ping(ctx context.Context) error {
	close(s.entered)
	<-ctx.Done()
	return ctx.Err()
}

// pingAfter is Redis whose Ping waits until entered is closed or its context ends.
type pingAfter struct {
	api.Redis
	entered chan struct{}
}

func (p pingAfter) Ping(ctx context.Context) error {
	select {
	case <-p.entered:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestReadyWithoutTheStore: while the order store fails over, the api stays ready and sells:
// a purchase needs Redis and Kafka, and the consumer catches up with the store later. An api
// unready for the store would be taken out of the load balancer, and the sale with it.
func TestReadyWithoutTheStore(t *testing.T) {
	h := newHarness(t)
	h.createCampaign(t, `{"id": "nostore", "name": "No store", "stock": 5, "per_user_limit": 5}`)
	h.store.Close()
	ready := h.do(t, request("GET", "/readyz", ""), http.StatusOK)
	if ready["store"] != "unavailable" || ready["redis"] != "ok" || ready["kafka"] != "ok" {
		t.Errorf("readyz with the store down: %v, want 200 with the store reported unavailable", ready)
	}
	wantDependencyUp(t, "store", 0)
	h.do(t, request("POST", "/v1/campaigns/nostore/purchases", `{"quantity": 1}`, user("ann")...), http.StatusAccepted)
}

// TestEveryAnswerIsNosniff: every kind of answer tells browsers not to guess its type (a JSON
// error that echoes what a request sent must not be read as HTML): a success, a handler's
// refusal, the router's 404 and 405, a middleware's 429, the console's page and files, and
// both event streams. They carried none but the console's.
func TestEveryAnswerIsNosniff(t *testing.T) {
	h := newHarness(t, func(c *api.Config) { c.IPLimit = api.Limit{Rate: 0.001, Burst: 20} })
	h.createCampaign(t, `{"id": "sniff", "name": "Sniff", "stock": 5, "per_user_limit": 1}`)
	order := h.buy(t, "sniff", "ann", 1)
	web := httptest.NewServer(h.srv.Handler())
	t.Cleanup(web.Close) // after the streams end: it waits for them
	ask := func(method, path string, headers ...string) *http.Response {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel) // ends the streams
		req, _ := http.NewRequestWithContext(ctx, method, web.URL+path, nil)
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultTransport.RoundTrip(req) // no redirect followed
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for _, c := range []struct {
		method, path string
		headers      []string
		want         int
	}{
		{"GET", "/healthz", nil, http.StatusOK},
		{"GET", "/v1/campaigns/sniff", nil, http.StatusOK},
		{"GET", "/v1/campaigns/none", nil, http.StatusNotFound},
		{"POST", "/v1/campaigns", nil, http.StatusUnauthorized},
		{"GET", "/nowhere", nil, http.StatusNotFound},
		{"DELETE", "/healthz", nil, http.StatusMethodNotAllowed},
		{"GET", "/", nil, http.StatusFound},
		{"GET", "/console", nil, http.StatusOK},
		{"GET", "/console/console.js", nil, http.StatusOK},
		{"GET", "/v1/orders/" + order + "/events", user("ann"), http.StatusOK},
		{"GET", "/v1/admin/console/events", h.bearer(), http.StatusOK},
	} {
		resp := ask(c.method, c.path, c.headers...)
		if resp.StatusCode != c.want || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s: %d, X-Content-Type-Options %q; want %d, nosniff", c.method, c.path,
				resp.StatusCode, resp.Header.Get("X-Content-Type-Options"), c.want)
		}
	}
	for range 21 { // the address's burst, less what the cases above took, and one more
		if resp := ask("GET", "/v1/campaigns/sniff"); resp.StatusCode == http.StatusTooManyRequests {
			if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("the rate limit's 429: X-Content-Type-Options %q, want nosniff", got)
			}
			return
		}
	}
	t.Error("no 429 past the address's burst")
}
