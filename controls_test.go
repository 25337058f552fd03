package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store/storetest"
)

// The operator's campaign controls through the whole pipeline: the commands and the admin
// endpoints, with the consumer and the compensator running.

// control calls an admin endpoint and wants 200.
func (p *pipeline) control(t *testing.T, path string, body any) map[string]any {
	t.Helper()
	code, out := p.do(t, "POST", path, map[string]string{"Authorization": "Bearer " + p.admin}, body)
	if code != http.StatusOK {
		t.Fatalf("POST %s: %d %v", path, code, out)
	}
	return out
}

// runJSON runs a command that prints JSON and decodes it.
func (p *pipeline) runJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	out := p.mustRun(t, args...)
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("seckill %v printed no JSON: %v\n%s", args, err, out)
	}
	return m
}

// testAddStockDuringCrowd adds stock twice while 32 buyers at a time race for it, once by
// the command and once by the endpoint: every unit sells once, the added ones too.
func testAddStockDuringCrowd(t *testing.T, p *pipeline) {
	const stock, added, requests = 40, 30, 900
	c := p.createCampaign(t, stock, 1)
	var (
		mu       sync.Mutex
		accepted = map[string]string{}
		bad      []string
		wg       sync.WaitGroup
	)
	work := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range work {
				user := fmt.Sprintf("b%d", i)
				code, id, errc := p.buy(t, c, user, 1)
				mu.Lock()
				switch {
				case code == http.StatusAccepted:
					accepted[id] = user
				case code != http.StatusConflict || errc != "sold_out":
					bad = append(bad, fmt.Sprintf("%d %s", code, errc))
				}
				mu.Unlock()
			}
		})
	}
	for i := range requests {
		switch i {
		case 300:
			p.runJSON(t, "campaign", "add-stock", "--id", c, "--add", fmt.Sprint(added))
		case 600:
			p.control(t, "/v1/admin/campaigns/"+c+"/stock", map[string]any{"add": added})
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d unexpected answers, first %s", len(bad), bad[0])
	}
	const total = stock + 2*added
	if len(accepted) != total {
		t.Errorf("%d units sold of %d (stock %d, twice %d added)", len(accepted), total, stock, added)
	}
	for id, user := range accepted {
		p.waitStatus(t, user, id, events.Confirmed)
	}
	p.conservation(t, c, total)
}

// testCancelCampaign cancels a campaign with orders in every state: confirmed, paid, refunded,
// failed by the operator, and pending reservations whose events never reached Kafka. Every
// unit comes back, the audit holds, and the cancel again changes nothing.
func testCancelCampaign(t *testing.T, p *pipeline) {
	c := storetest.Name("cancel")
	code, body := p.do(t, "POST", "/v1/campaigns", map[string]string{"Authorization": "Bearer " + p.admin},
		map[string]any{"id": c, "name": "To cancel", "stock": 30, "per_user_limit": 3, "payment_window_seconds": 3600})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, body)
	}
	var confirmed []string
	for i := range 6 {
		_, id, errc := p.buy(t, c, fmt.Sprintf("c%d", i), 2)
		if id == "" {
			t.Fatalf("buy: %s", errc)
		}
		p.waitStatus(t, fmt.Sprintf("c%d", i), id, events.Confirmed)
		confirmed = append(confirmed, id)
	}
	if paid := p.control(t, "/v1/admin/orders/"+confirmed[0]+"/payment", map[string]any{"payment_id": "pay-1"}); paid["status"] != "paid" {
		t.Fatalf("pay: %v", paid)
	}
	p.control(t, "/v1/admin/orders/"+confirmed[1]+"/compensate", nil) // refunded
	ctx := context.Background()
	var stuck []string
	for i := range 4 {
		id := events.NewOrderID(c)
		if _, err := p.redis.Reserve(ctx, c, id, fmt.Sprintf("s%d", i), 1, time.Hour); err != nil {
			t.Fatal(err)
		}
		stuck = append(stuck, id)
	}
	p.control(t, "/v1/admin/orders/"+stuck[0]+"/compensate", nil) // failed

	res := p.runJSON(t, "campaign", "cancel", "--id", c)
	camp, _ := res["campaign"].(map[string]any)
	if res["released"] != 3.0 || res["refunded"] != 5.0 || camp["state"] != "cancelled" || camp["remaining"] != 30.0 || camp["sold"] != 0.0 {
		t.Errorf("seckill campaign cancel: %v, want 3 released, 5 refunded (one paid), all 30 back", res)
	}
	for _, id := range append(confirmed, stuck...) {
		code, o := p.do(t, "GET", "/v1/admin/orders/"+id, map[string]string{"Authorization": "Bearer " + p.admin}, nil)
		if code != http.StatusOK || (o["status"] != "refunded" && o["status"] != "failed") {
			t.Errorf("order %s after the cancel: %d %v", id, code, o)
		}
	}
	again := p.control(t, "/v1/admin/campaigns/"+c+"/cancel", nil)
	if again["released"] != 0.0 || again["refunded"] != 0.0 {
		t.Errorf("the second cancel did something: %v", again)
	}
	if code, _, errc := p.buy(t, c, "late", 1); code != http.StatusConflict || errc != "ended" {
		t.Errorf("a purchase after the cancel: %d %s", code, errc)
	}
	p.waitAllFinal(t, c)
	p.conservation(t, c, 30)
	vs, err := p.store.AuditVerdicts(ctx)
	if err != nil || !vs[c].OK {
		t.Errorf("the audit's verdict is not recorded clean: %+v %v", vs[c], err)
	}
}

// testBulkCompensation releases a campaign's pending reservations, then refunds its confirmed
// orders, by the command, each twice; and closes and extends it.
func testBulkCompensation(t *testing.T, p *pipeline) {
	c := p.createCampaign(t, 20, 2)
	for i := range 4 {
		_, id, _ := p.buy(t, c, fmt.Sprintf("k%d", i), 2)
		p.waitStatus(t, fmt.Sprintf("k%d", i), id, events.Confirmed)
	}
	for i := range 3 {
		if _, err := p.redis.Reserve(context.Background(), c, events.NewOrderID(c), fmt.Sprintf("p%d", i), 1, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args               []string
		released, refunded float64
	}{
		{[]string{"--status", "pending"}, 3, 0},
		{[]string{"--status", "pending"}, 0, 0},
		{nil, 0, 4},
		{nil, 0, 0},
	} {
		got := p.runJSON(t, append([]string{"compensate", "--campaign", c}, tc.args...)...)
		if got["released"] != tc.released || got["refunded"] != tc.refunded {
			t.Errorf("compensate --campaign %v: %v, want %v released, %v refunded", tc.args, got, tc.released, tc.refunded)
		}
	}
	p.waitAllFinal(t, c)
	p.conservation(t, c, 20)

	if closed := p.runJSON(t, "campaign", "close", "--id", c); closed["state"] != "ended" {
		t.Errorf("closed: %v", closed)
	}
	if code, _, errc := p.buy(t, c, "after-close", 1); code != http.StatusConflict || errc != "ended" {
		t.Errorf("a purchase after the close: %d %s", code, errc)
	}
	if open := p.runJSON(t, "campaign", "extend", "--id", c, "--ends-at", "+1h"); open["state"] != "on_sale" {
		t.Errorf("extended: %v", open)
	}
	if code, _, errc := p.buy(t, c, "after-extend", 1); code != http.StatusAccepted {
		t.Errorf("a purchase after the extend: %d %s", code, errc)
	}
	if out, err := p.run("campaign", "extend", "--id", c, "--ends-at", "yesterday"); err == nil {
		t.Errorf("a bad --ends-at was taken: %s", out)
	}
	if out, err := p.run("campaign", "close", "--id", "no-such-campaign"); err == nil {
		t.Errorf("closing a campaign that does not exist succeeded: %s", out)
	}
}

// testRedrive garbles the event of a pending reservation, so that it lands in the dead-letter
// topic unread, then sends its corrected event back with seckill dlq redrive: a dry run sends
// nothing, the redrive gets the order confirmed, and a second redrive skips it.
func testRedrive(t *testing.T, p *pipeline) {
	c := p.createCampaign(t, 5, 2)
	ctx := context.Background()
	id := events.NewOrderID(c)
	res, err := p.redis.Reserve(ctx, c, id, "rita", 2, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ev := events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: time.Now().UTC(),
		OrderID: id, CampaignID: c, UserID: "rita", Quantity: 2, Deadline: res.Deadline}
	good, err := events.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	garbled := strings.Replace(string(good), `"version":1`, `"version":99`, 1)
	cl, err := events.NewClient(p.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: p.topics.Requested, Key: []byte(id), Value: []byte(garbled)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dead := readRecordWhere(t, p.brokers, p.topics.DLQ, func(r *kgo.Record) bool { return string(r.Key) == id })
	at := fmt.Sprintf("%d/%d", dead.Partition, dead.Offset)

	if out := p.mustRun(t, "dlq", "redrive"); !strings.Contains(out, "skip  "+at+"  still unreadable") || !strings.Contains(out, "nothing to send") {
		t.Errorf("redrive of an event still unreadable:\n%s", out)
	}
	fixed := filepath.Join(t.TempDir(), "fixed.json")
	if err := os.WriteFile(fixed, good, 0o644); err != nil {
		t.Fatal(err)
	}
	if out := p.mustRun(t, "dlq", "redrive", "--at", at, "--file", fixed, "--dry-run"); !strings.Contains(out, "send  "+at+"  order "+id) || !strings.Contains(out, "nothing was sent") {
		t.Errorf("dry run:\n%s", out)
	}
	if out, err := p.run("dlq", "redrive", "--at", at, "--file", filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Errorf("a redrive with a file that is not there succeeded:\n%s", out)
	}
	if _, err := p.store.Order(ctx, id); events.ErrorCode(err) != events.OrderNotFound {
		t.Fatalf("after the dry run the order is in the store: %v", err)
	}
	if out := p.mustRun(t, "dlq", "redrive", "--at", at, "--file", fixed); !strings.Contains(out, "sent 1 to "+p.topics.Requested) {
		t.Errorf("redrive:\n%s", out)
	}
	p.waitStatus(t, "rita", id, events.Confirmed)
	if out := p.mustRun(t, "dlq", "redrive", "--at", at, "--file", fixed); !strings.Contains(out, "is in the store already: confirmed") || !strings.Contains(out, "nothing to send") {
		t.Errorf("the second redrive:\n%s", out)
	}
	p.waitAllFinal(t, c)
	p.conservation(t, c, 5)
}
