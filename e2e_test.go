package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/apitest"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// pipeline is the three roles started by run, exactly as the binary starts them, on real Redis
// and PostgreSQL and the given Kafka brokers, with topics of the test's own.
type pipeline struct {
	base    string // the api's URL
	admin   string // the admin token
	secret  string // the buyers' JWT secret
	args    []string
	brokers []string
	topics  events.Topics
	store   *store.Store
	redis   *lua.Redis
	spec    *openapi3.T
}

func startPipeline(t *testing.T, brokers []string) *pipeline {
	t.Helper()
	rdb := luatest.MustRedis(t)
	pgURL := storetest.PostgresURL(t)
	topics := kafkatest.Topics(t, brokers)
	p := &pipeline{
		base:    "http://" + freeAddr(t),
		admin:   "admin-" + events.NewID(),
		secret:  "jwt-" + events.NewID() + events.NewID(),
		brokers: brokers,
		topics:  topics,
		args: []string{
			"--redis-url", os.Getenv(luatest.RedisEnv),
			"--postgres-url", pgURL,
			"--kafka-brokers", strings.Join(brokers, ","),
			"--topic-prefix", strings.TrimSuffix(topics.Requested, ".orders.requested"),
			"--log-format", "text",
		},
		redis: lua.New(rdb),
		spec:  apitest.LoadSpec(t),
	}
	t.Cleanup(func() { p.redis.Close() })
	p.mustRun(t, "migrate")
	p.store = storetest.MustOpen(t, pgURL)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	codes := make(chan string, 3)
	for _, role := range [][]string{
		{"api", "--addr", strings.TrimPrefix(p.base, "http://"), "--metrics-addr", "127.0.0.1:0", "--admin-token", p.admin, "--insecure-user-header", "--partitions", "3", "--replication", "1", "--reservation-ttl", "1m",
			"--jwt-secret", p.secret, "--jwt-issuer", e2eIssuer},
		{"consumer", "--metrics-addr", "127.0.0.1:0", "--batch-size", "100"},
		{"compensator", "--metrics-addr", "127.0.0.1:0", "--sweep-interval", "200ms", "--rebuild-grace", "500ms"},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			if code := run(ctx, append(role, p.args...), &out, &out); code != 0 {
				codes <- fmt.Sprintf("%s exited %d: %s", role[0], code, out.String())
			}
		}()
	}
	t.Cleanup(func() {
		cancel() // SIGTERM's twin: every role must drain and return 0
		wg.Wait()
		close(codes)
		for msg := range codes {
			t.Error(msg)
		}
	})
	eventually(t, 30*time.Second, "the api is ready", func() bool {
		resp, err := http.Get(p.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// run runs a one-shot command with the pipeline's connection flags.
func (p *pipeline) run(args ...string) (string, error) {
	var out bytes.Buffer
	if code := run(context.Background(), append(args, connFor(args, p.args)...), &out, &out); code != 0 {
		return out.String(), fmt.Errorf("seckill %v exited %d", args, code)
	}
	return out.String(), nil
}

// mustRun is run for a command that must succeed.
func (p *pipeline) mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := p.run(args...)
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	return out
}

// e2eIssuer is the iss of the buyers' tokens.
const e2eIssuer = "seckill-e2e"

// token mints a buyer's bearer token, as `seckill token` does.
func (p *pipeline) token(t *testing.T, user string) string {
	t.Helper()
	tok, err := api.MintToken([]byte(p.secret), e2eIssuer, "", user, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// rawBody is a request body sent as it is, for malformed JSON.
type rawBody string

// do sends a JSON request and decodes the JSON answer.
func (p *pipeline) do(t *testing.T, method, path string, header map[string]string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if raw, ok := body.(rawBody); ok {
		rd = strings.NewReader(string(raw))
	} else if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, p.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		if k == "X-User-ID" {
			// The stories name buyers; the api, as in production, knows them by their tokens.
			k, v = "Authorization", "Bearer "+p.token(t, v)
		}
		req.Header.Set(k, v)
	}
	// Every exchange of the end-to-end tests is checked against api/openapi.yaml.
	client := &http.Client{Transport: apitest.Transport(t, p.spec, nil)}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: status %d, undecodable body: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

func (p *pipeline) createCampaign(t *testing.T, stock, limit int) string {
	t.Helper()
	id := storetest.Name("e2e")
	code, body := p.do(t, "POST", "/v1/campaigns", map[string]string{"Authorization": "Bearer " + p.admin},
		map[string]any{"id": id, "name": "End to end", "stock": stock, "per_user_limit": limit})
	if code != http.StatusCreated {
		t.Fatalf("create campaign: %d %v", code, body)
	}
	return id
}

// buy purchases and returns the status code, the order id (on 202) and the error code (else).
func (p *pipeline) buy(t *testing.T, campaign, user string, qty int) (int, string, string) {
	t.Helper()
	code, body := p.do(t, "POST", "/v1/campaigns/"+campaign+"/purchases", map[string]string{"X-User-ID": user}, map[string]any{"quantity": qty})
	if code == http.StatusAccepted {
		if body["status"] != "pending" {
			t.Fatalf("purchase answered 202 with %v", body)
		}
		return code, body["order_id"].(string), ""
	}
	return code, "", errorCode(body)
}

func errorCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func (p *pipeline) order(t *testing.T, user, id string) map[string]any {
	t.Helper()
	code, body := p.do(t, "GET", "/v1/orders/"+id, map[string]string{"X-User-ID": user}, nil)
	if code != http.StatusOK {
		t.Fatalf("get order %s: %d %v", id, code, body)
	}
	return body
}

func (p *pipeline) campaign(t *testing.T, id string) map[string]any {
	t.Helper()
	code, body := p.do(t, "GET", "/v1/campaigns/"+id, nil, nil)
	if code != http.StatusOK {
		t.Fatalf("get campaign %s: %d %v", id, code, body)
	}
	return body
}

// waitStatus waits until the order has the status, and returns the order.
func (p *pipeline) waitStatus(t *testing.T, user, id string, want events.Status) map[string]any {
	t.Helper()
	var o map[string]any
	eventually(t, 20*time.Second, fmt.Sprintf("order %s is %s", id, want), func() bool {
		o = p.order(t, user, id)
		return o["status"] == string(want)
	})
	return o
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// conservation checks I1 and I4 for a campaign whose orders are all final: Redis's remaining
// plus the confirmed units in the store equals the stock, and the store's sold equals them.
func (p *pipeline) conservation(t *testing.T, campaign string, stock int64) {
	t.Helper()
	ctx := context.Background()
	var confirmed int64
	if err := p.store.DB().GetContext(ctx, &confirmed, p.store.DB().Rebind(
		`SELECT COALESCE(SUM(quantity), 0) FROM orders WHERE campaign_id = ? AND status = 'confirmed'`), campaign); err != nil {
		t.Fatal(err)
	}
	remaining, _, err := p.redis.Remaining(ctx, campaign)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.store.Campaign(ctx, campaign)
	if err != nil {
		t.Fatal(err)
	}
	if remaining < 0 || c.Sold > c.Stock {
		t.Errorf("oversold: remaining %d, sold %d of %d", remaining, c.Sold, c.Stock)
	}
	if remaining+confirmed != stock || c.Sold != confirmed {
		t.Errorf("conservation: remaining %d + confirmed %d != stock %d (store sold %d)", remaining, confirmed, stock, c.Sold)
	}
	// The audit command must agree: every invariant holds.
	p.mustRun(t, "audit", "--campaign", campaign)
}
