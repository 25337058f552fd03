package compensator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
)

// unackedProducer is a Kafka client that takes every record and never hears back from Kafka:
// the compensator's state when it is killed with -9 before its records reached Kafka.
type unackedProducer struct{}

func (unackedProducer) TryProduce(context.Context, *kgo.Record, func(*kgo.Record, error)) {}

// toAnnounce returns the orders of e the sweeper still has to announce as given back: expired
// or refunded in the store, not yet marked with their units back.
func (e *env) toAnnounce(t *testing.T) map[string]bool {
	t.Helper()
	// ExpiringOrders at a time with every pay_by of the tests far ahead lists only the
	// expired orders left to finish.
	expiring, err := e.st.ExpiringOrders(e.ctx, time.Now(), store.ExpiryKey{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	refunding, err := e.st.Refunding(e.ctx, e.campaign)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, o := range append(expiring, refunding...) {
		ids[o.OrderID] = true
	}
	return ids
}

// TestGivenBackAnnouncedOnceKafkaHasIt: an order expired or refunded is announced (OrderExpired,
// OrderRefunded with the payment to give back) to a Kafka that refuses the record, or never
// takes it before the compensator dies. The store used to be told the order was finished all
// the same, so nothing announced it again and the payer's money stayed taken. The call must say
// the announcement did not reach Kafka, and the order stay on the sweeper's list until a sweep
// has it announced.
func TestGivenBackAnnouncedOnceKafkaHasIt(t *testing.T) {
	for _, kafka := range []struct {
		name     string
		producer compensator.Producer
	}{
		{"refused", refusingProducer{}},
		{"never acknowledged", unackedProducer{}},
	} {
		for _, give := range []struct {
			name string
			t    events.Type
			pay  string // the order's payment id, "" to leave it unpaid
			back func(c *compensator.Compensator, e *env, id string) (store.Order, error)
		}{
			{"expired", events.OrderExpired, "", func(c *compensator.Compensator, e *env, id string) (store.Order, error) {
				return c.Expire(e.ctx, id, time.Now().Add(2*time.Hour)) // unpaid past its window
			}},
			{"refunded", events.OrderRefunded, "pay-1", func(c *compensator.Compensator, e *env, id string) (store.Order, error) {
				return c.Compensate(e.ctx, id)
			}},
		} {
			t.Run(kafka.name+"/"+give.name, func(t *testing.T) {
				t.Parallel()
				e := newEnvPaying(t, 10, 3, time.Hour)
				ev := e.reserve(t, 1, time.Hour)[0]
				e.confirm(t, []events.Event{ev})
				c := e.compensator(t, compensator.Config{})
				if give.pay != "" {
					c.Producer = nopProducer{}
					if _, err := c.Pay(e.ctx, ev.OrderID, give.pay); err != nil {
						t.Fatal(err)
					}
				}
				c.Producer = kafka.producer
				o, err := give.back(c, e, ev.OrderID)
				if events.ErrorCode(err) != events.Unavailable {
					t.Errorf("%s while Kafka did not take its %s: %+v, %v; want unavailable", give.name, give.t, o, err)
				}
				if !e.toAnnounce(t)[ev.OrderID] {
					t.Fatalf("order %s %s, its %s not in Kafka, is off the sweeper's list: nothing announces it again", ev.OrderID, give.name, give.t)
				}
				recorded := &recordingProducer{}
				c.Producer = recorded
				if _, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil {
					t.Fatal(err)
				}
				if got := recorded.announcements(give.t, ev.OrderID); len(got) != 1 || got[0].PaymentID != give.pay {
					t.Errorf("the sweep after Kafka came back announced %+v; want one %s with payment id %q", got, give.t, give.pay)
				}
				if left := e.toAnnounce(t); len(left) != 0 {
					t.Errorf("after the sweep, still to announce: %v", left)
				}
				if remaining, _, err := e.r.Remaining(e.ctx, e.campaign); err != nil || remaining != e.stock {
					t.Errorf("remaining %d, %v after the sweep; want the order's units back once: %d", remaining, err, e.stock)
				}
			})
		}
	}
}

// TestSweepLeavesAnnouncementsToTheNextWhileKafkaIsDown: once Kafka has not taken one
// announcement of a sweep, the sweep leaves its other refunds and expiries to the next one.
// Each would wait for Kafka in turn, up to announceTimeout: a page of them while Kafka is down
// would hold the sweep, and the releases of the next one, for over an hour. The sweeper
// resolves compensator.SweepParallel orders at once, so that many may be handed to Kafka before
// the first refusal is known; the page holds more of each kind.
func TestSweepLeavesAnnouncementsToTheNextWhileKafkaIsDown(t *testing.T) {
	const refunds = compensator.SweepParallel + 3
	e := newEnvPaying(t, 400, 3, time.Hour)
	evs := e.reserve(t, 2*refunds, time.Hour)
	e.confirm(t, evs)
	// Given back in the store, and Redis and Kafka never heard of it: the sweeper's to-do.
	for i, ev := range evs {
		var err error
		if i < refunds {
			_, _, err = e.st.RefundOrder(e.ctx, ev.OrderID)
		} else {
			_, err = e.st.ExpireOrder(e.ctx, ev.OrderID, time.Now().Add(2*time.Hour))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	c := e.compensator(t, compensator.Config{})
	handed := func(p *recordingProducer) (n int) {
		for _, ev := range evs {
			n += p.announced(events.OrderRefunded, ev.OrderID) + p.announced(events.OrderExpired, ev.OrderID)
		}
		return n
	}
	down := &recordingProducer{refuse: errors.New("kafka refused the record")}
	c.Producer = down
	if _, err := c.SweepOnce(e.ctx, store.Fence{}); events.ErrorCode(err) != events.Unavailable {
		t.Errorf("sweep while Kafka refuses: %v; want unavailable", err)
	}
	if n := handed(down); n < 1 || n > compensator.SweepParallel {
		t.Errorf("the sweep while Kafka refuses handed Kafka %d of %d announcements, want 1 to %d: the rest wait for the next", n, len(evs), compensator.SweepParallel)
	}
	if left := e.toAnnounce(t); len(left) != len(evs) {
		t.Errorf("after the sweep while Kafka refuses, %d orders left to announce, want all %d", len(left), len(evs))
	}
	up := &recordingProducer{}
	c.Producer = up
	if _, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil {
		t.Fatal(err)
	}
	if n := handed(up); n != len(evs) {
		t.Errorf("the sweep after Kafka came back announced %d orders, want each of the %d once", n, len(evs))
	}
	if left := e.toAnnounce(t); len(left) != 0 {
		t.Errorf("after the sweep, still to announce: %v", left)
	}
	if remaining, _, err := e.r.Remaining(e.ctx, e.campaign); err != nil || remaining != e.stock {
		t.Errorf("remaining %d, %v after the sweeps; want every order's units back once: %d", remaining, err, e.stock)
	}
}
