package compensator_test

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
)

// TestSweepAnnouncesALostPayment: a payment is stored, then announced; Kafka refused the
// OrderPaid (or the api died in between), and unless the payment service paid again the results
// topic never said the order was paid: its buyer's stream waited at confirmed, and a replay
// after a store restore could not record the payment, so the sweeper expired a paid order. The
// sweep announces it, with its payment id and the time the store took it, once the payment's
// own call has had its time to; exactly once, then it is marked. A payment announced by its
// own call is not announced again.
func TestSweepAnnouncesALostPayment(t *testing.T) {
	e := newEnvPaying(t, 10, 3, time.Hour)
	evs := e.reserve(t, 2, time.Hour)
	e.confirm(t, evs)
	lost, kept := evs[0].OrderID, evs[1].OrderID
	c := e.compensator(t, compensator.Config{})
	c.Producer = refusingProducer{}
	if o, err := c.Pay(e.ctx, lost, "pay-lost"); events.ErrorCode(err) != events.Unavailable || o.Status != events.Paid {
		t.Fatalf("pay while Kafka refuses the announcement: %+v %v; want the order paid and unavailable", o, err)
	}
	first := &recordingProducer{}
	c.Producer = first
	if o, err := c.Pay(e.ctx, kept, "pay-kept"); err != nil || o.Status != events.Paid {
		t.Fatalf("pay: %+v %v", o, err)
	}
	// Right after the payment its own call may still be announcing it: the sweep leaves it.
	if _, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil {
		t.Fatal(err)
	}
	if n := first.announced(events.OrderPaid, lost); n != 0 {
		t.Errorf("a sweep right after the payment announced it %d times; want it left to the payment's call", n)
	}
	// As if paid a minute ago.
	paidAt := time.UnixMilli(time.Now().Add(-time.Minute).UnixMilli())
	for _, id := range []string{lost, kept} {
		e.sql(t, `UPDATE orders SET updated_at_ms = ? WHERE order_id = ?`, paidAt.UnixMilli(), id)
	}
	kafka := &recordingProducer{}
	c.Producer = kafka
	for i := range 2 {
		if _, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil {
			t.Fatalf("sweep %d: %v", i+1, err)
		}
	}
	got := kafka.announcements(events.OrderPaid, lost)
	if len(got) != 1 {
		t.Fatalf("two sweeps announced the lost payment's OrderPaid %d times, want once: %+v", len(got), got)
	}
	if got[0].PaymentID != "pay-lost" || got[0].OccurredAt.UnixMilli() != paidAt.UnixMilli() || got[0].CampaignID != e.campaign {
		t.Errorf("the sweep announced %+v; want payment id pay-lost at %s, of campaign %s", got[0], paidAt.UTC(), e.campaign)
	}
	if n := kafka.announced(events.OrderPaid, kept); n != 0 {
		t.Errorf("the sweeps announced the payment its own call announced %d times more, want 0", n)
	}
	// Another sweeper, which starts its lists at the top, finds nothing left to announce.
	other := e.compensator(t, compensator.Config{})
	after := &recordingProducer{}
	other.Producer = after
	if _, err := other.SweepOnce(e.ctx, store.Fence{}); err != nil {
		t.Fatal(err)
	}
	if n := after.announced(events.OrderPaid, lost) + after.announced(events.OrderPaid, kept); n != 0 {
		t.Errorf("a sweep after the payments were announced announced %d more", n)
	}
}

// TestSweepLeavesPaymentsWhileKafkaIsDown: a sweep whose announcement Kafka refused takes no
// payment to announce after it, as it takes no refund or expiry: each would wait for Kafka in
// turn. The next sweep, Kafka back, announces it.
func TestSweepLeavesPaymentsWhileKafkaIsDown(t *testing.T) {
	e := newEnvPaying(t, 10, 3, time.Hour)
	evs := e.reserve(t, 2, time.Hour)
	e.confirm(t, evs)
	expiring, paid := evs[0].OrderID, evs[1].OrderID
	// Expired in the store, and Redis and Kafka never heard of it.
	if _, err := e.st.ExpireOrder(e.ctx, expiring, time.Now().Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	c := e.compensator(t, compensator.Config{})
	c.Producer = refusingProducer{}
	if _, err := c.Pay(e.ctx, paid, "pay-1"); events.ErrorCode(err) != events.Unavailable {
		t.Fatalf("pay while Kafka refuses: %v, want unavailable", err)
	}
	e.sql(t, `UPDATE orders SET updated_at_ms = ? WHERE order_id = ?`, time.Now().Add(-time.Minute).UnixMilli(), paid)
	down := &recordingProducer{refuse: errors.New("kafka refused the record")}
	c.Producer = down
	if _, err := c.SweepOnce(e.ctx, store.Fence{}); events.ErrorCode(err) != events.Unavailable {
		t.Errorf("sweep while Kafka refuses: %v; want unavailable", err)
	}
	if n := down.announced(events.OrderExpired, expiring); n != 1 {
		t.Errorf("the sweep while Kafka refuses tried the expiry %d times, want 1", n)
	}
	if n := down.announced(events.OrderPaid, paid); n != 0 {
		t.Errorf("the sweep while Kafka refuses tried the payment %d times after a refusal, want 0", n)
	}
	up := &recordingProducer{}
	c.Producer = up
	if _, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil {
		t.Fatal(err)
	}
	if got := up.announcements(events.OrderPaid, paid); len(got) != 1 || got[0].PaymentID != "pay-1" {
		t.Errorf("the sweep after Kafka came back announced %+v; want one OrderPaid with pay-1", got)
	}
}
