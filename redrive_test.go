package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// testRedrive garbles the event of a pending reservation, so that the consumer and the
// compensator cannot read it and it waits in the dead-letter topic, then sends its corrected
// event back with seckill dlq redrive: bad input is refused, a dry run sends nothing, the
// redrive gets the order confirmed, a second redrive skips it, and the event sent twice more
// (as redrives racing past that check would) is still one order.
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
	good := writeEvent(t, ev)
	garbled, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	garbled = []byte(strings.Replace(string(garbled), `"version":1`, `"version":99`, 1))
	cl, err := events.NewClient(p.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: p.topics.Requested, Key: events.Key(ev), Value: garbled}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dead := readRecordWhere(t, p.brokers, p.topics.DLQ, func(r *kgo.Record) bool { return string(r.Key) == string(events.Key(ev)) })
	at := fmt.Sprintf("%d/%d", dead.Partition, dead.Offset)
	redriven := func() int { // how many events redrive has sent for this dead letter
		n := 0
		for _, r := range consumeAll(t, p.brokers, p.topics.Requested) {
			if events.Header(r, HeaderRedrivenFrom) == at && string(r.Key) == string(events.Key(ev)) {
				n++
			}
		}
		return n
	}

	// The unreadable dead letter is found by its campaign (from its key), and left alone.
	if out := p.mustRun(t, "dlq", "list", "--campaign", c); !strings.Contains(out, "unreadable: left to the sweeper") || !strings.Contains(out, "\n1 of the ") {
		t.Errorf("dlq list --campaign of the unreadable dead letter:\n%s", out)
	}
	if out := p.mustRun(t, "dlq", "redrive", "--campaign", c); !strings.Contains(out, "skip  "+at+"  still unreadable") || !strings.Contains(out, "nothing to send") {
		t.Errorf("redrive of an event still unreadable:\n%s", out)
	}

	// Bad input: a usage error or a skip that says why, and nothing sent.
	garbledFile := filepath.Join(t.TempDir(), "garbled.json")
	if err := os.WriteFile(garbledFile, garbled, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--file", good}, "name it with --at"},
		{[]string{"--at", "first"}, "PARTITION/OFFSET"},
		{[]string{"--at", "999/0"}, "no dead letter at 999/0"},
		{[]string{"--at", at, "--file", filepath.Join(t.TempDir(), "missing.json")}, "no such file"},
		{[]string{"--at", at, "--file", garbledFile}, "still not an event this seckill reads"},
	} {
		if out, err := p.run(append([]string{"dlq", "redrive"}, bad.args...)...); err == nil || !strings.Contains(out, bad.want) {
			t.Errorf("redrive %v: err %v, want a failure saying %q:\n%s", bad.args, err, bad.want, out)
		}
	}
	for _, wrong := range []struct {
		change func(*events.Event)
		want   string
	}{
		{func(e *events.Event) { e.UserID = "mallory" }, "it is another buyer's order"},
		{func(e *events.Event) { e.Quantity = 1 }, "the event is rita buying 1, reservation " + id + " is rita buying 2"},
	} {
		e := ev
		wrong.change(&e)
		if out := p.mustRun(t, "dlq", "redrive", "--at", at, "--file", writeEvent(t, e)); !strings.Contains(out, wrong.want) || !strings.Contains(out, "nothing to send") {
			t.Errorf("redrive of a correction that is not this order's: want %q:\n%s", wrong.want, out)
		}
	}

	if out := p.mustRun(t, "dlq", "redrive", "--at", at, "--file", good, "--dry-run"); !strings.Contains(out, "send  "+at+"  order "+id) || !strings.Contains(out, "nothing was sent") {
		t.Errorf("dry run:\n%s", out)
	}
	if n := redriven(); n != 0 {
		t.Fatalf("after the dry run and the refusals, %d events were sent", n)
	}
	if _, err := p.store.Order(ctx, id); events.ErrorCode(err) != events.OrderNotFound {
		t.Fatalf("after the dry run the order is in the store: %v", err)
	}

	if out := p.mustRun(t, "dlq", "redrive", "--at", at, "--file", good); !strings.Contains(out, "sent 1 to "+p.topics.Requested) {
		t.Errorf("redrive:\n%s", out)
	}
	p.waitStatus(t, "rita", id, events.Confirmed)
	if out := p.mustRun(t, "dlq", "redrive", "--at", at, "--file", good); !strings.Contains(out, "is in the store already: confirmed") || !strings.Contains(out, "nothing to send") {
		t.Errorf("the second redrive:\n%s", out)
	}
	if n := redriven(); n != 1 {
		t.Errorf("two redrives sent %d events, want 1", n)
	}

	// The same event twice more, as two redrives that both passed the store's check before the
	// consumer persisted it would send it: the consumer keys on the order id, so it is one order.
	sent := readRecordWhere(t, p.brokers, p.topics.Requested, func(r *kgo.Record) bool { return events.Header(r, HeaderRedrivenFrom) == at })
	again := func() *kgo.Record {
		return &kgo.Record{Topic: p.topics.Requested, Key: sent.Key, Value: sent.Value, Headers: sent.Headers}
	}
	if err := cl.ProduceSync(ctx, again(), again()).FirstErr(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the consumer has read the repeats", func() bool {
		lag, err := events.Lag(ctx, kadm.NewClient(cl), p.topics.Requested, p.topics.ConsumerGroup())
		return err == nil && lag == 0 && redriven() == 3
	})
	p.waitAllFinal(t, c)
	if o := p.waitStatus(t, "rita", id, events.Confirmed); o["quantity"] != 2.0 {
		t.Errorf("the order after three deliveries: %v", o)
	}
	p.conservation(t, c, 5) // store sold 2 of 5, Redis 3 remaining: nothing counted twice
}

// writeEvent writes e as an operator's corrected event file.
func writeEvent(t *testing.T, e events.Event) string {
	t.Helper()
	b, err := events.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "event.json")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// fakeAwaited is the store and Redis as planRedrive reads them.
type fakeAwaited struct {
	orders map[string]store.Order
	res    map[string]lua.Reservation
	frozen map[string]bool // campaigns being rebuilt
}

func (f fakeAwaited) Sale(_ context.Context, campaign string) (lua.Sale, error) {
	return lua.Sale{Loaded: true, Frozen: f.frozen[campaign], Remaining: 10}, nil
}

func (f fakeAwaited) Order(_ context.Context, id string) (store.Order, error) {
	if o, ok := f.orders[id]; ok {
		return o, nil
	}
	return store.Order{}, events.Errorf(events.OrderNotFound, "order %q not found", id)
}

func (f fakeAwaited) Reservation(_ context.Context, id string) (lua.Reservation, error) {
	if r, ok := f.res[id]; ok {
		return r, nil
	}
	return lua.Reservation{}, lua.ErrNoReservation
}

// TestPlanRedrive decides, dead letter by dead letter, what seckill dlq redrive sends. Among
// them is the case the pipeline test cannot make, as its compensator reads every event this
// seckill reads: a dead letter an older seckill could not read, which this one does.
func TestPlanRedrive(t *testing.T) {
	const requested = "shop.orders.requested"
	future := time.Now().Add(time.Hour)
	event := func(n int, change ...func(*events.Event)) events.Event {
		e := events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: time.Now().UTC(),
			OrderID: fmt.Sprintf("camp.order%d", n), CampaignID: "camp", UserID: "ann", Quantity: 2, Deadline: future}
		for _, c := range change {
			c(&e)
		}
		return e
	}
	letter := func(offset int64, reason string, e events.Event, value ...string) deadLetter {
		b, err := events.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if len(value) > 0 {
			b = []byte(value[0])
		}
		src := &kgo.Record{Topic: requested, Key: events.Key(e), Value: b, Offset: 40 + offset}
		return readDeadLetter(events.DeadLetter("shop.orders.dlq", src, reason))
	}
	// A dead letter that was too large for the DLQ with its value goes without it.
	withoutValue := func(l deadLetter) deadLetter { return readDeadLetter(events.WithoutValue(l.rec)) }
	// One the compensator's group has committed past, as runDLQ reads it.
	resolved := func(l deadLetter) deadLetter { l.resolved = true; return l }
	poison := events.ReasonPoison + ": event x: unknown version 2"
	pending := func(n int, qty int) lua.Reservation {
		return lua.Reservation{OrderID: fmt.Sprintf("camp.order%d", n), Campaign: "camp", User: "ann", Quantity: qty, State: "pending", Deadline: future}
	}
	src := fakeAwaited{
		orders: map[string]store.Order{"camp.order2": {OrderID: "camp.order2", Status: events.Confirmed},
			"camp.order6": {OrderID: "camp.order6", Status: events.Failed, Reason: events.ReasonStoreSoldOut}},
		res: map[string]lua.Reservation{"camp.order1": pending(1, 2), "camp.order2": pending(2, 2), "camp.order4": pending(4, 2),
			"camp.order5": {OrderID: "camp.order5", User: "ann", Quantity: 2, State: "released", Deadline: future},
			"camp.order7": pending(7, 1), "camp.order8": {OrderID: "camp.order8", User: "ann", Quantity: 2, State: "pending", Deadline: time.Now().Add(-time.Second)},
			"cold.order12": {OrderID: "cold.order12", Campaign: "cold", User: "ann", Quantity: 2, State: "pending", Deadline: future}},
		frozen: map[string]bool{"cold": true},
	}
	// An order of campaign cold, which a rebuild has frozen.
	cold := func(e *events.Event) { e.OrderID, e.CampaignID = "cold.order12", "cold" }
	cases := []struct {
		name   string
		letter deadLetter
		fix    *events.Event
		want   string // the line planRedrive prints
		sent   bool
	}{
		{"poison that reads now, its reservation pending", letter(1, poison, event(1)), nil, "send  0/", true},
		{"poison whose order the store has", letter(2, poison, event(2)), nil, "is in the store already: confirmed", false},
		{"poison still unreadable", letter(3, poison, event(3), `{"version":2}`), nil, "still unreadable", false},
		{"unreadable, corrected", letter(4, poison, event(4), `{"version":2}`), ptr(event(4)), "send  0/", true},
		{"corrected for another buyer", letter(4, poison, event(4), `{"version":2}`), ptr(event(4, func(e *events.Event) { e.UserID = "bob" })), "another buyer's order", false},
		{"a reservation released", letter(5, poison, event(5)), nil, "reservation camp.order5 is released", false},
		{"no reservation", letter(9, poison, event(9)), nil, "Redis holds no reservation camp.order9", false},
		{"handled by the compensator", letter(6, events.ReasonStoreSoldOut, event(6)), nil, "the compensator handled it (" + events.ReasonStoreSoldOut + "): order failed", false},
		{"not poison, not handled yet", letter(10, events.ReasonStoreSoldOut, event(10)), nil, "not poison (" + events.ReasonStoreSoldOut + "): left to the compensator: order not in the store yet", false},
		{"not poison, left out by the compensator", resolved(letter(11, events.ReasonStoreSoldOut, event(11))), nil, "the compensator handled it (" + events.ReasonStoreSoldOut + "): order not in the store: the compensator left it out", false},
		{"another quantity than reserved", letter(7, poison, event(7)), nil, "the event is ann buying 2, reservation camp.order7 is ann buying 1", false},
		{"past its deadline", letter(8, poison, event(8)), nil, "past its deadline", false},
		{"poison without its value", withoutValue(letter(1, poison, event(1))), nil, "was too large for the dead-letter topic and left out; the original is at " + requested + "/0/41", false},
		{"poison without its value, corrected", withoutValue(letter(1, poison, event(1))), ptr(event(1)), "send  0/", true},
		{"not an OrderRequested", letter(1, poison, event(1, func(e *events.Event) { e.Type = events.OrderConfirmed })), nil, "only OrderRequested events", false},
		{"corrected as another order of the buyer", letter(1, poison, event(1)), ptr(event(4)), "the corrected event is order camp.order4, the dead letter's camp.order1", false},
		{"its campaign frozen for a rebuild", letter(12, poison, event(12, cold)), nil, "campaign cold is being rebuilt", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			send, skipped, err := planRedrive(context.Background(), src, requested, []deadLetter{tc.letter}, tc.fix, &out)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tc.want) || (len(send) == 1) != tc.sent || skipped+len(send) != 1 {
				t.Fatalf("sent %d, skipped %d, want sent %v and a line saying %q:\n%s", len(send), skipped, tc.sent, tc.want, out.String())
			}
			if tc.sent {
				e, err := events.Decode(send[0].Value)
				if err != nil || send[0].Topic != requested || e.OrderID != tc.letter.orderID && tc.fix == nil ||
					events.Header(send[0], HeaderRedrivenFrom) != positionOf(tc.letter.rec).String() {
					t.Errorf("sent %+v (%v): want the event on %s, marked with its dead letter", send[0], err, requested)
				}
			}
		})
	}

	// Many at once: only the poison ones are considered, the others counted.
	var out strings.Builder
	all := []deadLetter{cases[0].letter, cases[1].letter, cases[7].letter}
	send, skipped, err := planRedrive(context.Background(), src, requested, all, nil, &out)
	if err != nil || len(send) != 1 || skipped != 1 || !strings.Contains(out.String(), "1 dead letters that are not poison are left to the compensator") {
		t.Errorf("three dead letters: sent %d, skipped %d, err %v:\n%s", len(send), skipped, err, out.String())
	}
}

// TestPlanRedriveSendsAnOrderOnce: a poison event is dead-lettered again when its batch is
// redelivered (the consumer stopped between the dead letter and its offset commit) and when a
// replay reads it. Its order is sent once, and the plan says why the other letters are not, so
// that "sent" counts the orders sent.
func TestPlanRedriveSendsAnOrderOnce(t *testing.T) {
	const requested = "shop.orders.requested"
	e := events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: time.Now().UTC(),
		OrderID: "camp.order1", CampaignID: "camp", UserID: "ann", Quantity: 1, Deadline: time.Now().Add(time.Hour)}
	b, err := events.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	var letters []deadLetter
	for offset := range int64(3) {
		l := events.DeadLetter("shop.orders.dlq", &kgo.Record{Topic: requested, Key: events.Key(e), Value: b, Offset: 40}, events.ReasonPoison+": event x: unknown version 2")
		l.Offset = offset
		letters = append(letters, readDeadLetter(l))
	}
	src := fakeAwaited{res: map[string]lua.Reservation{e.OrderID: {OrderID: e.OrderID, Campaign: "camp", User: "ann", Quantity: 1,
		State: lua.StatePending, Deadline: e.Deadline}}}
	var out strings.Builder
	send, skipped, err := planRedrive(context.Background(), src, requested, letters, nil, &out)
	if err != nil || len(send) != 1 || skipped != 2 || strings.Count(out.String(), "is sent from 0/0 already") != 2 {
		t.Errorf("three dead letters of one order: sent %d, skipped %d, err %v; want it sent once and two skipped, saying so:\n%s", len(send), skipped, err, out.String())
	}
}

func ptr[T any](v T) *T { return &v }
