package compensator_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestSweepPagesMoveOn: a sweep takes a page of the store's unfinished refunds and a page of its
// orders to expire. Those lists had no order, so the database gave the same page every sweep:
// a page full of orders the sweeper cannot finish (here those of a campaign whose Redis shard is
// down) kept every order listed after them, of campaigns on healthy shards, waiting for good,
// their units never back on sale (I6 broken for campaigns with no part in the outage). An
// order behind a full page of failing ones must be finished within a few sweeps.
func TestSweepPagesMoveOn(t *testing.T) {
	const page, failing = 2, 5
	e := newEnvPaying(t, 100, 10, time.Hour)
	// The campaign on the shard that is down sorts before e's, and its orders are refunded and
	// expired first: they come first in the lists, by order id as by the tables' layout.
	down := storetest.Name("a-down")
	now := time.Now()
	if err := e.st.CreateCampaign(e.ctx, store.Campaign{ID: down, Name: "down", Stock: 100, PerUserLimit: 10,
		StartsAtMs: now.Add(-time.Hour).UnixMilli(), CreatedAtMs: now.UnixMilli(), PaymentWindowMs: time.Hour.Milliseconds()}); err != nil {
		t.Fatal(err)
	}
	stuck := make([]events.Event, 2*failing)
	for i := range stuck {
		stuck[i] = events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: now.UTC(),
			OrderID: events.NewOrderID(down), CampaignID: down, UserID: fmt.Sprintf("d%d", i), Quantity: 1, Deadline: now.Add(time.Hour)}
	}
	if _, err := e.st.ConfirmOrders(e.ctx, stuck); err != nil {
		t.Fatal(err)
	}
	healthy := e.reserve(t, 2, time.Hour)
	e.confirm(t, healthy)
	// Each list: the down campaign's orders first, then one of e's whose Redis step was cut
	// short (a compensator killed between the store and Redis).
	late := now.Add(2 * time.Hour) // past every pay_by
	for i, ev := range stuck {
		var err error
		if i < failing {
			_, err = e.st.RefundOrder(e.ctx, ev.OrderID)
		} else {
			_, err = e.st.ExpireOrder(e.ctx, ev.OrderID, late)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.st.RefundOrder(e.ctx, healthy[0].OrderID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.ExpireOrder(e.ctx, healthy[1].OrderID, late); err != nil {
		t.Fatal(err)
	}
	// The shard is down: every script on the campaign's keys fails.
	k := lua.KeysOf(down)
	t.Cleanup(func() { e.r.Client().Del(e.ctx, k.All()...) })
	if err := e.r.Client().Set(e.ctx, k.Res, "the shard is down", 0).Err(); err != nil {
		t.Fatal(err)
	}

	c := e.compensator(t, compensator.Config{})
	compensator.SetSweepPage(c, page)
	// Each page moves past the one before: the healthy orders come in the third.
	sweeps := failing/page + 2
	for i := range sweeps {
		_, err := c.SweepOnce(e.ctx, store.Fence{})
		if i == 0 && err == nil {
			t.Errorf("sweep %d: no error, want those of the orders on the shard that is down", i)
		}
	}
	for i, want := range []string{events.ReasonOperator, events.ReasonUnpaid} {
		if o, err := e.st.Order(e.ctx, healthy[i].OrderID); err != nil || o.Reason != want {
			t.Errorf("after %d sweeps, healthy order %d = %s %q, %v; want its units back (reason %q)", sweeps, i, o.Status, o.Reason, err, want)
		}
	}
	if states := e.check(t, healthy); states[events.Refunded] != 1 || states[events.Expired] != 1 {
		t.Errorf("after %d sweeps: %v; want the healthy refund and expiry finished", sweeps, states)
	}
	for _, ev := range stuck {
		if o, err := e.st.Order(e.ctx, ev.OrderID); err != nil || o.Reason != "" {
			t.Errorf("order %s on the shard that is down = %s %q, %v; want it still listed", ev.OrderID, o.Status, o.Reason, err)
		}
	}
}
