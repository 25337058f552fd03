package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
)

// TestPipeline runs the end-to-end stories on real Redis and PostgreSQL, once on the real Kafka
// broker and once on kfake.
func TestPipeline(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, brokers []string) {
		p := startPipeline(t, brokers)
		t.Run("purchase is confirmed", func(t *testing.T) { testPurchaseConfirmed(t, p) })
		t.Run("refusals", func(t *testing.T) { testRefusals(t, p) })
		t.Run("dead letter is compensated", func(t *testing.T) { testDeadLetter(t, p) })
		t.Run("operator compensation and sweeper", func(t *testing.T) { testCompensation(t, p) })
		t.Run("crowd", func(t *testing.T) { testCrowd(t, p) })
		t.Run("replay", func(t *testing.T) { testReplay(t, p) })
		t.Run("add stock during a crowd", func(t *testing.T) { testAddStockDuringCrowd(t, p) })
		t.Run("cancel a campaign", func(t *testing.T) { testCancelCampaign(t, p) })
		t.Run("bulk compensation", func(t *testing.T) { testBulkCompensation(t, p) })
		t.Run("dead letter redrive", func(t *testing.T) { testRedrive(t, p) })
	})
}

func testPurchaseConfirmed(t *testing.T, p *pipeline) {
	c := p.createCampaign(t, 10, 2)
	code, id, errc := p.buy(t, c, "alice", 2)
	if code != http.StatusAccepted {
		t.Fatalf("purchase: %d %s", code, errc)
	}
	o := p.waitStatus(t, "alice", id, events.Confirmed)
	if o["quantity"] != 2.0 || o["campaign_id"] != c || o["user_id"] != "alice" {
		t.Errorf("confirmed order %v", o)
	}
	camp := p.campaign(t, c)
	if camp["remaining"] != 8.0 || camp["sold"] != 2.0 {
		t.Errorf("campaign after one purchase of 2: %v", camp)
	}
	// Another buyer cannot see the order.
	if code, body := p.do(t, "GET", "/v1/orders/"+id, map[string]string{"X-User-ID": "bob"}, nil); code != http.StatusNotFound || errorCode(body) != "order_not_found" {
		t.Errorf("bob reads alice's order: %d %v", code, body)
	}
	// The events are readable by an independent client.
	requested := readTopic(t, p.brokers, p.topics.Requested, id)
	if requested.Type != events.OrderRequested || requested.Quantity != 2 || requested.UserID != "alice" {
		t.Errorf("OrderRequested on the wire: %+v", requested)
	}
	if r := readTopic(t, p.brokers, p.topics.Results, id); r.Type != events.OrderConfirmed {
		t.Errorf("results topic: %+v", r)
	}
	p.conservation(t, c, 10)
}

func testRefusals(t *testing.T, p *pipeline) {
	c := p.createCampaign(t, 3, 2)
	admin := map[string]string{"Authorization": "Bearer " + p.admin}
	for _, tc := range []struct {
		name     string
		campaign string
		user     string
		qty      int
		status   int
		code     string
	}{
		{"first of two", c, "carol", 2, http.StatusAccepted, ""},
		{"over the limit", c, "carol", 1, http.StatusConflict, "limit_exceeded"},
		{"quantity above the limit", c, "dave", 3, http.StatusBadRequest, "invalid_request"},
		{"quantity zero", c, "dave", 0, http.StatusBadRequest, "invalid_request"},
		{"no such campaign", "nope-" + events.NewID()[20:], "dave", 1, http.StatusNotFound, "campaign_not_found"},
		{"last unit", c, "dave", 1, http.StatusAccepted, ""},
		{"sold out", c, "erin", 1, http.StatusConflict, "sold_out"},
	} {
		code, _, errc := p.buy(t, tc.campaign, tc.user, tc.qty)
		if code != tc.status || errc != tc.code {
			t.Errorf("%s: got %d %q, want %d %q", tc.name, code, errc, tc.status, tc.code)
		}
	}
	for _, tc := range []struct {
		name   string
		method string
		path   string
		header map[string]string
		body   any
		status int
		code   string
	}{
		// Sold out: what anyone may read, so it is said before asking who buys.
		{"no buyer, sold out", "POST", "/v1/campaigns/" + c + "/purchases", nil, map[string]any{"quantity": 1}, 409, "sold_out"},
		{"no buyer, with a key", "POST", "/v1/campaigns/" + c + "/purchases", map[string]string{"Idempotency-Key": "k1"}, map[string]any{"quantity": 1}, 401, "unauthorized"},
		{"unknown field", "POST", "/v1/campaigns/" + c + "/purchases", map[string]string{"X-User-ID": "f"}, map[string]any{"quantity": 1, "user_id": "x"}, 400, "invalid_request"},
		{"float quantity", "POST", "/v1/campaigns/" + c + "/purchases", map[string]string{"X-User-ID": "f"}, map[string]any{"quantity": 1.5}, 400, "invalid_request"},
		{"malformed JSON", "POST", "/v1/campaigns/" + c + "/purchases", map[string]string{"X-User-ID": "f"}, rawBody(`{"quantity":`), 400, "invalid_request"},
		{"create without token", "POST", "/v1/campaigns", nil, map[string]any{"name": "x", "stock": 1, "per_user_limit": 1}, 401, "unauthorized"},
		{"create with a wrong token", "POST", "/v1/campaigns", map[string]string{"Authorization": "Bearer wrong"}, map[string]any{"name": "x", "stock": 1, "per_user_limit": 1}, 401, "unauthorized"},
		{"create twice", "POST", "/v1/campaigns", admin, map[string]any{"id": c, "name": "x", "stock": 1, "per_user_limit": 1}, 409, "campaign_exists"},
		{"negative stock", "POST", "/v1/campaigns", admin, map[string]any{"name": "x", "stock": -1, "per_user_limit": 1}, 400, "invalid_request"},
		{"unknown campaign", "GET", "/v1/campaigns/nope", nil, nil, 404, "campaign_not_found"},
		{"unknown order", "GET", "/v1/orders/" + c + ".nope", map[string]string{"X-User-ID": "f"}, nil, 404, "order_not_found"},
		{"unknown route", "GET", "/v1/nothing", nil, nil, 404, "not_found"},
	} {
		code, body := p.do(t, tc.method, tc.path, tc.header, tc.body)
		if code != tc.status || errorCode(body) != tc.code {
			t.Errorf("%s: got %d %v, want %d %q", tc.name, code, body, tc.status, tc.code)
		}
	}
}

// testDeadLetter makes the store refuse an order Redis accepted (as after a Redis failover),
// and checks the compensator fails it and gives its stock back exactly once.
func testDeadLetter(t *testing.T, p *pipeline) {
	c := p.createCampaign(t, 5, 5)
	ctx := context.Background()
	if _, err := p.store.DB().ExecContext(ctx, p.store.DB().Rebind(`UPDATE campaigns SET stock = 1 WHERE id = ?`), c); err != nil {
		t.Fatal(err)
	}
	code, id, _ := p.buy(t, c, "frank", 2)
	if code != http.StatusAccepted {
		t.Fatalf("purchase: %d", code)
	}
	o := p.waitStatus(t, "frank", id, events.Failed)
	if o["reason"] != events.ReasonStoreSoldOut {
		t.Errorf("failed order's reason: %v", o["reason"])
	}
	eventually(t, 30*time.Second, "the stock is back in redis", func() bool {
		return p.campaign(t, c)["remaining"] == 5.0
	})
	rec := readRecord(t, p.brokers, p.topics.DLQ, id)
	if got := events.Header(rec, events.HeaderReason); got != events.ReasonStoreSoldOut {
		t.Errorf("DLQ reason header %q", got)
	}
	if events.Header(rec, events.HeaderSourceTopic) != p.topics.Requested || events.Header(rec, events.HeaderSourceOffset) == "" {
		t.Errorf("DLQ source headers: %v", rec.Headers)
	}
	if r := readTopic(t, p.brokers, p.topics.Results, id); r.Type != events.OrderFailed || r.Reason != events.ReasonStoreSoldOut {
		t.Errorf("results topic: %+v", r)
	}

	// A poison event goes to the DLQ with the reason, and the consumer goes on.
	cl, err := events.NewClient(p.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	marker := "poison-" + events.NewID()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: p.topics.Requested, Key: []byte(marker), Value: []byte(`{"type":"OrderRequested","version":99}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	poison := readRecordWhere(t, p.brokers, p.topics.DLQ, func(r *kgo.Record) bool { return string(r.Key) == marker })
	if got := events.Header(poison, events.HeaderReason); !strings.HasPrefix(got, events.ReasonPoison) {
		t.Errorf("poison reason header %q", got)
	}
	// The operator's view of the same: seckill dlq.
	list := p.mustRun(t, "dlq", "list")
	if !strings.Contains(list, id) || !strings.Contains(list, events.ReasonStoreSoldOut) ||
		!strings.Contains(list, "failed ("+events.ReasonStoreSoldOut+")") || !strings.Contains(list, "unreadable: left to the sweeper") {
		t.Errorf("dlq list:\n%s", list)
	}
	if only := p.mustRun(t, "dlq", "list", "--reason", events.ReasonStoreSoldOut); strings.Contains(only, events.ReasonPoison) || !strings.Contains(only, id) {
		t.Errorf("dlq list --reason %s:\n%s", events.ReasonStoreSoldOut, only)
	}
	if none := p.mustRun(t, "dlq", "list", "--campaign", "no-such-campaign"); !strings.Contains(none, "\n0 of the ") || !strings.Contains(none, "match --campaign no-such-campaign") {
		t.Errorf("dlq list --campaign of another campaign:\n%s", none)
	}
	if stats := p.mustRun(t, "dlq", "stats"); !strings.Contains(stats, events.ReasonStoreSoldOut) || !strings.Contains(stats, events.ReasonPoison) {
		t.Errorf("dlq stats:\n%s", stats)
	}
	show := p.mustRun(t, "dlq", "show", fmt.Sprintf("%d/%d", poison.Partition, poison.Offset))
	if !strings.Contains(show, marker) || !strings.Contains(show, `"version":99`) || !strings.Contains(show, "decode ") {
		t.Errorf("dlq show of the poison event:\n%s", show)
	}
	if out, err := p.run("dlq", "show", "not-a-position"); err == nil {
		t.Errorf("dlq show of a malformed position succeeded:\n%s", out)
	}

	code, id, _ = p.buy(t, c, "grace", 1)
	if code != http.StatusAccepted {
		t.Fatalf("purchase after poison: %d", code)
	}
	// The store's stock of 1 is untouched by frank's refused order, so grace gets it.
	p.waitStatus(t, "grace", id, events.Confirmed)
	// The store's stock disagrees with Redis's on purpose; the audit must say so, and agree
	// again once it is put back.
	if out, err := p.run("audit", "--campaign", c); err == nil || !strings.Contains(out, "FAIL I1 conservation") {
		t.Errorf("audit of a campaign whose store stock was cut: err %v\n%s", err, out)
	}
	if _, err := p.store.DB().ExecContext(ctx, p.store.DB().Rebind(`UPDATE campaigns SET stock = 5 WHERE id = ?`), c); err != nil {
		t.Fatal(err)
	}
	p.conservation(t, c, 5)
}

func testCompensation(t *testing.T, p *pipeline) {
	c := p.createCampaign(t, 10, 3)
	ctx := context.Background()

	// A confirmed order is refunded by the operator, once.
	_, id, _ := p.buy(t, c, "heidi", 3)
	p.waitStatus(t, "heidi", id, events.Confirmed)
	var o map[string]any
	if err := json.Unmarshal([]byte(p.mustRun(t, "compensate", "--order", id)), &o); err != nil {
		t.Fatal(err)
	}
	if o["status"] != string(events.Refunded) {
		t.Errorf("compensate a confirmed order: %v", o)
	}
	// The command exits at once; it must still have delivered its announcement.
	if r := readTopic(t, p.brokers, p.topics.Results, id); r.Type != events.OrderRefunded {
		t.Errorf("results topic after seckill compensate: %+v", r)
	}
	code, again := p.do(t, "POST", "/v1/admin/orders/"+id+"/compensate", map[string]string{"Authorization": "Bearer " + p.admin}, nil)
	if code != http.StatusOK || again["status"] != string(events.Refunded) {
		t.Errorf("compensate twice: %d %v", code, again)
	}
	if camp := p.campaign(t, c); camp["remaining"] != 10.0 || camp["sold"] != 0.0 {
		t.Errorf("after the refund: %v", camp)
	}
	// The buyer's count came back too: heidi may buy her limit again.
	if code, _, errc := p.buy(t, c, "heidi", 3); code != http.StatusAccepted {
		t.Errorf("buy again after the refund: %d %s", code, errc)
	}

	// A reservation whose event never reached Kafka: the operator releases it.
	stuck := events.NewOrderID(c)
	if _, err := p.redis.Reserve(ctx, c, stuck, "ivan", 2, time.Hour); err != nil {
		t.Fatal(err)
	}
	code, body := p.do(t, "POST", "/v1/admin/orders/"+stuck+"/compensate", map[string]string{"Authorization": "Bearer " + p.admin}, nil)
	if code != http.StatusOK || body["status"] != string(events.Failed) || body["reason"] != events.ReasonOperator {
		t.Errorf("compensate a stuck reservation: %d %v", code, body)
	}

	// Another one past its deadline: the sweeper releases it.
	expired := events.NewOrderID(c)
	if _, err := p.redis.Reserve(ctx, c, expired, "judy", 1, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	o = p.waitStatus(t, "judy", expired, events.Failed)
	if o["reason"] != events.ReasonExpired {
		t.Errorf("swept order: %v", o)
	}
	eventually(t, 20*time.Second, "every order is final", func() bool {
		return p.order(t, "heidi", id)["status"] == string(events.Refunded)
	})
	p.waitAllFinal(t, c)
	p.conservation(t, c, 10)
}

// testCrowd races many buyers over little stock through the whole pipeline. The buyers' limits
// add up to the stock, so it sells out only once every buyer has come back past their first
// purchase: the per-user limit is raced as hard as the stock.
func testCrowd(t *testing.T, p *pipeline) {
	const stock, limit, buyers, requests = 60, 2, 30, 600
	c := p.createCampaign(t, stock, limit)
	var (
		mu       sync.Mutex
		accepted = map[string]string{} // order id -> user
		wg       sync.WaitGroup
		bad      []string
	)
	work := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				user := fmt.Sprintf("u%d", i%buyers)
				code, id, errc := p.buy(t, c, user, 1+rand.IntN(limit))
				mu.Lock()
				switch {
				case code == http.StatusAccepted:
					accepted[id] = user
				case code == http.StatusConflict && (errc == "sold_out" || errc == "limit_exceeded"):
				default:
					bad = append(bad, fmt.Sprintf("%d %s", code, errc))
				}
				mu.Unlock()
			}
		}()
	}
	for i := range requests {
		work <- i
	}
	close(work)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d unexpected answers, first %s", len(bad), bad[0])
	}
	if len(accepted) == 0 {
		t.Fatal("nobody bought anything")
	}
	for id, user := range accepted {
		p.waitStatus(t, user, id, events.Confirmed)
	}
	p.conservation(t, c, stock)
	if camp := p.campaign(t, c); camp["remaining"] != 0.0 {
		t.Errorf("%d requests for %d units left %v unsold", requests, stock, camp["remaining"])
	}
	var over int
	if err := p.store.DB().GetContext(context.Background(), &over, p.store.DB().Rebind(
		`SELECT COUNT(*) FROM (SELECT user_id FROM orders WHERE campaign_id = ? AND status = 'confirmed' GROUP BY user_id HAVING SUM(quantity) > ?) x`), c, limit); err != nil {
		t.Fatal(err)
	}
	if over > 0 {
		t.Errorf("%d buyers over the limit", over)
	}
}

// testReplay loses the order rows and gets them back from the requested topic.
func testReplay(t *testing.T, p *pipeline) {
	c := p.createCampaign(t, 40, 1)
	want := map[string]string{}
	for i := range 25 {
		user := fmt.Sprintf("r%d", i)
		code, id, errc := p.buy(t, c, user, 1)
		if code != http.StatusAccepted {
			t.Fatalf("purchase: %d %s", code, errc)
		}
		want[id] = user
	}
	for id, user := range want {
		p.waitStatus(t, user, id, events.Confirmed)
	}
	ctx := context.Background()
	db := p.store.DB()
	for _, q := range []string{`DELETE FROM orders WHERE campaign_id = ?`, `DELETE FROM purchases WHERE campaign_id = ?`, `UPDATE campaigns SET sold = 0 WHERE id = ?`} {
		if _, err := db.ExecContext(ctx, db.Rebind(q), c); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // the second replay finds everything in place and changes nothing
		// Its progress goes to stderr (TestReplayProgressOnStderr); stdout says what it read.
		out := p.mustRun(t, "replay", "--from", "start")
		if !regexp.MustCompile(`^replayed \d+ events\n$`).MatchString(out) {
			t.Errorf("replay output %q, want \"replayed N events\" alone", out)
		}
		var rows []struct {
			OrderID string `db:"order_id"`
			UserID  string `db:"user_id"`
			Status  string `db:"status"`
		}
		if err := db.SelectContext(ctx, &rows, db.Rebind(`SELECT order_id, user_id, status FROM orders WHERE campaign_id = ?`), c); err != nil {
			t.Fatal(err)
		}
		if len(rows) != len(want) {
			t.Fatalf("after replay: %d orders, want %d", len(rows), len(want))
		}
		for _, r := range rows {
			if want[r.OrderID] != r.UserID || r.Status != "confirmed" {
				t.Errorf("replayed order %+v", r)
			}
		}
		p.conservation(t, c, 40)
	}
}

// waitAllFinal waits until no reservation of the campaign is pending.
func (p *pipeline) waitAllFinal(t *testing.T, campaign string) {
	t.Helper()
	eventually(t, 20*time.Second, "no reservation is pending", func() bool {
		n, err := p.redis.Client().ZCard(context.Background(), "seckill:{c:"+campaign+"}:pending").Result()
		return err == nil && n == 0
	})
}

// readTopic returns the event about orderID on topic.
func readTopic(t *testing.T, brokers []string, topic, orderID string) events.Event {
	t.Helper()
	e, err := events.Decode(readRecord(t, brokers, topic, orderID).Value)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// readRecord returns the last record on topic about orderID, read with kcat, an independent
// client, when the broker is the real one.
func readRecord(t *testing.T, brokers []string, topic, orderID string) *kgo.Record {
	t.Helper()
	return readRecordWhere(t, brokers, topic, func(r *kgo.Record) bool {
		return strings.Contains(string(r.Value), `"order_id":"`+orderID+`"`)
	})
}

func readRecordWhere(t *testing.T, brokers []string, topic string, match func(*kgo.Record) bool) *kgo.Record {
	t.Helper()
	var found *kgo.Record
	eventually(t, 20*time.Second, "a matching record on "+topic, func() bool {
		for _, r := range consumeAll(t, brokers, topic) {
			if match(r) {
				found = r
			}
		}
		return found != nil
	})
	return found
}

// consumeAll reads the whole topic: with kcat on the real broker, with franz-go on kfake
// (kcat speaks to kfake too, but the point of kcat is a second implementation of the protocol
// against the real broker).
func consumeAll(t *testing.T, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	if kafkatest.IsReal(brokers) {
		out, err := exec.Command("kcat", "-C", "-b", strings.Join(brokers, ","), "-t", topic, "-o", "beginning", "-e", "-q", "-J").Output()
		if err != nil {
			t.Fatalf("kcat: %v (is kcat installed? make test installs it)", err)
		}
		var recs []*kgo.Record
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if line == "" {
				continue
			}
			var m struct {
				Key       string   `json:"key"`
				Payload   string   `json:"payload"`
				Headers   []string `json:"headers"`
				Partition int32    `json:"partition"`
				Offset    int64    `json:"offset"`
			}
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("kcat output %q: %v", line, err)
			}
			r := &kgo.Record{Topic: topic, Key: []byte(m.Key), Value: []byte(m.Payload), Partition: m.Partition, Offset: m.Offset}
			for i := 0; i+1 < len(m.Headers); i += 2 {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: m.Headers[i], Value: []byte(m.Headers[i+1])})
			}
			recs = append(recs, r)
		}
		return recs
	}
	// To the end offsets as they were when the read began: a read that ended at the first poll
	// to find nothing for a while took a slow fetch on a loaded machine for the end of the topic.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recs, err := events.ReadTopic(ctx, brokers, topic)
	if err != nil {
		t.Fatalf("read %s: %v", topic, err)
	}
	return recs
}
