package lua_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
)

// TestHoldStopsAtTheLeaseBehindAStalledRenewal: a renewal whose reply is stalled on the network
// (a partition, a Redis paused by a fork) is cut off where the lease stops being trusted. The
// watchdog gave the renewal a context with that deadline, which go-redis does not apply to the
// call (only with ContextTimeoutEnabled, which no URL of seckill sets): it waited the client's
// read timeout, and fn worked on past the end of its lease, while another holder could take the
// lock. Real network, real go-redis client with its default timeouts: synctest cannot stall one.
func TestHoldStopsAtTheLeaseBehindAStalledRenewal(t *testing.T) {
	const lease = 600 * time.Millisecond
	ctx := context.Background()
	shared := luatest.MustRedis(t)
	p := startStallingProxy(t, shared.Options().Addr, 2*time.Second) // within go-redis's 3 s read timeout
	opt := *shared.Options()
	opt.Addr, opt.PoolSize = p.addr, 1
	r := lua.New(redis.NewClient(&opt))
	defer r.Close()
	name := "test-" + events.NewID()
	t.Cleanup(func() { shared.Del(ctx, "seckill:{lock:"+name+"}", "seckill:{lock:"+name+"}:fence") })

	taken := time.Now()
	l, err := r.TryLock(ctx, name, lease)
	if err != nil {
		t.Fatal(err)
	}
	p.stall.Store(true) // the first renewal's reply
	ended := make(chan time.Time, 1)
	held := make(chan error, 1)
	go func() {
		held <- l.Hold(ctx, func(ctx context.Context) error {
			<-ctx.Done()
			ended <- time.Now()
			return nil
		})
	}()
	select {
	case at := <-ended:
		if !at.Before(taken.Add(lease)) {
			t.Errorf("fn's context ended %v after the lock was taken, want before its lease of %v lapsed", at.Sub(taken), lease)
		}
	case <-time.After(lease): // a bound, not a measurement: the lease has lapsed by now
		at := <-ended
		t.Errorf("fn still working when its lease of %v lapsed, behind a stalled renewal; its context ended %v after the lock was taken", lease, at.Sub(taken))
	}
	<-held
}
