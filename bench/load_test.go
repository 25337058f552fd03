package bench

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestClosedLoopCountsOutcomes(t *testing.T) {
	addr, _ := server(t)
	paths := []string{"/accepted", "/sold-out", "/chunked"}
	load := Load{
		Name: "test", Addr: addr, Requests: 300, Concurrency: 8,
		NewRequester: func() Requester {
			return func(i int64, dst []byte) []byte { return append(dst, get(addr, paths[i%3])...) }
		},
	}
	var observed sync.WaitGroup
	observed.Add(1)
	load.Observe = func(done func() int64, _ time.Time) { defer observed.Done(); _ = done() }
	res, err := load.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	observed.Wait()
	want := map[string]int64{"202": 100, "409 sold_out": 100, "200": 100}
	for k, v := range want {
		if res.Outcomes[k] != v {
			t.Errorf("outcome %q: %d, want %d (all: %v)", k, res.Outcomes[k], v, res.Outcomes)
		}
	}
	if res.Requests != 300 || res.Errors != 0 || res.Latency.Count != 300 {
		t.Errorf("requests %d, errors %d, latencies %d: want 300, 0, 300", res.Requests, res.Errors, res.Latency.Count)
	}
	if res.Count("2") != 200 || len(res.Timeline) == 0 || res.Throughput <= 0 {
		t.Errorf("2xx %d, timeline %d points, throughput %f", res.Count("2"), len(res.Timeline), res.Throughput)
	}
	if _, ok := res.FirstSeen["409 sold_out"]; !ok {
		t.Error("no first-seen time for sold_out")
	}
	if keys := res.OutcomeKeys(); len(keys) != 3 {
		t.Errorf("outcome keys %v", keys)
	}
}

func TestOpenLoopMeasuresFromTheDueTime(t *testing.T) {
	addr, _ := server(t)
	res, err := Load{
		Addr: addr, Requests: 50, Concurrency: 4, Rate: 5000,
		NewRequester: func() Requester {
			return func(_ int64, dst []byte) []byte { return append(dst, get(addr, "/accepted")...) }
		},
	}.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcomes["202"] != 50 || res.Rate != 5000 {
		t.Errorf("outcomes %v, rate %f", res.Outcomes, res.Rate)
	}
}

func TestTransportErrorsAreCounted(t *testing.T) {
	res, err := Load{
		Addr: "127.0.0.1:1", Requests: 5, Concurrency: 2,
		NewRequester: func() Requester { return func(_ int64, dst []byte) []byte { return append(dst, get("x", "/")...) } },
	}.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 5 || res.Outcomes["0 error"] != 5 || res.FirstError == "" || res.Latency.Count != 0 {
		t.Errorf("errors %d, outcomes %v, first %q", res.Errors, res.Outcomes, res.FirstError)
	}
}

func TestLoadNeedsItsFields(t *testing.T) {
	if _, err := (Load{Addr: "x"}).Run(context.Background()); err == nil {
		t.Fatal("a load without requests ran")
	}
}

// echoServer records the purchases it gets.
func echoServer(t *testing.T) (string, chan *http.Request) {
	got := make(chan *http.Request, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		got <- r
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), got
}

func TestPurchaseRequestsNameTheBuyer(t *testing.T) {
	addr, got := echoServer(t)
	secret := []byte("0123456789abcdef0123456789abcdef")
	for _, id := range []Identity{{}, {Secret: secret, Issuer: "bench"}} {
		t.Run(id.Mode(), func(t *testing.T) {
			res, err := Load{Addr: addr, Requests: 3, Concurrency: 1,
				NewRequester: PurchaseRequests(addr, "camp-1", Users{N: 10, Prefix: "u"}, id)}.Run(context.Background())
			if err != nil || res.Outcomes["202"] != 3 {
				t.Fatalf("%v %v", res.Outcomes, err)
			}
			for range 3 {
				r := <-got
				body, _ := io.ReadAll(r.Body)
				if r.Method != "POST" || r.URL.Path != "/v1/campaigns/camp-1/purchases" || string(body) != `{"quantity":1}` ||
					r.Header.Get("Content-Type") != "application/json" {
					t.Fatalf("request %s %s %q %q", r.Method, r.URL.Path, body, r.Header.Get("Content-Type"))
				}
				user := r.Header.Get("X-User-ID")
				if id.Secret != nil {
					tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
					if !ok {
						t.Fatalf("no bearer token: %v", r.Header)
					}
					claims := verifyHS256(t, tok, secret)
					if claims["iss"] != "bench" || claims["exp"] == nil {
						t.Errorf("claims %v", claims)
					}
					user, _ = claims["sub"].(string)
				}
				if !strings.HasPrefix(user, "u") {
					t.Errorf("buyer %q", user)
				}
			}
		})
	}
}

// verifyHS256 checks a token's signature and returns its claims.
func verifyHS256(t *testing.T, tok string, secret []byte) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("token %q", tok)
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	if base64.RawURLEncoding.EncodeToString(mac.Sum(nil)) != parts[2] {
		t.Fatalf("token %q: bad signature", tok)
	}
	var header, claims map[string]any
	for i, v := range []*map[string]any{&header, &claims} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil || json.Unmarshal(b, v) != nil {
			t.Fatalf("token part %d undecodable", i)
		}
	}
	if header["alg"] != "HS256" {
		t.Fatalf("header %v", header)
	}
	return claims
}

func TestUsersVisitEveryBuyerOncePerRound(t *testing.T) {
	for _, n := range []int64{1, 7, 100, 1000, 1_000_003} {
		u := Users{N: n, Prefix: "u"}
		seen := map[string]bool{}
		var b []byte
		for i := range min(n, 5000) {
			b = u.appendUser(b[:0], i)
			if seen[string(b)] {
				t.Fatalf("n=%d: %s bought twice in the first round", n, b)
			}
			seen[string(b)] = true
		}
	}
}
