package lua

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua/luatest"
)

// BenchmarkReserveCoalesced reserves from 256 goroutines, one script call and round trip per
// purchase (Alone) beside the coalescer's batched calls, with Redis's own CPU per purchase:
//
//	go test -run '^$' -bench ReserveCoalesced ./lua/
func BenchmarkReserveCoalesced(b *testing.B) {
	rdb := luatest.MustRedis(b)
	r := New(rdb)
	defer r.Close()
	ctx := context.Background()
	if err := r.Load(ctx); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"alone", "coalesced"} {
		b.Run(mode, func(b *testing.B) {
			campaign := "bc-" + events.NewID()[14:]
			if _, err := r.LoadCampaign(ctx, Campaign{ID: campaign, Remaining: 1 << 40, Limit: 1 << 40, StartsAt: time.Now().Add(-time.Minute)}); err != nil {
				b.Fatal(err)
			}
			k := KeysOf(campaign)
			defer rdb.Del(ctx, k.Stock, k.Buyers, k.Res, k.Pending, k.Meta)
			rr := r
			if mode == "alone" {
				rr = r.Alone()
			}
			var n atomic.Int64
			cpu0 := redisCPU(b, rdb)
			b.SetParallelism(128) // 256 goroutines on 2 cores, as the flash-crowd scenario
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					if _, err := rr.Reserve(ctx, campaign, fmt.Sprintf("%s.%d", campaign, i), strconv.FormatInt(i%100000, 10), 1, time.Minute); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reserves/s")
			b.ReportMetric(float64((redisCPU(b, rdb)-cpu0).Microseconds())/float64(b.N), "redis-µs/reserve")
		})
	}
}

// redisCPU is the CPU time the Redis server has used, from INFO cpu.
func redisCPU(tb testing.TB, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total time.Duration
	for _, line := range strings.Split(info, "\n") {
		name, value, _ := strings.Cut(strings.TrimSpace(line), ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			s, err := strconv.ParseFloat(value, 64)
			if err != nil {
				tb.Fatalf("INFO cpu: %s", line)
			}
			total += time.Duration(s * float64(time.Second))
		}
	}
	return total
}

// TestCoalescerCanceled: a caller whose context has ended before its purchase is queued gets
// its context's error at once, and reserves nothing.
func TestCoalescerCanceled(t *testing.T) {
	r := New(luatest.MustRedis(t))
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Reserve(ctx, "c", "c.x", "u", 1, time.Minute); err == nil || !strings.Contains(err.Error(), context.Canceled.Error()) {
		t.Errorf("canceled call: %v", err)
	}
	// After Close, a purchase gets ErrClosed: it never hangs.
	r2 := New(luatest.MustRedis(t))
	r2.Close()
	done := make(chan error, 1)
	go func() {
		_, err := r2.Reserve(context.Background(), "c", "c.x", "u", 1, time.Minute)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("a purchase after Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a purchase after Close hangs")
	}
}

// TestByCall: purchases of one campaign and ttl share a call, in the order they came.
func TestByCall(t *testing.T) {
	p := func(campaign string, ttl int64) *purchase { return &purchase{campaign: campaign, ttlMs: ttl} }
	batch := []*purchase{p("a", 1), p("b", 1), p("a", 1), p("a", 2), p("b", 1), p("a", 1)}
	groups := byCall(nil, batch)
	want := [][]*purchase{{batch[0], batch[2], batch[5]}, {batch[1], batch[4]}, {batch[3]}}
	if len(groups) != len(want) {
		t.Fatalf("%d calls, want %d", len(groups), len(want))
	}
	for i := range want {
		if fmt.Sprint(groups[i]) != fmt.Sprint(want[i]) {
			t.Errorf("call %d: %v, want %v", i, groups[i], want[i])
		}
	}
	// Reused for the next batch: nothing of the last one stays.
	if again := byCall(groups, batch[:1]); len(again) != 1 || len(again[0]) != 1 || again[0][0] != batch[0] {
		t.Errorf("the next batch's calls: %v", again)
	}
}
