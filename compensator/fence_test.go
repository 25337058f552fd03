package compensator_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
)

// TestSweeperAfterRedisLostItsFence: the sweeper's fencing tokens came from a counter in Redis
// beside its lease, but the store keeps the latest token it has seen for good. When Redis lost
// its data (a wipe, a restart without the last writes, `seckill dev` on a fresh miniredis over
// the same SQLite file), the counter started again at 1, below the store's, and the only sweeper
// was refused as stale at its first write; it dropped the lease and took it again one token
// higher, and again: with the store at 1000, nothing was swept for some 1000 retries (about 10
// minutes at the default interval), and I5 (every 202 ends within deadline + one sweep
// interval) broke. The store issues the tokens now, and a Redis that forgot changes nothing.
func TestSweeperAfterRedisLostItsFence(t *testing.T) {
	e := newEnv(t, 100, 10)
	name := e.topics.Prefix + ".sweeper"

	// A deployment that has run a while: its last sweeper released an expired reservation under
	// token 1000, which the store recorded. This test's Redis has never seen the lock, as one
	// that lost its data.
	old := e.reserve(t, 1, time.Millisecond)
	time.Sleep(10 * time.Millisecond) // past its deadline
	res := &compensator.Resolver{Store: e.st, Redis: e.r, Producer: nopProducer{}, Results: e.topics.Results}
	if _, err := res.FailFenced(e.ctx, old[0], events.ReasonExpired, "sweeper", store.Fence{Name: name, Token: 1000}); err != nil {
		t.Fatal(err)
	}

	// One compensator, sweeping every 200ms; a reservation whose event never reached Kafka.
	const interval = 200 * time.Millisecond
	evs := e.reserve(t, 1, 100*time.Millisecond)
	ctx, cancel := context.WithCancel(e.ctx)
	c := e.compensator(t, compensator.Config{SweepInterval: interval, GuardInterval: time.Hour})
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Refused, the sweeper never releases it (the bug took some 10 minutes to mend itself);
	// I5's deadline + interval + a lease (the minimum, 1s) is 1.3 s, well inside the bound,
	// which leaves room for a loaded machine's slow start (this takes 0.45 s alone).
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := e.r.Reservation(e.ctx, evs[0].OrderID)
		if err != nil {
			t.Fatal(err)
		}
		if r.State == "released" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("reservation still %s 20s after its deadline: the only sweeper is refused as stale (the store's token is 1000)", r.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSweeperTokenIssuedAfterItsLeasePassedOn: the store issues a token after the lease is
// taken, in a second step. A compensator paused between the two steps past its lease wakes up
// with the latest token while another holds the lease and took its token meanwhile: it must not
// sweep with it. (The other is refused at its first write, lets go, and the lease is taken
// again with a later token: a lost turn, never two sweepers.)
func TestSweeperTokenIssuedAfterItsLeasePassedOn(t *testing.T) {
	e := newEnv(t, 100, 10)
	name := e.topics.Prefix + ".sweeper"
	lockKey := "seckill:{lock:" + name + "}"
	t.Cleanup(func() { e.r.Client().Del(context.Background(), lockKey) })
	evs := e.reserve(t, 1, time.Millisecond)

	c := e.compensator(t, compensator.Config{SweepInterval: 200 * time.Millisecond, GuardInterval: time.Hour})
	var once, issuedOnce sync.Once
	issued := make(chan struct{}) // the compensator holds its token
	compensator.SetFencer(c, fencerFunc(func(ctx context.Context, name string, floor int64) (store.Fence, error) {
		defer issuedOnce.Do(func() { close(issued) })
		once.Do(func() {
			// The pause: the lease runs out, and a rival takes it and its token. The rival
			// holds on for the rest of the test, as it would while sweeping.
			e.r.Client().Del(ctx, lockKey)
			lock, err := e.r.TryLock(ctx, name, time.Minute)
			if err != nil {
				t.Fatalf("rival's lease: %v", err)
			}
			if _, err := e.st.IssueFence(ctx, name, lock.Count); err != nil {
				t.Errorf("rival's token: %v", err)
			}
		})
		return e.st.IssueFence(ctx, name, floor)
	}))
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Counted from the token, not from the start: a compensator slow to start (a loaded
	// machine) had not swept in any case a second in, and the check passed without the pause.
	select {
	case <-issued:
	case <-time.After(30 * time.Second):
		t.Fatal("the compensator did not ask for a fencing token in 30s")
	}
	time.Sleep(time.Second) // five sweep intervals
	if r, err := e.r.Reservation(e.ctx, evs[0].OrderID); err != nil || r.State != "pending" {
		t.Errorf("reservation %s, %v: the compensator swept without the lease", r.State, err)
	}
}

type fencerFunc func(ctx context.Context, name string, floor int64) (store.Fence, error)

func (f fencerFunc) IssueFence(ctx context.Context, name string, floor int64) (store.Fence, error) {
	return f(ctx, name, floor)
}

// TestSweeperLeaseHeldIsExported: the lease holder says so in seckill_sweeper_lease_held, and
// lets go of it when it stops. Every role exports the compensator's gauges (one binary), so
// seckill_reservations_overdue reads 0 on the apis and consumers with every compensator
// down, and nothing paged while no sweep ran: SeckillNoSweeper alerts on this sum instead.
func TestSweeperLeaseHeldIsExported(t *testing.T) {
	e := newEnv(t, 10, 2)
	before := compensator.SweeperLeaseHeld()
	ctx, cancel := context.WithCancel(e.ctx)
	c := e.compensator(t, compensator.Config{SweepInterval: 200 * time.Millisecond, GuardInterval: time.Hour})
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	for deadline := time.Now().Add(30 * time.Second); compensator.SweeperLeaseHeld() != before+1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("seckill_sweeper_lease_held 30s after the only compensator started: %v; want %v", compensator.SweeperLeaseHeld(), before+1)
		}
	}
	cancel()
	<-done
	if got := compensator.SweeperLeaseHeld(); got != before {
		t.Errorf("seckill_sweeper_lease_held after the compensator stopped: %v; want %v", got, before)
	}
}

// TestSessionTimeoutTheBrokersRefuseStopsRun: the compensator's dead-letter group had a fixed
// 6 s session, and brokers whose group.min.session.timeout.ms is above it refused every join
// with a bare INVALID_SESSION_TIMEOUT and no setting to change. --session-timeout sets it, as
// the consumer's does, and the error names it (kfake's minimum is Kafka's default, 6 s).
func TestSessionTimeoutTheBrokersRefuseStopsRun(t *testing.T) {
	e := newEnv(t, 10, 2)
	c := e.compensator(t, compensator.Config{SessionTimeout: 2 * time.Second, GuardInterval: time.Hour})
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	err := c.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run with a session timeout the brokers refuse went on for 10s (returned %v)", err)
	}
	if err == nil || !strings.Contains(err.Error(), "session timeout 2s (--session-timeout)") || !strings.Contains(err.Error(), "INVALID_SESSION_TIMEOUT") {
		t.Fatalf("Run: %v, want an error naming --session-timeout 2s and INVALID_SESSION_TIMEOUT", err)
	}
}
