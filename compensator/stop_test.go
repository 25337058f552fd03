package compensator_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// stall holds every call that reaches it until resume is closed, telling held what the first
// one held; each is then let through with the context it was given. With resume nil it never
// lets go: only the call's context ends the wait.
type stall struct {
	held   chan string
	resume chan struct{}
	once   sync.Once
}

func newStall(resume chan struct{}) *stall {
	return &stall{held: make(chan string, 1), resume: resume}
}

// wait holds the call about id, and returns why its context ended if that ends the wait.
func (s *stall) wait(ctx context.Context, id string) error {
	s.once.Do(func() { s.held <- id })
	select {
	case <-s.resume:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// stallingStore holds every order a resolver fails in its store write on its stall.
type stallingStore struct {
	compensator.Store
	*stall
}

func newStallingStore(st compensator.Store, resume chan struct{}) *stallingStore {
	return &stallingStore{Store: st, stall: newStall(resume)}
}

func (s *stallingStore) FailOrderFenced(ctx context.Context, e events.Event, reason string, f store.Fence) (store.Order, error) {
	if err := s.wait(ctx, e.OrderID); err != nil {
		return store.Order{}, err
	}
	return s.Store.FailOrderFenced(ctx, e, reason, f)
}

// stallingSnapshots holds a rebuild on its stall where it reads a campaign from the store: after
// its freeze, before its restore.
type stallingSnapshots struct {
	compensator.Snapshotter
	*stall
}

func (s stallingSnapshots) WhileHeld(ctx context.Context, campaign string, endedSince time.Time, fn func(store.Held) error) error {
	if err := s.wait(ctx, campaign); err != nil {
		return err
	}
	return s.Snapshotter.WhileHeld(ctx, campaign, endedSince, fn)
}

// stopWhileHeld runs c until s holds a call, stops it, closes s's resume (if not nil) and
// returns what s held first and what Run returned.
func stopWhileHeld(t *testing.T, c *compensator.Compensator, s *stall) (string, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var held string
	select {
	case held = <-s.held:
	case <-time.After(time.Minute): // not a measurement: a hang guard
		cancel()
		<-done
		t.Fatal("the compensator never reached the stalled call")
	}
	cancel() // SIGTERM
	if s.resume != nil {
		close(s.resume)
	}
	select {
	case err := <-done:
		return held, err
	case <-time.After(time.Minute): // not a measurement: the drain is bounded
		t.Fatal("Run still running a minute after its stop")
	}
	return "", nil
}

// TestStopFinishesTheSweepInHand: a compensator stopped (SIGTERM) while its sweeper resolves
// overdue reservations finishes the resolutions in hand (the store's failed row, the units back
// in Redis, the announcement), starts no other, lets its lease go and returns nil. The stop's
// context went down into the store, Redis and Kafka calls, so the resolutions were cut in the
// middle, for the next sweep to redo. The sweeper resolves compensator.SweepParallel orders
// at once, and the store holds every one until after the stop: those are in hand, and the
// rest of the page must be left to the next sweep.
func TestStopFinishesTheSweepInHand(t *testing.T) {
	e := newEnv(t, 100, 10)
	evs := e.reserve(t, compensator.SweepParallel+4, time.Millisecond)
	time.Sleep(5 * time.Millisecond) // past their deadlines
	c := e.compensator(t, compensator.Config{GuardInterval: time.Hour})
	st := newStallingStore(e.st, make(chan struct{}))
	c.Store = st
	held, err := stopWhileHeld(t, c, st.stall)
	if err != nil {
		t.Errorf("Run after a stop: %v, want nil", err)
	}
	c.Close() // delivers the announcements
	announced := e.announced(t)
	finished := 0
	for _, ev := range evs {
		o, oerr := e.st.Order(e.ctx, ev.OrderID)
		res, err := e.r.Reservation(e.ctx, ev.OrderID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case oerr == nil && o.Status == events.Failed && res.State == lua.StateReleased && slices.Equal(announced[ev.OrderID], []events.Type{events.OrderFailed}):
			finished++ // in hand at the stop, and finished
		case events.ErrorCode(oerr) == events.OrderNotFound && res.State == lua.StatePending && len(announced[ev.OrderID]) == 0:
			if ev.OrderID == held {
				t.Errorf("the order the store held at the stop was left unfinished")
			} // else not started before the stop: left to the next sweep
		default:
			t.Errorf("order %s half resolved: store %s (%v), redis %s, announced %v; want failed, released, [OrderFailed], or untouched",
				ev.OrderID, o.Status, oerr, res.State, announced[ev.OrderID])
		}
	}
	if finished == 0 || finished > compensator.SweepParallel {
		t.Errorf("%d of %d orders resolved across the stop; want those in hand, 1 to %d", finished, len(evs), compensator.SweepParallel)
	}
	lock := "seckill:{lock:" + e.topics.Prefix + ".sweeper}"
	if n := e.r.Client().Exists(e.ctx, lock).Val(); n != 0 {
		t.Errorf("the sweeper's lease is still held after the stop")
	}
}

// TestStopGivesUpOnAStuckSweep: the drain of a stop is bounded: a store that never answers
// holds the order in hand only until DrainTimeout, then the compensator warns that it gave up
// and returns nil; the next sweep resolves the order.
func TestStopGivesUpOnAStuckSweep(t *testing.T) {
	e := newEnv(t, 100, 10)
	e.reserve(t, 1, time.Millisecond)
	time.Sleep(5 * time.Millisecond) // past its deadline
	var logs bytes.Buffer
	c := e.compensator(t, compensator.Config{GuardInterval: time.Hour, DrainTimeout: time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	st := newStallingStore(e.st, nil)
	c.Store = st
	if _, err := stopWhileHeld(t, c, st.stall); err != nil {
		t.Errorf("Run after a drain that gave up: %v, want nil", err)
	}
	if !strings.Contains(logs.String(), `"level":"WARN","msg":"stopping: gave up on the work in hand"`) {
		t.Errorf("no warning that the stop gave up on the stuck order:\n%s", logs.String())
	}
}

// TestStopFinishesTheDeadLetterInHand: a compensator stopped while it resolves a dead letter
// finishes it (failed, units back, announced) and commits it, so no other compensator takes it
// again, and returns nil.
func TestStopFinishesTheDeadLetterInHand(t *testing.T) {
	e := newEnv(t, 100, 10)
	ev := e.reserve(t, 1, time.Hour)[0]
	cl, err := events.NewClient(e.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	src, err := events.Record(e.topics.Requested, ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(e.ctx, events.DeadLetter(e.topics.DLQ, src, events.ReasonPoison)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c := e.compensator(t, compensator.Config{GuardInterval: time.Hour})
	st := newStallingStore(e.st, make(chan struct{}))
	c.Store = st
	if _, err := stopWhileHeld(t, c, st.stall); err != nil {
		t.Errorf("Run after a stop: %v, want nil", err)
	}
	c.Close() // delivers the announcements
	if states := e.check(t, []events.Event{ev}); states[events.Failed] != 1 {
		t.Errorf("the dead letter in hand at the stop: %v, want its order failed", states)
	}
	if got := e.announced(t)[ev.OrderID]; !slices.Equal(got, []events.Type{events.OrderFailed}) {
		t.Errorf("announced %v, want [OrderFailed]", got)
	}
	lag, err := events.Lag(e.ctx, kadm.NewClient(cl), e.topics.DLQ, e.topics.CompensatorGroup())
	if err != nil || lag != 0 {
		t.Errorf("dead letters not committed after the stop: %d, %v; want 0", lag, err)
	}
}

// TestStopFinishesTheRebuildInHand: a compensator stopped (SIGTERM) while its guard rebuilds a
// campaign Redis lost, after the freeze and before the restore, finishes the rebuild: the
// campaign is back on sale with the store's remaining stock, and Run returns nil. The stop's
// context went down into the rebuild, which stopped there and left the campaign frozen: no sale
// until another compensator's guard, or this one restarted, rebuilt it.
func TestStopFinishesTheRebuildInHand(t *testing.T) {
	e := newEnv(t, 10, 5)
	evs := e.reserve(t, 2, time.Hour)
	e.confirm(t, evs)
	e.loseRedis(t)
	c := e.compensator(t, compensator.Config{GuardInterval: time.Hour, RebuildGrace: time.Millisecond})
	st := stallingSnapshots{Snapshotter: e.st, stall: newStall(make(chan struct{}))}
	compensator.SetSnapshots(c, st)
	if _, err := stopWhileHeld(t, c, st.stall); err != nil {
		t.Errorf("Run after a stop: %v, want nil", err)
	}
	e.checkRestored(t, evs, "a stop mid-rebuild")
}

// TestStopGivesUpOnAStuckRebuild: the rebuild's drain is bounded too: a rebuild that waits on a
// store that never answers, or a RebuildGrace longer than DrainTimeout, holds the stop only
// until DrainTimeout; then the compensator warns that it gave up on it and returns nil (the
// campaign stays frozen, for the next guard round of any compensator).
func TestStopGivesUpOnAStuckRebuild(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
		// inHand returns the stall that tells when the rebuild is where the stop is to find it.
		inHand func(t *testing.T, e *env, c *compensator.Compensator) *stall
	}{
		{"store never answers", time.Millisecond, func(t *testing.T, e *env, c *compensator.Compensator) *stall {
			st := stallingSnapshots{Snapshotter: e.st, stall: newStall(nil)}
			compensator.SetSnapshots(c, st)
			return st.stall
		}},
		{"grace outlasts the drain", time.Hour, func(t *testing.T, e *env, c *compensator.Compensator) *stall {
			return e.onceFrozen(t)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 10, 5)
			e.loseRedis(t)
			var logs bytes.Buffer
			c := e.compensator(t, compensator.Config{GuardInterval: time.Hour, RebuildGrace: tc.grace,
				DrainTimeout: time.Millisecond, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			if _, err := stopWhileHeld(t, c, tc.inHand(t, e, c)); err != nil {
				t.Errorf("Run after a drain that gave up: %v, want nil", err)
			}
			if !strings.Contains(logs.String(), `"level":"WARN","msg":"stopping: gave up on the work in hand","what":"the redis rebuild in hand"`) {
				t.Errorf("no warning that the stop gave up on the stuck rebuild:\n%s", logs.String())
			}
		})
	}
}

// onceFrozen returns a stall that holds nothing and tells held once Redis holds the campaign
// frozen: a rebuild is then in its RebuildGrace, or on its way there.
func (e *env) onceFrozen(t *testing.T) *stall {
	t.Helper()
	s := newStall(nil)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for {
			if frozen, _ := e.r.Client().HExists(ctx, lua.KeysOf(e.campaign).Meta, "frozen").Result(); frozen {
				s.held <- e.campaign
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return s
}
