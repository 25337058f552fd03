package compensator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

func (e *env) operator() *compensator.Operator {
	return &compensator.Operator{
		Resolver:  &compensator.Resolver{Store: e.st, Redis: e.r, Producer: nopProducer{}, Results: e.topics.Results},
		Campaigns: e.st,
		Sales:     e.r,
	}
}

// confirm persists evs as the consumer does.
func (e *env) confirm(t testing.TB, evs []events.Event) {
	t.Helper()
	if _, err := e.st.ConfirmOrders(e.ctx, evs); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if _, err := e.r.Confirm(e.ctx, ev.OrderID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCancelCampaign cancels a campaign with orders in every state while the consumer goes on
// confirming: every unit comes back once, nothing can be bought after, and a second cancel
// changes nothing.
func TestCancelCampaign(t *testing.T) {
	e := newEnv(t, 500, 10)
	op := e.operator()
	evs := e.reserve(t, 150, time.Hour)
	e.confirm(t, evs[:60])
	for _, ev := range evs[40:60] {
		if _, err := op.Compensate(e.ctx, ev.OrderID); err != nil { // refunded
			t.Fatal(err)
		}
	}
	for _, ev := range evs[60:80] {
		if _, err := op.Fail(e.ctx, ev, events.ReasonStoreSoldOut, "dlq"); err != nil { // released
			t.Fatal(err)
		}
	}
	// 80..150 are pending; the consumer reaches half of them while the cancel runs.
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, ev := range evs[80:115] {
			out, err := e.st.ConfirmOrders(e.ctx, []events.Event{ev})
			if err == nil && out[0].Status == events.Confirmed {
				_, err = e.r.Confirm(e.ctx, ev.OrderID)
			}
			if err != nil {
				t.Error(err)
			}
		}
	})
	var calls atomic.Int64
	c, tally, err := op.Cancel(e.ctx, e.campaign, func(done, total int) {
		calls.Add(1)
		if done > total {
			t.Errorf("progress %d of %d", done, total)
		}
	})
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cancel: %+v, %d progress calls", tally, calls.Load())
	if c.CancelledAtMs == 0 || c.EndsAtMs > time.Now().UnixMilli() || c.Sold != 0 {
		t.Errorf("cancelled campaign %+v is not closed, or still counts units sold", c)
	}
	// The consumer may confirm a reservation the cancel had listed as pending: it is refunded,
	// not lost. What the race left confirmed is refunded now by a second pass; the first
	// one's tally covers every order it found.
	if _, err := op.CompensateCampaign(e.ctx, e.campaign, true, true, nil); err != nil {
		t.Fatal(err)
	}
	states := e.check(t, evs)
	if states[events.Confirmed] != 0 || states[events.Failed]+states[events.Refunded] != len(evs) {
		t.Errorf("after the cancel: %v, want every order failed or refunded", states)
	}
	if tally.Refunded < 40 || tally.Released < 1 {
		t.Errorf("tally %+v: want at least the 40 confirmed refunded and some pending released", tally)
	}
	if _, err := e.r.Reserve(e.ctx, e.campaign, events.NewOrderID(e.campaign), "late", 1, time.Minute); events.ErrorCode(err) != events.Ended {
		t.Errorf("a purchase after the cancel: %v, want ended", err)
	}

	again, tally2, err := op.Cancel(e.ctx, e.campaign, nil)
	if err != nil || tally2 != (compensator.Tally{}) || again.Version != c.Version {
		t.Errorf("second cancel: %+v, version %d (first %d), %v; want nothing done", tally2, again.Version, c.Version, err)
	}
	if _, err := op.AddStock(e.ctx, e.campaign, 5); events.ErrorCode(err) != events.CampaignCancelled {
		t.Errorf("add stock to a cancelled campaign: %v", err)
	}
	if _, err := op.Extend(e.ctx, e.campaign, time.Now().Add(time.Hour)); events.ErrorCode(err) != events.CampaignCancelled {
		t.Errorf("extend a cancelled campaign: %v", err)
	}
	if _, err := op.Close(e.ctx, e.campaign); err != nil {
		t.Errorf("close a cancelled campaign: %v, want nothing to do", err)
	}
}

// TestCancelCountsStoredPendingOnce: an order the consumer stored as confirmed before its
// confirm reached Redis is in Redis's pending set and in the store's confirmed orders. The
// pending pass hands it to the refund pass; it is one order, counted once, refunded.
func TestCancelCountsStoredPendingOnce(t *testing.T) {
	e := newEnv(t, 10, 10)
	op := e.operator()
	evs := e.reserve(t, 1, time.Hour)
	if _, err := e.st.ConfirmOrders(e.ctx, evs); err != nil { // Redis's confirm has not run
		t.Fatal(err)
	}
	var maxTotal, maxDone int
	_, tally, err := op.Cancel(e.ctx, e.campaign, func(done, total int) {
		maxTotal, maxDone = max(maxTotal, total), max(maxDone, done)
	})
	if err != nil {
		t.Fatal(err)
	}
	if tally != (compensator.Tally{Refunded: 1}) || maxTotal != 1 || maxDone != 1 {
		t.Errorf("cancel of 1 order: tally %+v, progress %d of %d; want {Refunded:1}, 1 of 1", tally, maxDone, maxTotal)
	}
	if states := e.check(t, evs); states[events.Refunded] != 1 {
		t.Errorf("states %v, want the order refunded", states)
	}
}

// TestConcurrentCancelsCountEachOrderOnce: two cancels at once each count the releases they
// made, so that between them every pending order is counted released once, not by both. The
// refunds are counted by the one whose store step made them: the other finds the campaign
// cancelled, and its refunds stored, and counts them unchanged if it finishes them.
func TestConcurrentCancelsCountEachOrderOnce(t *testing.T) {
	e := newEnv(t, 500, 10)
	op := e.operator()
	evs := e.reserve(t, 120, time.Hour)
	e.confirm(t, evs[:60])
	var wg sync.WaitGroup
	var tallies [2]compensator.Tally
	for i := range tallies {
		wg.Go(func() {
			var err error
			if _, tallies[i], err = op.Cancel(e.ctx, e.campaign, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	released, refunded := tallies[0].Released+tallies[1].Released, tallies[0].Refunded+tallies[1].Refunded
	if released != 60 || refunded != 60 {
		t.Errorf("two cancels: %+v and %+v; want 60 released and 60 refunded between them", tallies[0], tallies[1])
	}
	if states := e.check(t, evs); states[events.Failed] != 60 || states[events.Refunded] != 60 {
		t.Errorf("states %v", states)
	}
}

// TestConcurrentRefundsCountEachOrderOnce: two runs refunding one campaign's confirmed orders at
// once both read the same orders, and each counted refunded every order the store held refunded
// after its own call, the other run's too.
func TestConcurrentRefundsCountEachOrderOnce(t *testing.T) {
	e := newEnv(t, 500, 10)
	op := e.operator()
	evs := e.reserve(t, 60, time.Hour)
	e.confirm(t, evs)
	var wg sync.WaitGroup
	var tallies [2]compensator.Tally
	for i := range tallies {
		wg.Go(func() {
			var err error
			if tallies[i], err = op.CompensateCampaign(e.ctx, e.campaign, false, true, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if refunded := tallies[0].Refunded + tallies[1].Refunded; refunded != 60 {
		t.Errorf("two refunds: %+v and %+v; want 60 refunded between them", tallies[0], tallies[1])
	}
	if states := e.check(t, evs); states[events.Refunded] != 60 {
		t.Errorf("states %v", states)
	}
}

// TestBulkCompensateTwice releases the pending reservations, then refunds the confirmed
// orders, then does both again: the second run finds nothing to do.
func TestBulkCompensateTwice(t *testing.T) {
	e := newEnv(t, 300, 10)
	op := e.operator()
	evs := e.reserve(t, 60, time.Hour)
	e.confirm(t, evs[:25])

	pending, err := op.CompensateCampaign(e.ctx, e.campaign, true, false, nil)
	if err != nil || pending != (compensator.Tally{Released: 35}) {
		t.Fatalf("pending only: %+v, %v; want 35 released", pending, err)
	}
	confirmed, err := op.CompensateCampaign(e.ctx, e.campaign, false, true, nil)
	if err != nil || confirmed != (compensator.Tally{Refunded: 25}) {
		t.Fatalf("confirmed only: %+v, %v; want 25 refunded", confirmed, err)
	}
	again, err := op.CompensateCampaign(e.ctx, e.campaign, true, true, nil)
	if err != nil || again != (compensator.Tally{}) {
		t.Fatalf("again: %+v, %v; want nothing", again, err)
	}
	states := e.check(t, evs)
	if states[events.Failed] != 35 || states[events.Refunded] != 25 {
		t.Errorf("states %v", states)
	}
}

// TestBulkRefundFinishesInterruptedRefunds: refunds stored whose Redis half never ran (a run
// that Redis failed under, or that stopped) are finished by the next bulk refund, whatever
// Redis holds of them, and counted unchanged: the run that refunded them in the store counted
// them.
func TestBulkRefundFinishesInterruptedRefunds(t *testing.T) {
	e := newEnv(t, 100, 10)
	op := e.operator()
	evs := e.reserve(t, 6, time.Hour)
	e.confirm(t, evs[:4])
	// The consumer stopped between the store and Redis: the reservation is still pending.
	if _, err := e.st.ConfirmOrders(e.ctx, evs[4:6]); err != nil {
		t.Fatal(err)
	}
	refundInStoreOnly := func(ev events.Event) {
		t.Helper()
		if _, _, err := e.st.RefundOrder(e.ctx, ev.OrderID); err != nil {
			t.Fatal(err)
		}
	}
	refundInStoreOnly(evs[0]) // Redis: confirmed
	refundInStoreOnly(evs[1]) // Redis: confirmed
	refundInStoreOnly(evs[4]) // Redis: pending
	// A refund finished in Redis whose reservation was trimmed since, not yet marked in the
	// store (refunded before the store marked them): nothing to give back.
	if _, err := e.r.Confirm(e.ctx, evs[5].OrderID); err != nil {
		t.Fatal(err)
	}
	refundInStoreOnly(evs[5])
	if _, err := e.r.Refund(e.ctx, evs[5].OrderID); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Client().HDel(e.ctx, lua.KeysOf(e.campaign).Res, evs[5].OrderID).Err(); err != nil {
		t.Fatal(err)
	}

	// evs[2:4] are refunded now, evs[0,1,4] finished; evs[5] had nothing left to do.
	tally, err := op.CompensateCampaign(e.ctx, e.campaign, false, true, nil)
	if err != nil || tally != (compensator.Tally{Refunded: 2, Unchanged: 4}) {
		t.Fatalf("bulk refund: %+v, %v; want 2 refunded and 4 unchanged (3 of them finished)", tally, err)
	}
	if states := e.check(t, evs[:5]); states[events.Refunded] != 5 {
		t.Errorf("states %v, want every order refunded", states)
	}
	for _, run := range []struct{ pending, confirmed bool }{{false, true}, {true, true}} {
		again, err := op.CompensateCampaign(e.ctx, e.campaign, run.pending, run.confirmed, nil)
		if err != nil || again != (compensator.Tally{}) {
			t.Errorf("again (pending %v): %+v, %v; want nothing left to do", run.pending, again, err)
		}
	}
}

// TestInterruptedReleaseIsFinished: a release stored as failed whose Redis half never ran
// keeps its reservation pending in Redis, so it needs no list of its own: the sweeper finishes
// it at its deadline, and a bulk release (or a cancel) before that.
func TestInterruptedReleaseIsFinished(t *testing.T) {
	e := newEnv(t, 100, 10)
	op := e.operator()
	due := e.reserve(t, 1, time.Millisecond)
	later := e.reserve(t, 1, time.Hour)
	for _, ev := range append(due, later...) {
		if _, err := e.st.FailOrder(e.ctx, ev, events.ReasonOperator); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // past the first one's deadline
	if _, err := e.compensator(t, compensator.Config{}).SweepOnce(e.ctx, store.Fence{}); err != nil {
		t.Fatal(err)
	}
	if res, err := e.r.Reservation(e.ctx, due[0].OrderID); err != nil || res.State != "released" {
		t.Errorf("after a sweep the failed order's reservation is %+v, %v; want released", res, err)
	}
	tally, err := op.CompensateCampaign(e.ctx, e.campaign, true, false, nil)
	if err != nil || tally != (compensator.Tally{Released: 1}) {
		t.Errorf("bulk release: %+v, %v; want the one still pending released", tally, err)
	}
	if states := e.check(t, append(due, later...)); states[events.Failed] != 2 {
		t.Errorf("states %v, want both failed", states)
	}
}

// TestAddStockDuringCrowd adds stock twice while buyers race for it: every unit is sold once,
// none more, and the added units are sold too.
func TestAddStockDuringCrowd(t *testing.T) {
	e := newEnv(t, 50, 1)
	op := e.operator()
	var sold atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 40 {
				_, err := e.r.Reserve(e.ctx, e.campaign, events.NewOrderID(e.campaign), fmt.Sprintf("w%d-%d", w, i), 1, time.Hour)
				switch events.ErrorCode(err) {
				case "":
					sold.Add(1)
				case events.SoldOut:
					time.Sleep(time.Millisecond)
				default:
					t.Error(err)
				}
			}
		})
	}
	for range 2 {
		time.Sleep(5 * time.Millisecond)
		if _, err := op.AddStock(e.ctx, e.campaign, 100); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	c, err := e.st.Campaign(e.ctx, e.campaign)
	if err != nil {
		t.Fatal(err)
	}
	remaining, _, err := e.r.Remaining(e.ctx, e.campaign)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stock %d, sold %d, remaining %d", c.Stock, sold.Load(), remaining)
	if c.Stock != 250 || sold.Load()+remaining != 250 || remaining < 0 {
		t.Errorf("stock %d = sold %d + remaining %d does not hold", c.Stock, sold.Load(), remaining)
	}
	if sold.Load() <= 50 {
		t.Errorf("sold %d: the added units were not sold", sold.Load())
	}
}

// TestSweeperSyncsChanges: a change the store took and Redis missed (the operator's process
// died between the two) reaches the sale at the next sweep.
func TestSweeperSyncsChanges(t *testing.T) {
	e := newEnv(t, 10, 1)
	if _, _, err := e.st.ChangeCampaign(e.ctx, e.campaign, func(c *store.Campaign) error { c.Stock += 7; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := e.compensator(t, compensator.Config{}).SweepOnce(e.ctx, store.Fence{}); err != nil {
		t.Fatal(err)
	}
	if remaining, _, err := e.r.Remaining(e.ctx, e.campaign); err != nil || remaining != 17 {
		t.Errorf("remaining %d, %v after the sweep; want 17", remaining, err)
	}
}

// gauge reads a gauge of the default registry.
func gauge(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestAlertGauges: the gauges the alerts read follow what the sweeper and the guard see.
func TestAlertGauges(t *testing.T) {
	e := newEnv(t, 10, 5)
	comp := e.compensator(t, compensator.Config{})
	e.reserve(t, 3, time.Millisecond)
	time.Sleep(20 * time.Millisecond) // past their deadlines
	if _, err := comp.SweepOnce(e.ctx, store.Fence{}); err != nil {
		t.Fatal(err)
	}
	if v := gauge(t, "seckill_reservations_overdue"); v != 3 {
		t.Errorf("seckill_reservations_overdue = %v after a sweep that found 3, want 3", v)
	}
	if _, err := comp.SweepOnce(e.ctx, store.Fence{}); err != nil {
		t.Fatal(err)
	}
	if v := gauge(t, "seckill_reservations_overdue"); v != 0 {
		t.Errorf("seckill_reservations_overdue = %v once they were released, want 0", v)
	}

	// A campaign left frozen (a rebuild that has not ended) is counted; restored, it is not.
	if err := e.r.Client().HSet(e.ctx, lua.KeysOf(e.campaign).Meta, "frozen", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := comp.CheckRedis(e.ctx); err != nil {
		t.Fatal(err)
	}
	if v := gauge(t, "seckill_campaigns_frozen"); v != 1 {
		t.Errorf("seckill_campaigns_frozen = %v with one frozen, want 1", v)
	}
	if err := e.r.Client().HDel(e.ctx, lua.KeysOf(e.campaign).Meta, "frozen").Err(); err != nil {
		t.Fatal(err)
	}
	if err := comp.CheckRedis(e.ctx); err != nil {
		t.Fatal(err)
	}
	if v := gauge(t, "seckill_campaigns_frozen"); v != 0 {
		t.Errorf("seckill_campaigns_frozen = %v with none frozen, want 0", v)
	}

	// Redis loses the campaign: the round that finds it lost freezes it and waits in its
	// rebuild (here for a grace that does not end), and the campaign is counted meanwhile.
	e.loseRedis(t)
	k := lua.KeysOf(e.campaign)
	waiting := e.compensator(t, compensator.Config{RebuildGrace: time.Hour})
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error)
	go func() { done <- waiting.CheckRedis(ctx) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if frozen, _ := e.r.Client().HExists(e.ctx, k.Meta, "frozen").Result(); frozen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the guard did not freeze the lost campaign in 30s")
		}
	}
	if v := gauge(t, "seckill_campaigns_frozen"); v != 1 {
		t.Errorf("seckill_campaigns_frozen = %v while the lost campaign waits for its rebuild, want 1", v)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("the rebuild stopped with %v, want context.Canceled", err)
	}
}

// brokenSync is Redis refusing the campaign's own script (a failover, say): every per-order
// script still runs.
type brokenSync struct{ compensator.CampaignRedis }

func (brokenSync) Sync(context.Context, lua.Campaign) (lua.Synced, error) {
	return 0, errors.New("READONLY You can't write against a read only replica")
}

// TestCancelWhoseSaleIsBehind: a cancel stored in the store whose Redis step fails still gives
// every order back (the sweeper closes the sale within a sweep), and says that the sale is
// behind; it does not leave the cancelled campaign's buyers charged until someone runs it again.
func TestCancelWhoseSaleIsBehind(t *testing.T) {
	e := newEnv(t, 20, 5)
	op := e.operator()
	op.Sales = brokenSync{op.Sales}
	evs := e.reserve(t, 4, time.Hour)
	e.confirm(t, evs[:2])
	c, tally, err := op.Cancel(e.ctx, e.campaign, nil)
	if events.ErrorCode(err) != events.Unavailable {
		t.Errorf("cancel with redis behind: %v, want unavailable (the sale follows, or run it again)", err)
	}
	if c.CancelledAtMs == 0 || c.Sold != 0 || tally.Refunded != 2 || tally.Released != 2 {
		t.Errorf("cancel with redis behind: campaign %+v, tally %+v; want cancelled, 2 refunded, 2 released, nothing sold", c, tally)
	}
	for _, ev := range evs {
		if o, err := e.st.Order(e.ctx, ev.OrderID); err != nil || (o.Status != events.Refunded && o.Status != events.Failed) {
			t.Errorf("order %s after the cancel: %+v %v", ev.OrderID, o, err)
		}
	}
	if left, _, _ := e.r.Remaining(e.ctx, e.campaign); left != e.stock {
		t.Errorf("remaining %d after the cancel, want the whole stock %d back", left, e.stock)
	}
}

// TestPurchaseAfterCancelWhoseSaleIsBehind: while a cancel's Redis step has failed, Redis still
// sells until the sweeper closes the sale. A purchase it takes meanwhile must not become a
// confirmed order of the cancelled campaign: the cancel's run is over, and nothing would ever
// refund it.
func TestPurchaseAfterCancelWhoseSaleIsBehind(t *testing.T) {
	_, _, out := purchaseAfterCancel(t)
	if out.Status == events.Confirmed || out.Reason == "" {
		t.Errorf("the consumer's confirmation of a purchase after the cancel: %+v, want it refused", out)
	}
}

// purchaseAfterCancel cancels a campaign while its Redis step fails, then has Redis take a
// purchase, which has not heard of the cancel, and the store decide it: the purchase and the
// store's answer.
func purchaseAfterCancel(t *testing.T) (*env, events.Event, store.Result) {
	t.Helper()
	e := newEnv(t, 20, 5)
	op := e.operator()
	op.Sales = brokenSync{op.Sales}
	if _, _, err := op.Cancel(e.ctx, e.campaign, nil); events.ErrorCode(err) != events.Unavailable {
		t.Fatalf("cancel with redis behind: %v, want unavailable", err)
	}
	late := e.reserve(t, 1, time.Hour)
	out, err := e.st.ConfirmOrders(e.ctx, late)
	if err != nil {
		t.Fatal(err)
	}
	return e, late[0], out[0]
}

// TestRaiseStockRetried: an operator whose add-stock answered 503 (its Redis step failed, or
// the call timed out) cannot tell whether the store took it, and the answer says to run it
// again. Raising the stock to a total, run twice, puts the units on sale once; adding, run
// twice, would add twice.
func TestRaiseStockRetried(t *testing.T) {
	e := newEnv(t, 10, 1)
	op := e.operator()
	behind := *op
	behind.Sales = brokenSync{op.Sales}
	if _, err := behind.RaiseStock(e.ctx, e.campaign, 15); events.ErrorCode(err) != events.Unavailable {
		t.Fatalf("raise with redis behind: %v, want unavailable", err)
	}
	c, err := op.RaiseStock(e.ctx, e.campaign, 15) // the retry the answer asks for
	if err != nil || c.Stock != 15 {
		t.Fatalf("the retry: stock %d, %v; want 15", c.Stock, err)
	}
	if remaining, _, err := e.r.Remaining(e.ctx, e.campaign); err != nil || remaining != 15 {
		t.Errorf("remaining %d, %v after the retry; want 15", remaining, err)
	}
	// `seckill campaign add-stock --to 12` was told "stock must be a whole number from 15 to
	// 1099511627776": a field --to does not name, and no word of why 12 is wrong.
	if _, err := op.RaiseStock(e.ctx, e.campaign, 12); events.ErrorCode(err) != events.Invalid || !strings.Contains(err.Error(), "cannot go below its stock now, 15") {
		t.Errorf("raise below the stock: %v, want invalid, saying the stock cannot go below 15", err)
	}
}

// TestPurchaseAfterCancelDeadLettered follows the refused purchase of a cancelled campaign to
// its end, as the consumer and the compensator handle it: dead-lettered with reason
// campaign_cancelled, then failed by the compensator, whose release gives its units back in
// Redis even once the sale has caught up with the cancel; the audit finds every invariant held.
func TestPurchaseAfterCancelDeadLettered(t *testing.T) {
	e, late, out := purchaseAfterCancel(t)
	if out.Reason != string(events.CampaignCancelled) {
		t.Fatalf("the store's answer to a purchase after the cancel: %+v, want reason %s", out, events.CampaignCancelled)
	}
	// The sweeper brings the sale along before the dead letter is resolved.
	c, err := e.st.Campaign(e.ctx, e.campaign)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Sync(e.ctx, compensator.RedisCampaign(c)); err != nil {
		t.Fatal(err)
	}
	o, err := e.operator().Resolver.Fail(e.ctx, late, out.Reason, "dlq")
	if err != nil || o.Status != events.Failed || o.Reason != string(events.CampaignCancelled) {
		t.Fatalf("the dead letter's resolution: %+v, %v; want failed, campaign_cancelled", o, err)
	}
	e.check(t, []events.Event{late})
	if left, _, _ := e.r.Remaining(e.ctx, e.campaign); left != e.stock {
		t.Errorf("remaining %d after the dead letter, want the whole stock %d back", left, e.stock)
	}
	if rep, text := e.audit(t); !rep.OK() {
		t.Errorf("audit after the dead letter:\n%s", text)
	}
}

// TestCloseWhileRedisClockIsBehind: Redis decides whether a purchase is late with its own
// clock (reserve.lua reads TIME), so an end taken from the closing process's clock left Redis
// selling for as long as its clock was behind that process's, after the operator was told the
// sale was closed. A close (and a cancel, which closes too) ends the sale at Redis's instant,
// and the store records that same instant.
func TestCloseWhileRedisClockIsBehind(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close func(*env, *compensator.Operator) (store.Campaign, error)
	}{
		{"close", func(e *env, op *compensator.Operator) (store.Campaign, error) {
			return op.Close(e.ctx, e.campaign)
		}},
		{"cancel", func(e *env, op *compensator.Operator) (store.Campaign, error) {
			c, _, err := op.Cancel(e.ctx, e.campaign, nil)
			return c, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// miniredis, because a real server's clock cannot be set: this one stands a minute
			// behind this process's, and still.
			mr := miniredis.RunT(t)
			redisNow := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
			mr.SetTime(redisNow)
			e := newEnvOn(t, redis.NewClient(&redis.Options{Addr: mr.Addr()}), 10, 2, 0)
			c, err := tc.close(e, e.operator())
			if err != nil {
				t.Fatal(err)
			}
			if c.EndsAtMs != redisNow.UnixMilli() {
				t.Errorf("the store records the end at %d, want Redis's instant %d (%+dms off)", c.EndsAtMs, redisNow.UnixMilli(), c.EndsAtMs-redisNow.UnixMilli())
			}
			if _, err := e.r.Reserve(e.ctx, e.campaign, events.NewOrderID(e.campaign), "late", 1, time.Minute); events.ErrorCode(err) != events.Ended {
				t.Errorf("a purchase after the %s: %v, want ended", tc.name, err)
			}
		})
	}
}

// TestExtendJudgedByRedisClock: "ends_at must be in the future" is the sale's future, the one
// Redis sells by. With Redis's clock a minute ahead of this process's, an end thirty seconds
// from now by ours has passed by Redis's: taken, it told the operator the sale runs on while
// Redis refused every purchase as ended.
func TestExtendJudgedByRedisClock(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.SetTime(time.Now().Add(time.Minute))
	e := newEnvOn(t, redis.NewClient(&redis.Options{Addr: mr.Addr()}), 10, 2, 0)
	_, err := e.operator().Extend(e.ctx, e.campaign, time.Now().Add(30*time.Second))
	if events.ErrorCode(err) != events.Invalid {
		t.Fatalf("extend to an end Redis's clock has passed: %v, want invalid", err)
	}
	if _, err := e.r.Reserve(e.ctx, e.campaign, events.NewOrderID(e.campaign), "buyer", 1, time.Minute); err != nil {
		t.Errorf("the refused extension changed the sale: a purchase answered %v", err)
	}
}

// TestExtendRefusesAnEarlierEnd: extend moves the end later, as its help says. An end earlier
// than the sale's, or one given to a sale without an end, was taken, and shortened the sale
// under an operator who meant to lengthen it; it is refused, and the sale is as it was.
func TestExtendRefusesAnEarlierEnd(t *testing.T) {
	e := newEnv(t, 10, 2)
	op := e.operator()
	endless, err := op.Campaigns.Campaign(e.ctx, e.campaign)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.Extend(e.ctx, e.campaign, time.Now().Add(time.Hour)); events.ErrorCode(err) != events.Invalid {
		t.Errorf("an end given to a sale without one: %v, want invalid", err)
	}
	if c, _ := op.Campaigns.Campaign(e.ctx, e.campaign); c != endless {
		t.Errorf("the refused end changed the campaign: %+v, was %+v", c, endless)
	}
	if _, _, err := e.st.ChangeCampaign(e.ctx, e.campaign, func(c *store.Campaign) error {
		c.EndsAtMs = time.Now().Add(2 * time.Hour).UnixMilli()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ends, err := op.Extend(e.ctx, e.campaign, time.Now().Add(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c, err := op.Extend(e.ctx, e.campaign, time.Now().Add(time.Hour))
	if events.ErrorCode(err) != events.Invalid || !strings.Contains(events.ErrorMessage(err), "close") {
		t.Errorf("an earlier end: %+v, %v; want invalid, saying to close instead", c, err)
	}
	if c, _ := op.Campaigns.Campaign(e.ctx, e.campaign); c != ends {
		t.Errorf("the refused end changed the campaign: %+v, was %+v", c, ends)
	}
}

// TestCancelCountsAHalfDoneRefundOfAPendingReservation: the store refunded an order whose
// reservation Redis still held pending (the consumer stored it before its confirm reached Redis,
// then a refund stopped before Redis). Cancel's pending pass finishes that refund, giving the
// units back, and counts it unchanged: the run that refunded it in the store counted it.
func TestCancelCountsAHalfDoneRefundOfAPendingReservation(t *testing.T) {
	e := newEnv(t, 10, 10)
	op := e.operator()
	evs := e.reserve(t, 1, time.Hour)
	if _, err := e.st.ConfirmOrders(e.ctx, evs); err != nil {
		t.Fatal(err)
	}
	if o, _, err := e.st.RefundOrder(e.ctx, evs[0].OrderID); err != nil || o.Status != events.Refunded {
		t.Fatalf("refund in the store: %+v, %v", o, err)
	}
	_, tally, err := op.Cancel(e.ctx, e.campaign, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tally != (compensator.Tally{Unchanged: 1}) {
		t.Errorf("cancel of 1 half-refunded order: tally %+v; want {Unchanged:1}", tally)
	}
	if states := e.check(t, evs); states[events.Refunded] != 1 {
		t.Errorf("states %v, want the order refunded", states)
	}
}

// TestSweepFinishesACancelCutShort: a cancel's store step refunds the campaign's confirmed and
// paid orders with the cancel, in one transaction; its run then gives their units back in Redis
// and announces each refund. A run killed right after the store step (the api or the command
// stopped, its host lost) used to leave those orders confirmed and paid, holding their units
// and their buyers' money, until a sweep ten minutes on. Now no order of the campaign can be
// paid from the cancel on, and the next sweep finishes each refund: its units back, its refund
// announced once, the paid one's naming its payment, also for an order whose confirm had not
// reached Redis.
func TestSweepFinishesACancelCutShort(t *testing.T) {
	e := newEnvPaying(t, 10, 3, time.Hour)
	evs := e.reserve(t, 3, time.Hour)
	e.confirm(t, evs[:2])
	// The consumer stored it, and stopped before its confirm reached Redis.
	if _, err := e.st.ConfirmOrders(e.ctx, evs[2:]); err != nil {
		t.Fatal(err)
	}
	kafka := &recordingProducer{}
	res := &compensator.Resolver{Store: e.st, Redis: e.r, Producer: kafka, Results: e.topics.Results}
	if _, err := res.Pay(e.ctx, evs[0].OrderID, "pay-1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.st.ChangeCampaign(e.ctx, e.campaign, func(c *store.Campaign) error {
		c.CancelledAtMs = time.Now().UnixMilli() // Cancel's store step; killed right after it
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := res.Pay(e.ctx, evs[1].OrderID, "pay-2"); events.ErrorCode(err) != events.CampaignCancelled {
		t.Errorf("a payment after the cancel's store step: %v; want %s", err, events.CampaignCancelled)
	}
	c := e.compensator(t, compensator.Config{})
	c.Producer = kafka
	if _, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		o, err := e.st.Order(e.ctx, ev.OrderID)
		if err != nil || o.Status != events.Refunded || o.Reason != events.ReasonOperator {
			t.Errorf("order %d of the cancelled campaign after a sweep: %+v %v; want it refunded, its units back", i, o, err)
		}
		if r, err := e.r.Reservation(e.ctx, ev.OrderID); err != nil || r.State != lua.StateRefunded {
			t.Errorf("order %d's reservation after a sweep: %+v %v; want it refunded", i, r, err)
		}
		if refunds := kafka.announcements(events.OrderRefunded, ev.OrderID); len(refunds) != 1 {
			t.Errorf("order %d's refunds announced: %+v; want one", i, refunds)
		}
	}
	if refunds := kafka.announcements(events.OrderRefunded, evs[0].OrderID); len(refunds) != 1 || refunds[0].PaymentID != "pay-1" {
		t.Errorf("the paid order's refunds announced: %+v; want one, naming pay-1", refunds)
	}
	if left, _, _ := e.r.Remaining(e.ctx, e.campaign); left != e.stock {
		t.Errorf("remaining %d after the sweep, want the whole stock %d back", left, e.stock)
	}
	if c, err := e.st.Campaign(e.ctx, e.campaign); err != nil || c.Sold != 0 {
		t.Errorf("the cancelled campaign after the sweep: %+v %v; want nothing sold", c, err)
	}
}

// TestCancelCutShortByKafkaCountsWhatItRefunded: a cancel whose run Kafka fails under (each
// refund's announcement refused) has refunded every order in the store all the same: its tally
// says so, with the error, and the sweep finishes the refunds once Kafka answers. Running the
// cancel again counts none of them a second time.
func TestCancelCutShortByKafkaCountsWhatItRefunded(t *testing.T) {
	e := newEnv(t, 30, 3)
	evs := e.reserve(t, 5, time.Hour)
	e.confirm(t, evs)
	op := e.operator()
	op.Producer = &recordingProducer{refuse: errors.New("kafka refused the record")}
	_, tally, err := op.Cancel(e.ctx, e.campaign, nil)
	if err == nil || tally.Refunded != 5 {
		t.Errorf("a cancel whose announcements Kafka refused: %+v, %v; want an error, and 5 refunded", tally, err)
	}
	op.Producer = &recordingProducer{}
	if _, tally, err := op.Cancel(e.ctx, e.campaign, nil); err != nil || tally.Refunded != 0 {
		t.Errorf("the cancel run again: %+v, %v; want none refunded again", tally, err)
	}
	c := e.compensator(t, compensator.Config{})
	kafka := &recordingProducer{}
	c.Producer = kafka
	compensator.SetSweepPage(c, 2) // the list is taken a page at a time, every page in one sweep
	if _, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if o, err := e.st.Order(e.ctx, ev.OrderID); err != nil || o.Status != events.Refunded || o.Reason != events.ReasonOperator {
			t.Errorf("order %d after the sweep: %+v %v; want it refunded, its units back", i, o, err)
		}
	}
	if left, _, _ := e.r.Remaining(e.ctx, e.campaign); left != e.stock {
		t.Errorf("remaining %d after the sweep, want the whole stock %d", left, e.stock)
	}
}

// TestSweepFinishesACancelOfARetiredCampaign: an operator may cancel a campaign whose sale ended
// longer ago than the retention (to refund its buyers), and its run may be cut short as any
// other. The sweeper drops such a campaign's keys; its refunds, stored by the cancel, are
// finished all the same: each announced, so that its buyer gets the money back.
func TestSweepFinishesACancelOfARetiredCampaign(t *testing.T) {
	e := newEnv(t, 10, 3)
	evs := e.reserve(t, 2, time.Hour)
	e.confirm(t, evs)
	if _, _, err := e.st.ChangeCampaign(e.ctx, e.campaign, func(c *store.Campaign) error {
		c.EndsAtMs = time.Now().Add(-48 * time.Hour).UnixMilli() // ended, and retired, long ago
		c.CancelledAtMs = time.Now().Add(-time.Hour).UnixMilli() // Cancel's store step; killed after it
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c := e.compensator(t, compensator.Config{Retention: 24 * time.Hour})
	kafka := &recordingProducer{}
	c.Producer = kafka
	for range 2 { // the first drops the keys; none may leave the orders behind
		if _, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, ev := range evs {
		if o, err := e.st.Order(e.ctx, ev.OrderID); err != nil || o.Status != events.Refunded || o.Reason != events.ReasonOperator {
			t.Errorf("order %d of the cancelled, retired campaign after two sweeps: %+v %v; want it refunded", i, o, err)
		}
		if refunds := kafka.announcements(events.OrderRefunded, ev.OrderID); len(refunds) != 1 {
			t.Errorf("order %d's refunds announced: %+v; want one", i, refunds)
		}
	}
	if c, err := e.st.Campaign(e.ctx, e.campaign); err != nil || c.Sold != 0 {
		t.Errorf("the cancelled campaign after the sweeps: %+v %v; want nothing sold", c, err)
	}
}

// stoppingProducer stops the run it announces for (stop) at its first announcement, as an
// operator's ^C does while orders are in hand, and acknowledges each announcement a moment
// later, as Kafka does.
type stoppingProducer struct {
	stop context.CancelFunc
	once sync.Once
	wg   sync.WaitGroup
}

func (p *stoppingProducer) TryProduce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.once.Do(p.stop)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		time.Sleep(50 * time.Millisecond)
		promise(r, nil)
	}()
}

// TestBulkCompensateStoppedFinishesTheOrdersInHand: a bulk run stopped (seckill compensate
// --campaign or campaign cancel given ^C) starts no more orders and finishes those in hand, each
// refunded in the store, in Redis and on Kafka, then says that it stopped, how far it got, and
// to run it again. It cancelled the orders in hand with the stop: a refund stored whose units
// Redis still held, and an error about Kafka ("its announcement did not reach Kafka … interrupt
// signal received") that read as an outage, not a stop.
func TestBulkCompensateStoppedFinishesTheOrdersInHand(t *testing.T) {
	e := newEnv(t, 200, 10)
	evs := e.reserve(t, 40, time.Hour)
	e.confirm(t, evs)
	ctx, stop := context.WithCancel(e.ctx)
	defer stop()
	kafka := &stoppingProducer{stop: stop}
	defer kafka.wg.Wait()
	op := e.operator()
	op.Producer = kafka
	tally, err := op.CompensateCampaign(ctx, e.campaign, false, true, nil)
	if !errors.Is(err, context.Canceled) || events.ErrorCode(err) == events.Unavailable || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("a bulk refund stopped with orders in hand: %v; want it to say it stopped (context canceled), not unavailable", err)
	}
	if tally.Refunded == 0 || tally.Refunded == int64(len(evs)) {
		t.Errorf("a bulk refund stopped at its first announcement refunded %d of %d; want those in hand, not none or all", tally.Refunded, len(evs))
	}
	states := e.check(t, evs) // each order final in the store and in Redis alike
	if int64(states[events.Refunded]) != tally.Refunded {
		t.Errorf("%d orders refunded in the store, the tally says %d", states[events.Refunded], tally.Refunded)
	}
}

// interruptedStore is the store of an operator whose ^C (or a client hanging up) arrives as the
// control's transaction commits: it cancels the caller's context once the change is stored.
type interruptedStore struct {
	compensator.CampaignStore
	cancel context.CancelFunc
}

func (s interruptedStore) ChangeCampaign(ctx context.Context, id string, change func(*store.Campaign) error) (store.Campaign, []store.Order, error) {
	c, refunded, err := s.CampaignStore.ChangeCampaign(ctx, id, change)
	s.cancel()
	return c, refunded, err
}

// TestControlInterruptedAfterItsStoreStepFinishes: a control whose caller stops waiting once
// its change is stored still brings Redis along; it does not answer "the sale follows within
// seconds" and leave the sale open until the sweeper's next round.
func TestControlInterruptedAfterItsStoreStepFinishes(t *testing.T) {
	e := newEnv(t, 10, 2)
	op := e.operator()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	op.Campaigns = interruptedStore{op.Campaigns, cancel}
	if _, err := op.Close(ctx, e.campaign); err != nil {
		t.Fatalf("a close interrupted after its store step: %v, want it finished", err)
	}
	if _, err := e.r.Reserve(e.ctx, e.campaign, events.NewOrderID(e.campaign), "late", 1, time.Minute); events.ErrorCode(err) != events.Ended {
		t.Errorf("a purchase after the interrupted close: %v, want ended at once", err)
	}
}
