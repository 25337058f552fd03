package lua

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua/luatest"
)

// BenchmarkReserveCoalesced runs the reserve script from 256 goroutines, one round trip per
// purchase against the coalescer's pipelines, side by side:
//
//	go test -run '^$' -bench ReserveCoalesced ./lua/
func BenchmarkReserveCoalesced(b *testing.B) {
	r := New(luatest.MustRedis(b))
	defer r.Close()
	ctx := context.Background()
	for _, mode := range []string{"one-round-trip-each", "coalesced"} {
		b.Run(mode, func(b *testing.B) {
			campaign := "bc-" + events.NewID()[14:]
			if _, err := r.LoadCampaign(ctx, Campaign{ID: campaign, Remaining: 1 << 40, Limit: 1 << 40, StartsAt: time.Now().Add(-time.Minute)}); err != nil {
				b.Fatal(err)
			}
			k := KeysOf(campaign)
			keys := []string{k.Stock, k.Buyers, k.Res, k.Pending, k.Meta}
			var n atomic.Int64
			b.SetParallelism(128) // 256 goroutines on 2 cores, as the flash-crowd scenario
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					args := []any{fmt.Sprintf("%s.%d", campaign, i), fmt.Sprint(i % 100000), 1, 60000}
					var err error
					if mode == "coalesced" {
						err = r.run(ctx, reserveScript, keys, args...).Err()
					} else {
						err = reserveScript.Run(ctx, r.rdb, keys, args...).Err()
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reserves/s")
		})
	}
}

// TestCoalescerCanceled: a caller whose context ends stops waiting at once.
func TestCoalescerCanceled(t *testing.T) {
	r := New(luatest.MustRedis(t))
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.run(ctx, confirmScript, []string{"a", "b"}, "c.x").Err(); err != context.Canceled {
		t.Errorf("canceled call: %v", err)
	}
	// After Close, a call gets the closed client's error: it never hangs.
	r2 := New(luatest.MustRedis(t))
	r2.Close()
	done := make(chan error, 1)
	go func() { done <- r2.run(context.Background(), confirmScript, []string{"{x}a", "{x}b"}, "c.x").Err() }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a call after Close succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a call after Close hangs")
	}
}
