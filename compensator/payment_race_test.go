package compensator_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// errKilled is a step that a process killed there never finished, or whose caller never heard
// that it did.
var errKilled = errors.New("killed between two steps")

// killed runs step, as a process that may be killed with -9 just before it or just after it
// (the step done, the rest of the resolution never run): two in ten calls each way.
func killed[T any](step func() (T, error)) (T, error) {
	var zero T
	switch n := rand.IntN(10); {
	case n < 2:
		return zero, errKilled
	case n < 4:
		if _, err := step(); err != nil {
			return zero, err
		}
		return zero, errKilled
	}
	return step()
}

// killedRedis is Redis as the resolutions of processes killed between their steps see it.
type killedRedis struct{ r *lua.Redis }

func (k killedRedis) Reservation(ctx context.Context, id string) (lua.Reservation, error) {
	return k.r.Reservation(ctx, id)
}
func (k killedRedis) Release(ctx context.Context, id string) (lua.Outcome, error) {
	return killed(func() (lua.Outcome, error) { return k.r.Release(ctx, id) })
}
func (k killedRedis) Confirm(ctx context.Context, id string) (lua.Outcome, error) {
	return killed(func() (lua.Outcome, error) { return k.r.Confirm(ctx, id) })
}
func (k killedRedis) Refund(ctx context.Context, id string) (lua.Outcome, error) {
	return killed(func() (lua.Outcome, error) { return k.r.Refund(ctx, id) })
}
func (k killedRedis) Expire(ctx context.Context, id string) (lua.Outcome, error) {
	return killed(func() (lua.Outcome, error) { return k.r.Expire(ctx, id) })
}

// killedStore is the store as the resolutions of processes killed between their steps see it.
type killedStore struct{ st *store.Store }

func (k killedStore) Order(ctx context.Context, id string) (store.Order, error) {
	return k.st.Order(ctx, id)
}
func (k killedStore) FailOrderFenced(ctx context.Context, e events.Event, reason string, f store.Fence) (store.Order, error) {
	return killed(func() (store.Order, error) { return k.st.FailOrderFenced(ctx, e, reason, f) })
}
func (k killedStore) RefundOrder(ctx context.Context, id string) (store.Order, bool, error) {
	var refunded bool
	o, err := killed(func() (o store.Order, err error) { o, refunded, err = k.st.RefundOrder(ctx, id); return o, err })
	return o, refunded && err == nil, err
}
func (k killedStore) PayOrder(ctx context.Context, id, payment string, now time.Time) (store.Order, bool, error) {
	var changed bool
	o, err := killed(func() (o store.Order, err error) {
		o, changed, err = k.st.PayOrder(ctx, id, payment, now)
		return o, err
	})
	return o, changed && err == nil, err
}
func (k killedStore) ExpireOrder(ctx context.Context, id string, now time.Time) (store.Order, error) {
	return killed(func() (store.Order, error) { return k.st.ExpireOrder(ctx, id, now) })
}
func (k killedStore) MarkUnpaid(ctx context.Context, id string) error {
	_, err := killed(func() (struct{}, error) { return struct{}{}, k.st.MarkUnpaid(ctx, id) })
	return err
}
func (k killedStore) MarkRefunded(ctx context.Context, id string) error {
	_, err := killed(func() (struct{}, error) { return struct{}{}, k.st.MarkRefunded(ctx, id) })
	return err
}
func (k killedStore) MarkPaidAnnounced(ctx context.Context, id string) error {
	_, err := killed(func() (struct{}, error) { return struct{}{}, k.st.MarkPaidAnnounced(ctx, id) })
	return err
}

// lossyKafka refuses one announcement in five.
type lossyKafka struct{}

func (lossyKafka) TryProduce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	if rand.IntN(5) == 0 {
		promise(r, errKilled)
		return
	}
	promise(r, nil)
}

// TestPaymentWindowRacesAndKills backs what a review found sound: with many processes at the
// same orders at once (the consumer, dead letters, an operator's compensations, one and bulk,
// payments, expiries, three sweepers), and each of them killed between any two of its steps
// now and then, every order of a campaign with a payment window ends once, the same in the
// store and in Redis: paid, refunded, expired or failed, its units given back exactly once,
// its buyer's count with them. A payment the store took is never expired (its units never back
// on sale while it is paid), and a refund or a payment answered is what the order ends as,
// unless a refund came after the payment. It fails if a rollback could give units back twice or
// never, or if a payment and an expiry could both win.
func TestPaymentWindowRacesAndKills(t *testing.T) {
	e := newEnvPaying(t, 1000, 10, 400*time.Millisecond)
	evs := e.reserve(t, 150, 300*time.Millisecond)
	dying := func() *compensator.Resolver {
		return &compensator.Resolver{Store: killedStore{e.st}, Redis: killedRedis{e.r}, Producer: lossyKafka{}, Results: e.topics.Results}
	}
	res := dying()
	op := &compensator.Operator{Resolver: dying(), Campaigns: e.st, Sales: e.r}
	comp := e.compensator(t, compensator.Config{})
	comp.Resolver = dying()

	var mu sync.Mutex
	paid, refunded := map[string]bool{}, map[string]bool{}
	var wg sync.WaitGroup
	later := func(f func()) {
		wg.Go(func() { time.Sleep(time.Duration(rand.IntN(900)) * time.Millisecond); f() })
	}
	for i, ev := range evs {
		if i%4 != 3 {
			later(func() { // the consumer, killed between the store's commit and Redis now and then
				out, err := e.st.ConfirmOrders(e.ctx, []events.Event{ev})
				if err == nil && (out[0].Status == events.Confirmed || out[0].Status == events.Paid) && rand.IntN(4) > 0 {
					if _, err := e.r.Confirm(e.ctx, ev.OrderID); err != nil {
						t.Error(err)
					}
				}
			})
		}
		if i%5 == 0 {
			later(func() { res.Fail(e.ctx, ev, events.ReasonStoreSoldOut, "dlq") })
		}
		if i%3 == 0 {
			later(func() {
				if o, err := res.Compensate(e.ctx, ev.OrderID); err == nil && o.Status == events.Refunded {
					mu.Lock()
					refunded[ev.OrderID] = true
					mu.Unlock()
				}
			})
		}
		for p := range 2 {
			later(func() {
				// Answered paid, or paid and not announced yet (503): the store took it.
				if o, err := res.Pay(e.ctx, ev.OrderID, fmt.Sprintf("pay-%d-%d", i, p)); o.Status == events.Paid &&
					(err == nil || events.ErrorCode(err) == events.Unavailable) {
					mu.Lock()
					paid[ev.OrderID] = true
					mu.Unlock()
				}
			})
			later(func() { res.Expire(e.ctx, ev.OrderID, time.Now()) })
		}
	}
	for i := range 6 {
		later(func() { op.CompensateCampaign(e.ctx, e.campaign, i%2 == 0, i%3 == 0, nil) })
	}
	for range 3 {
		wg.Go(func() {
			for end := time.Now().Add(1200 * time.Millisecond); time.Now().Before(end); {
				comp.SweepOnce(e.ctx, store.Fence{})
			}
		})
	}
	wg.Wait()

	// A sweeper no one kills finishes what the others left, past every deadline and pay_by.
	comp.Resolver = &compensator.Resolver{Store: e.st, Redis: e.r, Producer: nopProducer{}, Results: e.topics.Results}
	time.Sleep(500 * time.Millisecond)
	for range 2 {
		if _, err := comp.SweepOnce(e.ctx, store.Fence{}); err != nil {
			t.Fatal(err)
		}
	}

	inRedis := map[events.Status]string{events.Paid: lua.StateConfirmed, events.Refunded: lua.StateRefunded,
		events.Expired: lua.StateExpired, events.Failed: lua.StateReleased}
	states := map[events.Status]int{}
	holds := map[string]int64{}
	for _, ev := range evs {
		o, err := e.st.Order(e.ctx, ev.OrderID)
		if err != nil {
			t.Errorf("order %s: %v", ev.OrderID, err)
			continue
		}
		r, err := e.r.Reservation(e.ctx, ev.OrderID)
		if err != nil {
			t.Fatal(err)
		}
		states[o.Status]++
		if want, ok := inRedis[o.Status]; !ok || r.State != want || (o.Reason == "" && o.Status != events.Paid) {
			t.Errorf("order %s ended %s (reason %q) in the store and %s in Redis", ev.OrderID, o.Status, o.Reason, r.State)
		}
		if paid[ev.OrderID] && o.Status != events.Paid && o.Status != events.Refunded {
			t.Errorf("order %s was paid, and ended %s", ev.OrderID, o.Status)
		}
		if refunded[ev.OrderID] && o.Status != events.Refunded {
			t.Errorf("order %s was answered refunded, and ended %s", ev.OrderID, o.Status)
		}
		if o.Status == events.Paid {
			holds[o.UserID] += o.Quantity
		}
	}
	t.Logf("final states: %v", states)
	e.wantConserved(t, holds, "paid")
	for _, s := range []events.Status{events.Paid, events.Expired, events.Refunded, events.Failed} {
		if states[s] == 0 {
			t.Errorf("no order ended %s: the race did not happen", s)
		}
	}
}
