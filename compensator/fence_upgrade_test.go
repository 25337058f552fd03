package compensator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
)

// oldLockAcquire is lock_acquire.lua as the release before the change ships it: the
// compensators not yet upgraded in a rolling upgrade take the sweeper's lease with it, and their
// fencing token from the counter beside the lease.
var oldLockAcquire = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`)

// TestFenceDuringARollingUpgrade: an old compensator holds the sweeper's lease under token 2
// from Redis's count and is paused past it; an upgraded one takes the lease. The store, which
// had recorded only 1, issued it token 2 as well, and the old holder's writes were accepted when
// it woke: two holders acting under one token. The count is the floor of the issued token now.
func TestFenceDuringARollingUpgrade(t *testing.T) {
	e := newEnv(t, 100, 10)
	name := e.topics.Prefix + ".sweeper"
	lockKey := "seckill:{lock:" + name + "}"
	t.Cleanup(func() { e.r.Client().Del(context.Background(), lockKey, lockKey+":fence") })
	evs := e.reserve(t, 3, time.Millisecond)
	time.Sleep(5 * time.Millisecond) // past their deadlines
	oldAcquire := func() int64 {
		tok, err := oldLockAcquire.Run(e.ctx, e.r.Client(), []string{lockKey, lockKey + ":fence"}, events.NewID(), 100).Int64()
		if err != nil || tok == 0 {
			t.Fatalf("old lock_acquire = %d, %v", tok, err)
		}
		return tok
	}

	// Before the upgrade: an old sweeper took the lease (token 1) and released a reservation.
	first := oldAcquire()
	if _, err := e.st.FailOrderFenced(e.ctx, evs[0], events.ReasonExpired, store.Fence{Name: name, Token: first}); err != nil {
		t.Fatal(err)
	}
	e.r.Client().Del(e.ctx, lockKey)

	// An old compensator takes the lease, then pauses past it.
	paused := oldAcquire()
	time.Sleep(150 * time.Millisecond) // past its lease of 100 ms, in Redis

	// An upgraded compensator takes the lease and its token from the store, as sweep does.
	lock, err := e.r.TryLock(e.ctx, name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := e.st.IssueFence(e.ctx, name, lock.Count)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.FailOrderFenced(e.ctx, evs[1], events.ReasonExpired, holder); err != nil {
		t.Fatalf("the lease holder's write: %v", err)
	}

	// The old compensator wakes up and writes under the token of a lease it lost.
	_, err = e.st.FailOrderFenced(e.ctx, evs[2], events.ReasonExpired, store.Fence{Name: name, Token: paused})
	if !errors.Is(err, store.ErrStaleFence) {
		t.Errorf("write of the paused old holder (token %d) after the new holder took the lease (token %d): %v, want ErrStaleFence",
			paused, holder.Token, err)
	}
}
