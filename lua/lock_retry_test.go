package lua_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallingProxy{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				down.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, down, up)
			mu.Unlock()
			wg.Go(func() { io.Copy(up, down); up.Close() })
			wg.Go(func() {
				defer down.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := up.Read(buf)
					if n > 0 {
						if p.stall.CompareAndSwap(true, false) {
							time.Sleep(hold)
						}
						if _, werr := down.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
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
