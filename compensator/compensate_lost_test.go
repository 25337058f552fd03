package compensator_test

import (
	"testing"
	"time"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
)

// TestCompensateRefusesAnOrderTheStoreLost: the store is restored from a backup taken before
// Ann's order, which the consumer had confirmed in the store and in Redis. An operator
// compensates it before the replay has brought it back. Compensate refuses, changing nothing,
// and once the store has the order again (the replay) refunds it, its unit back once. Before,
// it stored the order failed and announced OrderFailed, while the release, which gives back
// pending reservations only, left it confirmed in Redis with its unit sold: the order ended
// twice, and the failed row, final, kept the replay from confirming it again.
func TestCompensateRefusesAnOrderTheStoreLost(t *testing.T) {
	e := newEnv(t, 10, 5)
	ann := e.reserve(t, 1, time.Hour)[0]
	e.confirm(t, []events.Event{ann})
	e.sql(t, `DELETE FROM orders WHERE campaign_id = ?`, e.campaign)
	e.sql(t, `DELETE FROM purchases WHERE campaign_id = ?`, e.campaign)
	e.sql(t, `UPDATE campaigns SET sold = 0 WHERE id = ?`, e.campaign)
	res := e.operator().Resolver

	if o, err := res.Compensate(e.ctx, ann.OrderID); events.ErrorCode(err) != events.OrderNotFound {
		t.Errorf("Compensate of an order the store lost: %q (%q) %v, want order_not_found", o.Status, o.Reason, err)
	}
	if o, err := e.st.Order(e.ctx, ann.OrderID); events.ErrorCode(err) != events.OrderNotFound {
		t.Errorf("the store has the lost order %q (%q) %v, want none", o.Status, o.Reason, err)
	}
	e.wantRedis(t, ann, lua.StateConfirmed, e.stock-int64(ann.Quantity))

	e.confirm(t, []events.Event{ann}) // the replay
	if o, err := res.Compensate(e.ctx, ann.OrderID); err != nil || o.Status != events.Refunded {
		t.Errorf("Compensate after the replay: %q %v, want refunded", o.Status, err)
	}
	e.wantRedis(t, ann, lua.StateRefunded, e.stock)
}

// TestCompensateRefundsAnOrderStoredBetweenItsReads: the consumer stores and confirms an
// order between Compensate's read of the store, which misses it, and its read of Redis, which
// finds it confirmed. The store has it: Compensate refunds it, as it does an order it finds.
func TestCompensateRefundsAnOrderStoredBetweenItsReads(t *testing.T) {
	e := newEnv(t, 10, 5)
	ev := e.reserve(t, 1, time.Hour)[0]
	if _, err := e.r.Confirm(e.ctx, ev.OrderID); err != nil {
		t.Fatal(err)
	}
	res := &compensator.Resolver{Store: &confirmingStore{Store: e.st, ev: ev}, Redis: e.r, Producer: nopProducer{}, Results: e.topics.Results}
	if o, err := res.Compensate(e.ctx, ev.OrderID); err != nil || o.Status != events.Refunded {
		t.Errorf("Compensate of an order stored meanwhile: %q %v, want refunded", o.Status, err)
	}
	e.wantRedis(t, ev, lua.StateRefunded, e.stock)
}

// wantRedis checks ev's reservation's state and the campaign's remaining stock in Redis.
func (e *env) wantRedis(t *testing.T, ev events.Event, state string, remaining int64) {
	t.Helper()
	held, err := e.r.Reservation(e.ctx, ev.OrderID)
	if err != nil || held.State != state {
		t.Errorf("Redis holds the reservation %s %v, want %s", held.State, err, state)
	}
	if n, _, err := e.r.Remaining(e.ctx, e.campaign); err != nil || n != remaining {
		t.Errorf("remaining %d %v, want %d", n, err, remaining)
	}
}

// TestCompensateRefusesARefundTheStoreLost: Ann's order was refunded, in the store and then in
// Redis, and the store is restored from a backup that lacks it. An operator compensates it
// again: Compensate refuses, changing nothing. Before, it stored the order failed and announced
// OrderFailed, while Redis holds it refunded: the order ended twice, and the failed row, final,
// kept the replay from storing it refunded.
func TestCompensateRefusesARefundTheStoreLost(t *testing.T) {
	e := newEnv(t, 10, 5)
	ann := e.reserve(t, 1, time.Hour)[0]
	e.confirm(t, []events.Event{ann})
	res := e.operator().Resolver
	if o, err := res.Compensate(e.ctx, ann.OrderID); err != nil || o.Status != events.Refunded {
		t.Fatalf("Compensate: %q %v, want refunded", o.Status, err)
	}
	e.sql(t, `DELETE FROM orders WHERE campaign_id = ?`, e.campaign)
	e.sql(t, `DELETE FROM purchases WHERE campaign_id = ?`, e.campaign)

	if o, err := res.Compensate(e.ctx, ann.OrderID); events.ErrorCode(err) != events.OrderNotFound {
		t.Errorf("Compensate of a refund the store lost: %q (%q) %v, want order_not_found", o.Status, o.Reason, err)
	}
	if o, err := e.st.Order(e.ctx, ann.OrderID); events.ErrorCode(err) != events.OrderNotFound {
		t.Errorf("the store has the lost order %q (%q) %v, want none", o.Status, o.Reason, err)
	}
	e.wantRedis(t, ann, lua.StateRefunded, e.stock)
}

// TestCompensateAnswersTheRefundFinished: a refund that gave the units back answers the order
// as the store then holds it, reason operator. It answered the row before MarkRefunded, reason
// empty, which the README says means the units are not back yet: `seckill compensate` printed
// that for a refund it had finished, and printed the reason only when run a second time.
func TestCompensateAnswersTheRefundFinished(t *testing.T) {
	e := newEnv(t, 10, 5)
	ann := e.reserve(t, 1, time.Hour)[0]
	e.confirm(t, []events.Event{ann})
	o, err := e.operator().Resolver.Compensate(e.ctx, ann.OrderID)
	if err != nil || o.Status != events.Refunded || o.Reason != events.ReasonOperator {
		t.Errorf("Compensate of a confirmed order: %q (%q) %v, want refunded (%q)", o.Status, o.Reason, err, events.ReasonOperator)
	}
	if stored, err := e.st.Order(e.ctx, ann.OrderID); err != nil || stored.Reason != o.Reason {
		t.Errorf("the store holds reason %q %v, the answer said %q", stored.Reason, err, o.Reason)
	}
}

// TestCompensateAnswersAHalfDoneRefundFinished: compensating again a refund that stopped
// between the store and Redis finishes it, and answers the order as the store then holds it,
// reason operator, as the first compensation's answer does. It answered the row read before
// MarkRefunded, reason empty: the units not back yet, when this call had just given them back.
func TestCompensateAnswersAHalfDoneRefundFinished(t *testing.T) {
	e := newEnv(t, 10, 5)
	ann := e.reserve(t, 1, time.Hour)[0]
	e.confirm(t, []events.Event{ann})
	if _, _, err := e.st.RefundOrder(e.ctx, ann.OrderID); err != nil { // Redis's half never ran
		t.Fatal(err)
	}
	o, err := e.operator().Resolver.Compensate(e.ctx, ann.OrderID)
	if err != nil || o.Status != events.Refunded || o.Reason != events.ReasonOperator {
		t.Errorf("Compensate of a half-done refund: %q (%q) %v, want refunded (%q)", o.Status, o.Reason, err, events.ReasonOperator)
	}
	if stored, err := e.st.Order(e.ctx, ann.OrderID); err != nil || stored.Reason != o.Reason {
		t.Errorf("the store holds reason %q %v, the answer said %q", stored.Reason, err, o.Reason)
	}
	if res, err := e.r.Reservation(e.ctx, ann.OrderID); err != nil || res.State != lua.StateRefunded {
		t.Errorf("reservation %+v %v, want refunded", res, err)
	}
}
