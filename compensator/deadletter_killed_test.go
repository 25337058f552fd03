package compensator_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// dyingStore fails orders until the first one it stores failed, and from then on does nothing,
// as a compensator killed right after that store step, before Redis gave the order's units
// back.
type dyingStore struct {
	compensator.Store
	mu   sync.Mutex
	dead bool
	died chan string
}

func (s *dyingStore) FailOrderFenced(ctx context.Context, e events.Event, reason string, f store.Fence) (store.Order, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return store.Order{}, errKilled
	}
	o, err := s.Store.FailOrderFenced(ctx, e, reason, f)
	if err != nil || o.Status != events.Failed {
		return o, err
	}
	s.dead = true
	s.died <- e.OrderID
	return store.Order{}, errKilled
}

// TestDeadLettersOfACompensatorThatDied backs what a review found sound: a compensator that
// dies in the middle of a batch of dead letters, after failing an order in the store and before
// Redis gave its units back, has committed none of the batch, so the compensator that takes its
// partitions resolves every letter again: the half-done order's units come back once, and the
// orders the consumer confirmed meanwhile stay confirmed. It fails if a batch's offsets could be
// committed past a letter not resolved to its end (that order would stay pending in Redis, its
// units held, with its row failed in the store).
func TestDeadLettersOfACompensatorThatDied(t *testing.T) {
	e := newEnv(t, 100, 10)
	evs := e.reserve(t, 20, time.Hour)
	e.confirm(t, evs[:5]) // stored by a redelivery after the consumer dead-lettered them first
	cl, err := events.NewClient(e.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, ev := range evs {
		src, err := events.Record(e.topics.Requested, ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(e.ctx, events.DeadLetter(e.topics.DLQ, src, events.ReasonStoreSoldOut)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	first := e.compensator(t, compensator.Config{GuardInterval: time.Hour, SweepInterval: time.Hour, DrainTimeout: 200 * time.Millisecond})
	dying := &dyingStore{Store: e.st, died: make(chan string, 1)}
	first.Store = dying
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	var half string
	select {
	case half = <-dying.died:
	case <-time.After(time.Minute): // a hang guard
		cancel()
		<-done
		t.Fatal("the first compensator never failed an order")
	}
	cancel() // what remains of it stops, its batch not committed
	<-done
	first.Close()
	if o, err := e.st.Order(e.ctx, half); err != nil || o.Status != events.Failed {
		t.Fatalf("the order failed before the death: %+v %v", o, err)
	}
	if res, err := e.r.Reservation(e.ctx, half); err != nil || res.State != lua.StatePending {
		t.Fatalf("the order failed before the death is %q in Redis, %v; want it still pending", res.State, err)
	}

	e.resolveDeadLetters(t, cl) // the compensator that takes the partitions, until none is left

	states := e.check(t, evs)
	if states[events.Confirmed] != 5 || states[events.Failed] != 15 {
		t.Errorf("final states %v, want 5 confirmed and 15 failed", states)
	}
}
