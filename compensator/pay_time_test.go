package compensator_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
)

// payTimeStore is the store, noting the time a payment is checked against its window.
type payTimeStore struct {
	*store.Store
	at time.Time
}

func (s *payTimeStore) PayOrder(ctx context.Context, orderID, paymentID string, now time.Time) (store.Order, bool, error) {
	s.at = now
	return s.Store.PayOrder(ctx, orderID, paymentID, now)
}

// TestPaidAnnouncedAtThePaymentsTime: OrderPaid says when the store took the payment, the time
// it checked the order's window against. A replay after a restore records the payment again as
// of that time (consumer.recordPaid); the event used to take a clock reading of its own after
// the store's commit, which for a payment in the window's last moments is past pay_by, and the
// replay would then find the window closed and the order would be expired though paid.
func TestPaidAnnouncedAtThePaymentsTime(t *testing.T) {
	e := newEnvPaying(t, 3, 3, time.Hour) // room for reserve's up to 3 units
	ev := e.reserve(t, 1, time.Hour)[0]
	e.confirm(t, []events.Event{ev})
	st, kafka := &payTimeStore{Store: e.st}, &recordingProducer{}
	res := &compensator.Resolver{Store: st, Redis: e.r, Producer: kafka, Results: e.topics.Results}
	if o, err := res.Pay(e.ctx, ev.OrderID, "pay-1"); err != nil || o.Status != events.Paid {
		t.Fatalf("pay: %+v %v", o, err)
	}
	if len(kafka.evs) != 1 {
		t.Fatalf("%d events announced, want the one OrderPaid", len(kafka.evs))
	}
	if paid, at := kafka.evs[0], time.UnixMilli(st.at.UnixMilli()); paid.Type != events.OrderPaid || !paid.OccurredAt.Equal(at) {
		t.Errorf("announced %s at %s; want OrderPaid at %s, when the store took the payment",
			paid.Type, paid.OccurredAt.Format(time.RFC3339Nano), at.UTC().Format(time.RFC3339Nano))
	}
}
