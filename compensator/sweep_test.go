package compensator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestSweepGetsPastAFailingOrder: an order the sweeper cannot resolve (here a record Redis holds
// and cannot parse, in the oldest campaign) is reported and stays counted as overdue, while the
// overdue reservations and the unfinished refunds of every other campaign are still resolved.
// The first failure used to end the sweep, so everything after it waited, sweep after sweep.
func TestSweepGetsPastAFailingOrder(t *testing.T) {
	e := newEnv(t, 20, 10) // room for u0 to buy twice
	first := storetest.Name("first")
	now := time.Now()
	if err := e.st.CreateCampaign(e.ctx, store.Campaign{ID: first, Name: "first", Stock: 5, PerUserLimit: 1,
		StartsAtMs: now.Add(-2 * time.Hour).UnixMilli(), CreatedAtMs: now.Add(-time.Hour).UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	bad := events.NewOrderID(first)
	k := lua.KeysOf(first)
	if err := e.r.Client().HSet(e.ctx, k.Res, bad, "pending|many|0|u").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Client().ZAdd(e.ctx, k.Pending, redis.Z{Score: 0, Member: bad}).Err(); err != nil {
		t.Fatal(err)
	}
	refunded := e.reserve(t, 1, time.Hour)
	e.confirm(t, refunded)
	if _, err := e.st.RefundOrder(e.ctx, refunded[0].OrderID); err != nil { // and Redis never heard of it
		t.Fatal(err)
	}
	overdue := e.reserve(t, 2, time.Millisecond)
	time.Sleep(5 * time.Millisecond) // past their deadlines
	c := e.compensator(t, compensator.Config{})
	for sweep, wantOverdue := range []float64{3, 1} {
		if _, err := c.SweepOnce(e.ctx, store.Fence{}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("sweep %d: %v, want the error of order %s", sweep, err, bad)
		}
		if v := gauge(t, "seckill_reservations_overdue"); v != wantOverdue {
			t.Errorf("sweep %d: seckill_reservations_overdue = %v, want %v", sweep, v, wantOverdue)
		}
	}
	if states := e.check(t, append(overdue, refunded...)); states[events.Failed] != 2 || states[events.Refunded] != 1 {
		t.Errorf("after the sweeps: %v; want the 2 overdue failed and the refund finished", states)
	}
}

// TestSweepWhileKafkaIsDown: the announcements of what a sweep resolved wait in the Kafka
// client while Kafka is down, and the client buffers a bounded number of records (franz-go's
// MaxBufferedRecords, 10,000 by default; 2 here). Past it, a Produce blocks until there is room,
// and the announcement's context must outlive the sweep, so the sweep stopped there for as long
// as Kafka was down: holding its lease, giving no units back, deaf to its own end. It must
// resolve every overdue reservation, and let the announcements it cannot keep go, logged.
func TestSweepWhileKafkaIsDown(t *testing.T) {
	e := newEnv(t, 100, 10)
	c := e.compensator(t, compensator.Config{})
	down, err := events.NewClient([]string{"127.0.0.1:1"}, kgo.MaxBufferedRecords(2))
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	c.Producer = down
	evs := e.reserve(t, 5, time.Millisecond)
	time.Sleep(5 * time.Millisecond) // past their deadlines
	done := make(chan error, 1)
	go func() {
		_, err := c.SweepOnce(e.ctx, store.Fence{})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // not a measurement: the sweep never returns
		t.Fatal("the sweep is stuck announcing an outcome to a Kafka that is down")
	}
	if states := e.check(t, evs); states[events.Failed] != len(evs) {
		t.Errorf("after the sweep: %v; want all %d failed", states, len(evs))
	}
}
