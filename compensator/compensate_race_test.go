package compensator_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
)

// confirmingStore is the store as the consumer changes it under the compensator: the first
// read that finds ev's order missing stores it confirmed right after.
type confirmingStore struct {
	*store.Store
	ev    events.Event
	raced bool
}

func (s *confirmingStore) Order(ctx context.Context, id string) (store.Order, error) {
	o, err := s.Store.Order(ctx, id)
	if events.ErrorCode(err) == events.OrderNotFound && !s.raced {
		s.raced = true
		if _, cerr := s.Store.ConfirmOrders(ctx, []events.Event{s.ev}); cerr != nil {
			return o, cerr
		}
	}
	return o, err
}

// TestCompensateRefundsAnOrderConfirmedMeanwhile: an operator compensates an order the store
// does not have yet, and the consumer confirms it between the read and the write. Compensate
// releases a reservation that will not become an order, or refunds a confirmed one: here the
// refund, so the buyer is not left charged (87662b8 returned the confirmed order instead).
func TestCompensateRefundsAnOrderConfirmedMeanwhile(t *testing.T) {
	e := newEnv(t, 10, 5)
	ev := e.reserve(t, 1, time.Hour)[0]
	res := &compensator.Resolver{Store: &confirmingStore{Store: e.st, ev: ev}, Redis: e.r, Producer: nopProducer{}, Results: e.topics.Results}
	o, err := res.Compensate(e.ctx, ev.OrderID)
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != events.Refunded {
		t.Errorf("Compensate of an order the consumer confirmed meanwhile = %s, want refunded", o.Status)
	}
	if remaining, _, err := e.r.Remaining(e.ctx, e.campaign); err != nil || remaining != e.stock {
		t.Errorf("remaining %d, %v after the compensation, want %d", remaining, err, e.stock)
	}
}
