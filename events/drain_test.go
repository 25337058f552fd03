package events_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
)

// TestDrain: the work context of a role told to stop outlives the stop by the drain's bound,
// no longer, and says why it ended.
func TestDrain(t *testing.T) {
	const bound = 10 * time.Second
	// drain returns Drain's work context and release for a stop the test cancels, and counts
	// the drain's warnings.
	drain := func(t *testing.T) (stop context.CancelFunc, work context.Context, release func(), warned *atomic.Int32) {
		warned = new(atomic.Int32)
		log := slog.New(&onMessage{substr: "gave up on the work in hand", fn: func() { warned.Add(1) }})
		ctx, stop := context.WithCancel(context.Background())
		work, release = events.Drain(ctx, bound, log, "test work")
		t.Cleanup(func() { stop(); release() })
		return stop, work, release, warned
	}

	t.Run("work outlasts the bound", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			stop, work, _, warned := drain(t)
			stop()
			time.Sleep(bound - time.Nanosecond)
			synctest.Wait()
			if err := work.Err(); err != nil {
				t.Fatalf("work ended %v after the stop, before the bound of %v: %v", bound-time.Nanosecond, bound, err)
			}
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			if cause := context.Cause(work); !errors.Is(cause, events.ErrDrainTimeout) {
				t.Errorf("work at the bound: cause %v, want ErrDrainTimeout", cause)
			}
			if n := warned.Load(); n != 1 {
				t.Errorf("%d warnings that the drain gave up, want 1", n)
			}
		})
	})

	t.Run("work done within the bound", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			stop, work, release, warned := drain(t)
			stop()
			time.Sleep(bound / 2)
			release()
			if cause := context.Cause(work); !errors.Is(cause, context.Canceled) {
				t.Errorf("work after release: cause %v, want context.Canceled", cause)
			}
			time.Sleep(bound)
			synctest.Wait()
			if n := warned.Load(); n != 0 {
				t.Errorf("%d warnings that the drain gave up on work released in time, want 0", n)
			}
		})
	})

	t.Run("never stopped", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, work, release, warned := drain(t)
			time.Sleep(10 * bound)
			synctest.Wait()
			if err := work.Err(); err != nil {
				t.Fatalf("work ended without a stop: %v", err)
			}
			release() // returns once Drain's goroutine is gone, or the bubble would not end
			if work.Err() == nil || warned.Load() != 0 {
				t.Errorf("after release: work %v, %d warnings; want it canceled, no warning", work.Err(), warned.Load())
			}
		})
	})
}

// TestConsumePipelinedDrainHasABound: a stop lets the batch in hand finish, but a persist stuck
// on a dependency that never answers held ConsumePipelined (and so a consumer's or a
// compensator's SIGTERM) for good, as its work context was never canceled. It is canceled the
// drain's bound after the stop, with a warning; the loop returns nil, and the batch it gave up
// on stays uncommitted, to be redelivered.
func TestConsumePipelinedDrainHasABound(t *testing.T) {
	const n = 10
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers)
	group := topics.ConsumerGroup()
	produceN(t, brokers, topics.Requested, n)
	cl, err := events.NewGroupClient(brokers, group, topics.Requested, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var warned atomic.Int32
	log := slog.New(&onMessage{substr: "gave up on the work in hand", fn: func() { warned.Add(1) }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inHand := make(chan struct{}, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- events.ConsumePipelined(ctx, cl, func() int { return 1000 }, time.Millisecond, log, func(work, _ context.Context, _ kgo.Fetches) (func() error, error) {
			inHand <- struct{}{}
			<-work.Done() // a store that never answers: only the call's context ends it
			return nil, context.Cause(work)
		})
	}()
	select {
	case <-inHand:
	case <-time.After(time.Minute): // not a measurement: a hang guard
		t.Fatal("no batch reached persist")
	}
	cancel()
	select {
	case err := <-errc:
		// Closed only once the loop is out of it: a group client's Close waits for the rebalance
		// a loop stuck in a batch holds off.
		defer cl.Close()
		if err != nil {
			t.Errorf("ConsumePipelined after a drain that gave up: %v, want nil (a clean stop)", err)
		}
	case <-time.After(time.Minute): // not a measurement: the drain's bound is a millisecond
		t.Fatal("ConsumePipelined still running a minute after its stop: the stuck batch holds the stop for good")
	}
	if warned.Load() != 1 {
		t.Errorf("%d warnings that the drain gave up, want 1", warned.Load())
	}
	if lag := lagOf(t, brokers, topics.Requested, group); lag != n {
		t.Errorf("lag %d after the batch was given up, want %d: it must be redelivered", lag, n)
	}
}
