package main

import (
	"bufio"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
)

// TestPurchaseGuards runs the api's guards on real Redis, PostgreSQL and Kafka: keyed retries
// buy once, forged and expired tokens are refused, and the status stream follows the real
// consumer.
func TestPurchaseGuards(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, brokers []string) {
		p := startPipeline(t, brokers)
		c := p.createCampaign(t, 10, 3)
		path := "/v1/campaigns/" + c + "/purchases"

		// Ten concurrent retries of one keyed purchase: one order, bought once.
		var wg sync.WaitGroup
		ids := make(chan string, 10)
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, body := p.do(t, "POST", path, map[string]string{"X-User-ID": "alice", "Idempotency-Key": "tap-1"}, map[string]any{"quantity": 2})
				switch code {
				case http.StatusAccepted:
					ids <- body["order_id"].(string)
				case http.StatusConflict:
					if errorCode(body) != string(events.IdempotencyInProgress) {
						t.Errorf("a retry answered 409 %v", body)
					}
				default:
					t.Errorf("a retry answered %d %v", code, body)
				}
			}()
		}
		wg.Wait()
		close(ids)
		var id string
		for got := range ids {
			if id != "" && got != id {
				t.Errorf("one key named two orders: %s and %s", id, got)
			}
			id = got
		}
		if id == "" {
			t.Fatal("no retry was accepted")
		}
		p.waitStatus(t, "alice", id, events.Confirmed)
		if code, body := p.do(t, "POST", path, map[string]string{"X-User-ID": "alice", "Idempotency-Key": "tap-1"}, map[string]any{"quantity": 2}); code != 202 || body["order_id"] != id {
			t.Errorf("a late retry: %d %v", code, body)
		}
		if code, body := p.do(t, "POST", path, map[string]string{"X-User-ID": "alice", "Idempotency-Key": "tap-1"}, map[string]any{"quantity": 1}); code != 422 || errorCode(body) != string(events.IdempotencyKeyReused) {
			t.Errorf("the key with another body: %d %v", code, body)
		}
		if camp := p.campaign(t, c); camp["remaining"] != 8.0 || camp["sold"] != 2.0 {
			t.Errorf("after one keyed purchase of 2 retried 12 times: %v", camp)
		}

		// Tokens: a forged or an expired one is refused.
		forged, _ := api.MintToken([]byte("another-secret-of-at-least-32-bytes"), e2eIssuer, "", "alice", time.Hour, time.Now())
		expired, _ := api.MintToken([]byte(p.secret), e2eIssuer, "", "alice", time.Second, time.Now().Add(-time.Hour))
		for name, tok := range map[string]string{"forged": forged, "expired": expired} {
			if code, body := p.do(t, "GET", "/v1/orders/"+id, map[string]string{"Authorization": "Bearer " + tok}, nil); code != 401 || errorCode(body) != "unauthorized" {
				t.Errorf("%s token: %d %v", name, code, body)
			}
		}

		// The status stream of a new order follows the consumer to confirmed, then ends.
		code, body := p.do(t, "POST", path, map[string]string{"X-User-ID": "bob"}, map[string]any{"quantity": 1})
		if code != 202 {
			t.Fatalf("purchase: %d %v", code, body)
		}
		req, _ := http.NewRequest("GET", p.base+"/v1/orders/"+body["order_id"].(string)+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+p.token(t, "bob"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var statuses []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() { // ends when the server ends the stream
			if s, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
				statuses = append(statuses, s)
			}
		}
		if len(statuses) == 0 || statuses[len(statuses)-1] != string(events.Confirmed) {
			t.Errorf("stream statuses %v, want … confirmed", statuses)
		}
	})
}
