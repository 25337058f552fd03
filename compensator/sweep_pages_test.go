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
			_, _, err = e.st.RefundOrder(e.ctx, ev.OrderID)
		} else {
			_, err = e.st.ExpireOrder(e.ctx, ev.OrderID, late)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := e.st.RefundOrder(e.ctx, healthy[0].OrderID); err != nil {
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

// page and due are the sizes of the tests of a sweep that takes more than one page: due orders,
// read page at a time.
const page, due = 2, 5

// sweepsOfPages are those tests' cases: within its interval a sweep takes every page due, and
// out of time one page, the next sweep going on from there. done is how many have ended after
// each sweep.
var sweepsOfPages = []struct {
	name     string
	interval time.Duration
	done     []int
}{
	{"within its interval", 0, []int{due}},
	{"out of time", time.Nanosecond, []int{page, 2 * page, due}},
}

// TestSweepExpiresEveryPageDue: a sweep expired one page of the orders past their pay_by
// (1,000) and left the rest to the next sweeps, a page per sweep interval. A sale's unpaid
// orders come due about as fast as the consumer confirmed them (2,000 a second, its pace in
// the bench): the flash crowd's 10,000, unpaid, ended ten sweeps past their pay_by, where I6
// gives them one. Every order due when a sweep starts must end in that sweep, as its interval
// allows: a sweep out of time takes one page, and the next goes on from there.
func TestSweepExpiresEveryPageDue(t *testing.T) {
	for _, tc := range sweepsOfPages {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvPaying(t, 100, 10, time.Second)
			evs := e.reserve(t, due, time.Hour)
			e.confirm(t, evs)
			last, err := e.st.Order(e.ctx, evs[due-1].OrderID)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Until(time.UnixMilli(last.PayByMs + 10)))

			c := e.compensator(t, compensator.Config{SweepInterval: tc.interval})
			compensator.SetSweepPage(c, page)
			for i, want := range tc.done {
				if _, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil {
					t.Fatal(err)
				}
				if states := e.check(t, evs); states[events.Expired] != want {
					t.Errorf("after sweep %d past every pay_by, with pages of %d: %v; want %d orders expired", i+1, page, states, want)
				}
			}
			for _, ev := range evs {
				if o, err := e.st.Order(e.ctx, ev.OrderID); err != nil || o.Reason != events.ReasonUnpaid {
					t.Errorf("order %s = %s %q, %v; want it expired with its units back (reason %q)", ev.OrderID, o.Status, o.Reason, err, events.ReasonUnpaid)
				}
			}
		})
	}
}

// TestSweepReleasesEveryReservationDue: a sweep released one page (1,000) of a campaign's
// reservations past their deadline, and left the rest to the next sweeps, a page per sweep
// interval. A consumer down past the deadline (Kafka or PostgreSQL out for longer than the
// reservations last) leaves a sale's thousands due at once, and I5 gives each one sweep
// interval past its deadline. Every reservation due when a sweep starts must end in that
// sweep, as its interval allows: a sweep out of time takes one page, and the next goes on.
func TestSweepReleasesEveryReservationDue(t *testing.T) {
	for _, tc := range sweepsOfPages {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 100, 10)
			evs := e.reserve(t, due, 50*time.Millisecond)
			time.Sleep(100 * time.Millisecond) // past their deadlines
			c := e.compensator(t, compensator.Config{SweepInterval: tc.interval})
			compensator.SetSweepPage(c, page)
			for i, want := range tc.done {
				if _, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil {
					t.Fatal(err)
				}
				released := 0
				for _, ev := range evs {
					res, err := e.r.Reservation(e.ctx, ev.OrderID)
					if err != nil {
						t.Fatal(err)
					}
					if res.State == lua.StateReleased {
						released++
					}
				}
				if released != want {
					t.Errorf("after sweep %d past every deadline, with pages of %d: %d reservations released; want %d", i+1, page, released, want)
				}
			}
		})
	}
}

// TestSweepMovesPastOverdueItCannotResolve: a sweep lists a page of a campaign's reservations
// past their deadline, oldest first, and lists again while pages come full. Those it cannot
// release (Redis holds their records in a form no code of seckill writes) stay first in the
// list: a page of them ended the campaign's turn every sweep, and the reservations behind
// them were never released, their units held for good.
func TestSweepMovesPastOverdueItCannotResolve(t *testing.T) {
	const page, failing = 2, 5
	e := newEnv(t, 100, 10)
	stuck := e.reserve(t, failing, time.Millisecond)
	time.Sleep(5 * time.Millisecond) // behind them in the list, by deadline
	behind := e.reserve(t, 1, time.Millisecond)[0]
	time.Sleep(5 * time.Millisecond)
	for _, ev := range stuck {
		e.redis(t, "HSET", lua.KeysOf(e.campaign).Res, ev.OrderID, "not a record")
	}
	c := e.compensator(t, compensator.Config{})
	compensator.SetSweepPage(c, page)
	if _, err := c.SweepOnce(e.ctx, store.Fence{}); err == nil {
		t.Error("no error, want those of the malformed records")
	}
	if res, err := e.r.Reservation(e.ctx, behind.OrderID); err != nil || res.State != lua.StateReleased {
		t.Errorf("the reservation behind %d the sweep cannot release is %q %v, want released", failing, res.State, err)
	}
}
