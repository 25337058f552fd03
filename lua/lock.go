package lua

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seckill/seckill/events"
)

// Lock is a lease lock held in Redis: one holder at a time, for a lease that its holder renews
// while it works. Each acquisition gets a fencing token larger than every earlier one, which the
// holder passes with its writes (store.FailOrderFenced) so that a holder that was paused past its
// lease, and so may have been replaced, cannot act.
type Lock struct {
	r     *Redis
	key   string
	fence string
	token string
	lease time.Duration
	Fence int64 // the fencing token of this acquisition
}

// ErrLockHeld is returned by TryLock when another holder has the lock.
var ErrLockHeld = errors.New("lock held by another holder")

// TryLock takes the lock name for lease, or returns ErrLockHeld.
func (r *Redis) TryLock(ctx context.Context, name string, lease time.Duration) (*Lock, error) {
	base := "seckill:{lock:" + name + "}"
	l := &Lock{r: r, key: base, fence: base + ":fence", token: events.NewID(), lease: lease}
	fence, err := lockAcquire.Run(ctx, r.rdb, []string{l.key, l.fence}, l.token, lease.Milliseconds()).Int64()
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	if fence == 0 {
		return nil, ErrLockHeld
	}
	l.Fence = fence
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
// and cancels fn's context as soon as a renewal fails or finds the lock gone. The lock is
// released when fn returns.
func (l *Lock) Hold(ctx context.Context, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(l.lease / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			ok, err := l.Renew(ctx)
			if err == nil && !ok {
				err = errors.New("lease lost")
			}
			if err != nil {
				cancel(fmt.Errorf("lock %s: %w", l.key, err))
				return
			}
		}
	}()
	err := fn(ctx)
	cancel(nil)
	<-done
	if rerr := l.Release(context.WithoutCancel(ctx)); err == nil {
		err = rerr
	}
	return err
}
