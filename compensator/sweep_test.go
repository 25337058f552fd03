package compensator_test

import (
	"context"
	"log/slog"
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
	if _, _, err := e.st.RefundOrder(e.ctx, refunded[0].OrderID); err != nil { // and Redis never heard of it
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

// countingSweeper counts the sweeper's Redis calls per campaign.
type countingSweeper struct {
	compensator.Sweeper
	calls map[string]int
}

func (s *countingSweeper) Expired(ctx context.Context, campaign string, skip, limit int) ([]string, error) {
	s.calls[campaign]++
	return s.Sweeper.Expired(ctx, campaign, skip, limit)
}

func (s *countingSweeper) Trim(ctx context.Context, campaign string, retention time.Duration, limit int) (int, error) {
	s.calls[campaign]++
	return s.Sweeper.Trim(ctx, campaign, retention, limit)
}

func (s *countingSweeper) Drop(ctx context.Context, campaign string, version int64) (bool, error) {
	s.calls[campaign]++
	return s.Sweeper.Drop(ctx, campaign, version)
}

func (s *countingSweeper) Sync(ctx context.Context, c lua.Campaign) (lua.Synced, error) {
	s.calls[c.ID]++
	return s.Sweeper.Sync(ctx, c)
}

// TestSweepLeavesRetiredCampaignsAlone: once a campaign's keys have left Redis (it ended more
// than the retention ago, nothing pending), a sweep spends no Redis call on it. Each sweep
// asked Redis for the overdue reservations of every campaign ever created, so its work grew
// with the history. A retired campaign an operator reopens is swept again, and its keys leave
// Redis again when it retires again, even when no sweep ran while it was on sale: this
// process remembered it as dropped, by id alone.
func TestSweepLeavesRetiredCampaignsAlone(t *testing.T) {
	e := newEnv(t, 10, 5)
	old := storetest.Name("old")
	now := time.Now()
	if err := e.st.CreateCampaign(e.ctx, store.Campaign{ID: old, Name: "old", Stock: 5, PerUserLimit: 1,
		StartsAtMs: now.Add(-2 * time.Hour).UnixMilli(), EndsAtMs: now.Add(-time.Hour).UnixMilli(), CreatedAtMs: now.UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.LoadCampaign(e.ctx, lua.Campaign{ID: old, Remaining: 5, Limit: 1, StartsAt: now.Add(-2 * time.Hour), EndsAt: now.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	c := e.compensator(t, compensator.Config{Retention: 10 * time.Millisecond})
	counted := &countingSweeper{Sweeper: e.r, calls: map[string]int{}}
	compensator.SetSweeper(c, counted)
	sweep := func() {
		t.Helper()
		if _, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil {
			t.Fatal(err)
		}
	}
	sweep() // drops its keys
	if n := e.r.Client().Exists(e.ctx, lua.KeysOf(old).All()...).Val(); n != 0 {
		t.Fatalf("%d keys of the retired campaign still in redis", n)
	}
	clear(counted.calls)
	sweep()
	if n := counted.calls[old]; n != 0 {
		t.Errorf("a sweep made %d redis calls for a campaign whose keys are gone, want 0", n)
	}

	// An operator reopens it for a moment, and a rebuild puts it back in Redis.
	ends := time.Now().Add(200 * time.Millisecond) // room for a slow machine: Extend refuses an end past
	if _, err := e.operator().Extend(e.ctx, old, ends); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.LoadCampaign(e.ctx, lua.Campaign{ID: old, Remaining: 5, Limit: 1, StartsAt: now.Add(-2 * time.Hour), EndsAt: ends}); err != nil {
		t.Fatal(err)
	}
	// No sweep runs while it is on sale again: the next finds it retired once more, and must
	// not take it for the campaign whose keys it dropped before.
	time.Sleep(time.Until(ends.Add(20 * time.Millisecond))) // ended again, and past the retention
	sweep()
	if n := e.r.Client().Exists(e.ctx, lua.KeysOf(old).All()...).Val(); n != 0 {
		t.Errorf("%d keys of the campaign retired again still in redis", n)
	}
}

// leaseLog tells when the compensator starts sweeping as the lease holder, and hands on its
// "sweeper lease ended" records.
type leaseLog struct {
	sweeping chan struct{}
	ended    chan slog.Record
}

func (h leaseLog) Enabled(context.Context, slog.Level) bool { return true }
func (h leaseLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h leaseLog) WithGroup(string) slog.Handler            { return h }

func (h leaseLog) Handle(_ context.Context, r slog.Record) error {
	switch r.Message {
	case "sweeping as lease holder":
		select {
		case h.sweeping <- struct{}{}:
		default:
		}
	case "sweeper lease ended":
		select {
		case h.ended <- r:
		default:
		}
	}
	return nil
}

// TestSweeperLeaseEndedSaysWhy: a holder whose lease is gone at its renewal (it ran out during a
// pause, Redis lost it) stops sweeping and warns that its lease ended; the warning said err=<nil>,
// as the watchdog's reason was dropped on the way, and the person on call could not tell a lost
// lease from a clean hand-over.
func TestSweeperLeaseEndedSaysWhy(t *testing.T) {
	e := newEnv(t, 10, 5)
	log := leaseLog{sweeping: make(chan struct{}, 1), ended: make(chan slog.Record, 1)}
	c := e.compensator(t, compensator.Config{SweepInterval: 2 * time.Second, Logger: slog.New(log)})
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	lock := "seckill:{lock:" + e.topics.Prefix + ".sweeper}"
	select {
	case <-log.sweeping:
	case <-time.After(time.Minute): // not a measurement: a hang guard
		t.Fatal("the compensator never swept as the lease holder")
	}
	if err := e.r.Client().Del(e.ctx, lock).Err(); err != nil { // the lease is gone
		t.Fatal(err)
	}
	select {
	case r := <-log.ended:
		var why string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "err" {
				why = a.Value.String()
			}
			return true
		})
		if !strings.Contains(why, "lease lost") {
			t.Errorf("sweeper lease ended, err=%s; want why: the lease was lost", why)
		}
	case <-time.After(time.Minute): // not a measurement: the renewal comes within a lease
		t.Fatal("no warning that the sweeper's lease ended")
	}
}

// TestSweepConfirmsWhatTheConsumerStored: the consumer stores an order, then confirms its
// reservation in Redis in a second step that may fail (not fatal: the sweeper confirms it). At
// the deadline the sweeper finds the reservation pending and the store's row confirmed: the
// consumer won, and the units are the order's for good. Released instead, they would go back on
// sale while the store holds them: sold twice. TestResolversRace reaches this case only when a
// Fail lands between the consumer's two steps, which it seldom does.
func TestSweepConfirmsWhatTheConsumerStored(t *testing.T) {
	e := newEnv(t, 10, 3)
	evs := e.reserve(t, 2, time.Millisecond)
	if _, err := e.st.ConfirmOrders(e.ctx, evs[:1]); err != nil { // the consumer's store step only
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // past their deadlines
	if _, err := e.compensator(t, compensator.Config{}).SweepOnce(e.ctx, store.Fence{}); err != nil {
		t.Fatal(err)
	}
	if states := e.check(t, evs); states[events.Confirmed] != 1 || states[events.Failed] != 1 {
		t.Errorf("after the sweep: %v; want the stored order confirmed, the other failed", states)
	}
	if rep, out := e.audit(t); !rep.OK() {
		t.Errorf("audit after the sweep:\n%s", out)
	}
}

// TestSweepExpiresUnpaidOrders: an order not paid within its campaign's window expires at the
// first sweep past its pay_by, its units back on sale (I6); one paid in time stays paid. Beside
// this, only the fault test TestPaymentWindowSale sweeps past a pay_by.
func TestSweepExpiresUnpaidOrders(t *testing.T) {
	e := newEnvPaying(t, 10, 3, time.Second)
	c := e.compensator(t, compensator.Config{})
	evs := e.reserve(t, 2, time.Hour)
	e.confirm(t, evs)
	if _, err := c.Pay(e.ctx, evs[0].OrderID, "pay-"+evs[0].OrderID); err != nil {
		t.Fatal(err)
	}
	unpaid, err := e.st.Order(e.ctx, evs[1].OrderID)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(time.UnixMilli(unpaid.PayByMs + 10)))
	if _, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []events.Status{events.Paid, events.Expired} {
		if o, err := e.st.Order(e.ctx, evs[i].OrderID); err != nil || o.Status != want {
			t.Errorf("order %d after the sweep past its pay_by: %s %v, want %s", i, o.Status, err, want)
		}
	}
	if left, _, err := e.r.Remaining(e.ctx, e.campaign); err != nil || left != e.stock-int64(evs[0].Quantity) {
		t.Errorf("remaining %d (%v), want the stock but the paid order's %d units", left, err, evs[0].Quantity)
	}
	if rep, out := e.audit(t); !rep.OK() {
		t.Errorf("audit after the sweep:\n%s", out)
	}
}
