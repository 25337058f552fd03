package lua

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seckill/seckill/events"
)

// Lock is a lease lock held in Redis: one holder at a time, for a lease that its holder renews
// while it works. A holder that was paused past its lease, and so may have been replaced, learns
// it only at its next renewal; where that matters, the holder takes a fencing token from the
// store once it has the lock (store.IssueFence) and passes it with its writes, which the store
// refuses once a later holder has taken one. The tokens are not counted here: Redis may lose a
// counter, and the store keeps what it saw.
type Lock struct {
	r     *Redis
	key   string
	token string
	lease time.Duration
	// taken is when TryLock sent the acquisition: the lease runs from no earlier than that.
	taken time.Time
	// Count is how many times the lock was taken, by Redis's count (which a Redis that lost
	// data restarts): the floor of the fencing token the store issues for this holding.
	Count int64
}

// ErrLockHeld is returned by TryLock when another holder has the lock.
var ErrLockHeld = errors.New("lock held by another holder")

// TryLock takes the lock name for lease, or returns ErrLockHeld.
func (r *Redis) TryLock(ctx context.Context, name string, lease time.Duration) (*Lock, error) {
	l := &Lock{r: r, key: "seckill:{lock:" + name + "}", token: events.NewID(), lease: lease, taken: time.Now()}
	n, err := lockAcquire.Run(ctx, r.rdb, []string{l.key, l.key + ":fence"}, l.token, lease.Milliseconds()).Int64()
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	if n == 0 {
		return nil, ErrLockHeld
	}
	l.Count = n
	return l, nil
}

// Renew extends the lease; false means the lock is no longer this holder's.
func (l *Lock) Renew(ctx context.Context) (bool, error) {
	n, err := lockRenew.Run(ctx, l.r.rdb, []string{l.key}, l.token, l.lease.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("renew lock %s: %w", l.key, err)
	}
	return n == 1, nil
}

// Release frees the lock if this holder still has it.
func (l *Lock) Release(ctx context.Context) error {
	if err := lockRelease.Run(ctx, l.r.rdb, []string{l.key}, l.token).Err(); err != nil {
		return fmt.Errorf("release lock %s: %w", l.key, err)
	}
	return nil
}

// Hold runs fn while keeping the lease alive: a watchdog renews it every third of the lease,
// and cancels fn's context as soon as a renewal finds the lock gone. A renewal that fails (a
// Redis blip, a timeout) says nothing of the lock, which stays this holder's until its lease
// runs out: the watchdog retries it, and cancels fn's context only once the lease it last
// renewed is within a renewal interval of its end. The lock is released when fn returns.
func (l *Lock) Hold(ctx context.Context, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.watch(ctx, cancel)
	}()
	err := fn(ctx)
	cancel(nil)
	<-done
	if rerr := l.Release(context.WithoutCancel(ctx)); err == nil {
		err = rerr
	}
	return err
}

// watch renews the lease until ctx ends, or until the lease can no longer be trusted: it then
// cancels ctx with why (lost). The lease is trusted up to a renewal interval before it would
// lapse, counted from when the renewal that set it was sent. That margin covers a clock that
// runs slower here than Redis's, and the time fn takes to stop once told. A failed renewal is
// retried every twelfth of the lease within that time. A renewal still unanswered where the
// trust ends is not waited for: go-redis applies a context's deadline to a call only with
// ContextTimeoutEnabled, and waits its read timeout (3 s by default) otherwise, so fn is
// told to stop then, and the renewal's end is awaited after, that no call outlives Hold.
func (l *Lock) watch(ctx context.Context, lost context.CancelCauseFunc) {
	type renewal struct {
		ok  bool
		err error
	}
	every := l.lease / 3
	retry := max(l.lease/12, time.Millisecond)
	trusted := l.taken.Add(l.lease - every)
	var failed error // the last renewal's error, if it failed
	untrusted := func(err error) {
		lost(fmt.Errorf("lock %s: no renewal within the lease, less a renewal interval: %w", l.key, err))
	}
	// The first renewal is due a third of the lease after the acquisition, not after Hold: a
	// holder may have worked a while before it called Hold.
	t := time.NewTimer(max(0, time.Until(l.taken.Add(every))))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		if failed != nil && !sent.Before(trusted) {
			untrusted(failed)
			return
		}
		rctx, rcancel := context.WithDeadline(ctx, trusted)
		answered := make(chan renewal, 1)
		go func() {
			ok, err := l.Renew(rctx)
			answered <- renewal{ok, err}
		}()
		var got renewal
		select {
		case got = <-answered:
		case <-rctx.Done():
			if ctx.Err() == nil {
				untrusted(rctx.Err())
			}
			<-answered
			rcancel()
			return
		}
		rcancel()
		switch {
		case ctx.Err() != nil:
			return
		case got.err == nil && !got.ok:
			lost(fmt.Errorf("lock %s: lease lost", l.key))
			return
		case got.err == nil:
			trusted, failed = sent.Add(l.lease-every), nil
			t.Reset(every)
		default:
			failed = got.err
			t.Reset(max(0, min(retry, time.Until(trusted))))
		}
	}
}
