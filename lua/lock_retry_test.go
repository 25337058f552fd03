package lua_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
)

// stallingProxy forwards TCP to upstream and, once stall is set, holds the next reply it
// carries back for hold: a reply that reaches the client after its read timeout.
type stallingProxy struct {
	addr  string
	stall atomic.Bool
}

func startStallingProxy(t *testing.T, upstream string, hold time.Duration) *stallingProxy {
	t.Helper()
	p := &stallingProxy{}
	p.addr = luatest.Proxy(t, upstream, func() {
		if p.stall.CompareAndSwap(true, false) {
			time.Sleep(hold)
		}
	})
	return p
}

// TestTryLockWhoseReplyWasLost: go-redis sends a command again when its reply does not come
// within the read timeout (a stalled network, a Redis paused by a fork). The lock's script had
// run and taken the lock; run again with the same holder token it found the lock taken and
// answered ErrLockHeld, and the lock stayed held by nobody for its whole lease: no rebuild of
// Redis (nor sweep) for that long, while lost campaigns sold on, not yet frozen.
func TestTryLockWhoseReplyWasLost(t *testing.T) {
	ctx := context.Background()
	shared := luatest.MustRedis(t)
	p := startStallingProxy(t, shared.Options().Addr, 600*time.Millisecond)
	opt := *shared.Options()
	opt.Addr, opt.ReadTimeout, opt.MaxRetries, opt.PoolSize = p.addr, 200*time.Millisecond, 2, 4
	r := lua.New(redis.NewClient(&opt))
	defer r.Close()
	if err := r.Client().Ping(ctx).Err(); err != nil { // a connection ready before the stall
		t.Fatal(err)
	}
	name := "test-" + events.NewID()
	t.Cleanup(func() { shared.Del(ctx, "seckill:{lock:"+name+"}", "seckill:{lock:"+name+"}:fence") })

	p.stall.Store(true)
	l, err := r.TryLock(ctx, name, time.Minute)
	if errors.Is(err, lua.ErrLockHeld) {
		t.Fatalf("TryLock whose first reply was lost: %v; want the lock, which its first run took", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if l.Count < 1 {
		t.Errorf("count %d; want the acquisition's", l.Count)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.TryLock(ctx, name, time.Minute); err != nil {
		t.Errorf("TryLock after the release: %v; want the lock free", err)
	}
}
