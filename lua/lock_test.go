package lua_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
)

func TestLock(t *testing.T) {
	ctx := context.Background()
	r := lua.New(luatest.MustRedis(t))
	defer r.Close()
	name := "test-" + events.NewID()

	a, err := r.TryLock(ctx, name, time.Second)
	if err != nil {
		t.Fatalf("first TryLock: %v", err)
	}
	if _, err := r.TryLock(ctx, name, time.Second); !errors.Is(err, lua.ErrLockHeld) {
		t.Fatalf("second TryLock while held: %v, want ErrLockHeld", err)
	}

	t.Run("only the holder renews and releases", func(t *testing.T) {
		if ok, err := a.Renew(ctx); err != nil || !ok {
			t.Fatalf("holder's renew: %v %v", ok, err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		b, err := r.TryLock(ctx, name, time.Second)
		if err != nil {
			t.Fatalf("TryLock after release: %v", err)
		}
		// a's lease is over: it can neither renew nor free b's lock.
		// A refusal is (false, nil): an error is Redis failing, which Hold treats apart.
		if ok, err := a.Renew(ctx); err != nil || ok {
			t.Errorf("a former holder's renew of its successor's lock: %v %v, want false, nil", ok, err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := r.TryLock(ctx, name, time.Second); !errors.Is(err, lua.ErrLockHeld) {
			t.Errorf("a former holder's release freed the lock: %v", err)
		}
		b.Release(ctx)
	})

	t.Run("expires without renewal", func(t *testing.T) {
		if _, err := r.TryLock(ctx, name, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond) // the holder is paused: no renewals
		d, err := r.TryLock(ctx, name, time.Second)
		if err != nil {
			t.Fatalf("lock not free after its lease: %v", err)
		}
		d.Release(ctx)
	})

	t.Run("hold renews past the lease and stops when the lock is lost", func(t *testing.T) {
		// A lease of a second, as the sweeper's shortest (compensator.sweeperLease): renewals at
		// a third of 300 ms raced a loaded machine, and the lock lapsed while held.
		e, err := r.TryLock(ctx, name, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		lost := make(chan error, 1)
		go func() {
			lost <- e.Hold(ctx, func(ctx context.Context) error {
				<-ctx.Done()
				return context.Cause(ctx)
			})
		}()
		time.Sleep(3 * time.Second) // three leases: alive only through renewals
		if _, err := r.TryLock(ctx, name, time.Second); !errors.Is(err, lua.ErrLockHeld) {
			t.Fatalf("lock lapsed while held: %v", err)
		}
		// Someone else takes over (as after a long pause): the watchdog must notice.
		r.Client().Del(ctx, "seckill:{lock:"+name+"}")
		f, err := r.TryLock(ctx, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-lost:
			if err == nil {
				t.Error("Hold returned nil after losing the lease")
			}
		case <-time.After(20 * time.Second): // the watchdog looks every third of a lease
			t.Fatal("Hold kept running 20s after the lease passed to another holder")
		}
		if _, err := r.TryLock(ctx, name, time.Second); !errors.Is(err, lua.ErrLockHeld) {
			t.Errorf("the former holder's Hold freed its successor's lock: %v", err)
		}
		f.Release(ctx)
	})
}
