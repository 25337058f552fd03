package lua_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
)

// TestHoldThroughFailedRenewals: a renewal that fails (a Redis blip, a timeout) said nothing of
// the lock, which is still this holder's until its lease runs out. The watchdog cancelled fn at
// the first such failure, with two thirds of the lease left, so a lease holder (the sweeper, a
// rebuild) stopped its work at any transient error. It now retries until the lease it last
// renewed could lapse, less a margin, and only then cancels fn. The bubble's clock is the
// watchdog's; Redis keeps its own, so the real lease outlives the test's.
func TestHoldThroughFailedRenewals(t *testing.T) {
	const lease = 3 * time.Second
	injected := errors.New("connection reset (injected)")

	// hold takes a lock whose renewals go through renew, and runs Hold, late after taking it,
	// with an fn that works until its context ends or stop is closed (at the latest when the
	// test ends). It returns when the lock was taken, Hold's result, and when fn's context ended
	// (nil if it did not).
	hold := func(t *testing.T, late time.Duration, renew func(ctx context.Context) error, stop chan struct{}) (taken time.Time, result <-chan error, ended *atomic.Pointer[time.Time]) {
		rdb := luatest.MustRedis(t)
		name := "test-" + events.NewID()
		key := "seckill:{lock:" + name + "}"
		rdb.AddHook(renewHook{key: key, renew: renew})
		r := lua.New(rdb)
		t.Cleanup(func() { r.Close() })
		ctx := context.Background()
		taken = time.Now()
		l, err := r.TryLock(ctx, name, lease)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rdb.Del(ctx, key, key+":fence") })
		res := make(chan error, 1)
		ended = new(atomic.Pointer[time.Time])
		returned := make(chan struct{})
		t.Cleanup(func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
			<-returned
		})
		time.Sleep(late)
		go func() {
			defer close(returned)
			res <- l.Hold(ctx, func(ctx context.Context) error {
				select {
				case <-ctx.Done():
					now := time.Now()
					ended.Store(&now)
					return context.Cause(ctx)
				case <-stop:
					return nil
				}
			})
		}()
		return taken, res, ended
	}

	t.Run("one failed renewal does not end the holding", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var renewals atomic.Int32
			stop := make(chan struct{})
			taken, result, ended := hold(t, 0, func(context.Context) error {
				if renewals.Add(1) == 1 {
					return injected
				}
				return nil
			}, stop)
			time.Sleep(3 * lease)
			synctest.Wait()
			if at := ended.Load(); at != nil {
				t.Fatalf("fn's context ended %v after the lock was taken, at renewal %d; only the first failed", at.Sub(taken), renewals.Load())
			}
			close(stop)
			if err := <-result; err != nil {
				t.Errorf("Hold: %v, want nil", err)
			}
			if n := renewals.Load(); n < 6 {
				t.Errorf("%d renewals in three leases, want a renewal every third of the lease", n)
			}
		})
	})

	t.Run("renewals that keep failing end the holding before the lease could lapse", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var renewals atomic.Int32
			taken, result, ended := hold(t, 0, func(context.Context) error {
				renewals.Add(1)
				return injected
			}, make(chan struct{}))
			err := <-result
			if !errors.Is(err, injected) {
				t.Errorf("Hold: %v, want the renewal's error", err)
			}
			at := ended.Load()
			if at == nil {
				t.Fatal("fn returned without its context ending")
			}
			if !at.Before(taken.Add(lease)) {
				t.Errorf("fn's context ended %v after the lock was taken, want before its lease of %v lapsed", at.Sub(taken), lease)
			}
			if n := renewals.Load(); n < 2 {
				t.Errorf("%d renewal, want it retried while the lease lasts", n)
			}
		})
	})

	// The lease runs from the acquisition, not from Hold: a Hold that starts late (the holder
	// did some work first) renewed a third of a lease after it started, so a renewal failing
	// then let fn run on past the lease's trusted part.
	t.Run("a holding that starts late ends where its lease stops being trusted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			taken, result, ended := hold(t, lease/2, func(context.Context) error { return injected }, make(chan struct{}))
			<-result
			at := ended.Load()
			if at == nil {
				t.Fatal("fn returned without its context ending")
			}
			if trusted := lease - lease/3; at.Sub(taken) > trusted {
				t.Errorf("fn's context ended %v after the lock was taken, want by %v: the lease less a renewal interval", at.Sub(taken), trusted)
			}
		})
	})

	t.Run("a renewal that hangs ends the holding before the lease could lapse", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			taken, result, ended := hold(t, 0, func(ctx context.Context) error {
				<-ctx.Done()
				return ctx.Err()
			}, make(chan struct{}))
			time.Sleep(lease)
			synctest.Wait()
			at := ended.Load()
			if at == nil {
				t.Fatalf("fn still running when its lease lapsed, %v after the lock was taken, behind a renewal that does not answer", lease)
			}
			if !at.Before(taken.Add(lease)) {
				t.Errorf("fn's context ended %v after the lock was taken, want before its lease of %v lapsed", at.Sub(taken), lease)
			}
			if err := <-result; err == nil {
				t.Error("Hold returned nil after its renewals hung")
			}
		})
	})
}

// renewHook answers the renewals of the lock key with renew instead of Redis (an error for a
// failed renewal, nil to let it through to Redis); every other command goes to Redis.
type renewHook struct {
	key   string
	renew func(ctx context.Context) error
}

func (h renewHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h renewHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// lock_renew.lua's call: evalsha, its sha, 1 key, the holder's token and the lease;
		// the release has no lease and the acquisition two keys.
		if a := cmd.Args(); cmd.Name() == "evalsha" && len(a) == 6 && a[3] == h.key {
			if err := h.renew(ctx); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (h renewHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
