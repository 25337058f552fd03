package lua_test

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
)

// confirmOneSrc is the confirm script as it was before it took a batch: one order per call. The
// tests keep it as the oracle the batch is checked against, and the benchmark as the baseline.
//
//go:embed testdata/confirm_one.lua
var confirmOneSrc string

var confirmOne = redis.NewScript(confirmOneSrc)

// cpuTime is the CPU time this process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// confirmOneByOne is the old ConfirmAll: one confirm-script call per order, pipelined. It
// returns each order's reply.
func confirmOneByOne(ctx context.Context, rdb redis.Cmdable, orderIDs []string) ([]*redis.Cmd, error) {
	if err := confirmOne.Load(ctx, rdb).Err(); err != nil {
		return nil, err
	}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(orderIDs))
	for i, id := range orderIDs {
		campaign, ok := events.CampaignOf(id)
		if !ok {
			return nil, fmt.Errorf("malformed order id %q", id)
		}
		k := lua.KeysOf(campaign)
		cmds[i] = pipe.EvalSha(ctx, confirmOne.Hash(), []string{k.Res, k.Pending}, id)
	}
	pipe.Exec(ctx) // each command carries its own error
	return cmds, nil
}

// BenchmarkConfirmAll confirms batches of 500 pending reservations of one campaign, one script
// call per order (the old ConfirmAll) beside one call per batch (the new one), and the new one
// after the read of the batch's reservations that the consumer makes first, on the test Redis.
// The reservations are written back to pending between iterations, outside the timer.
func BenchmarkConfirmAll(b *testing.B) {
	const batch = 500
	ctx := context.Background()
	rdb := luatest.MustRedis(b)
	r := lua.New(rdb)
	defer r.Close()
	if err := r.Load(ctx); err != nil {
		b.Fatal(err)
	}
	campaign := "bench-" + events.NewID()[14:]
	k := lua.KeysOf(campaign)
	b.Cleanup(func() { rdb.Del(context.Background(), k.Res, k.Pending) })
	ids := make([]string, batch)
	pending := make([]any, 0, 2*batch)
	members := make([]redis.Z, batch)
	deadline := time.Now().Add(time.Hour).UnixMilli()
	for i := range ids {
		ids[i] = events.NewOrderID(campaign)
		pending = append(pending, ids[i], "pending|1|"+strconv.FormatInt(deadline, 10)+"|user"+strconv.Itoa(i))
		members[i] = redis.Z{Score: float64(deadline), Member: ids[i]}
	}
	// A sale's res hash holds every order of the campaign: thousands, past any listpack limit
	// (Redis keeps a small hash in one list it scans), so the batch's orders join others.
	confirmed := make([]any, 0, 2*5000)
	for i := range 5000 {
		confirmed = append(confirmed, events.NewOrderID(campaign), "confirmed|1|"+strconv.FormatInt(deadline, 10)+"|old"+strconv.Itoa(i))
	}
	if err := rdb.HSet(ctx, k.Res, confirmed...).Err(); err != nil {
		b.Fatal(err)
	}
	reset := func(b *testing.B) {
		b.StopTimer()
		pipe := rdb.Pipeline()
		pipe.HSet(ctx, k.Res, pending...)
		pipe.ZAdd(ctx, k.Pending, members...)
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	check := func(b *testing.B) {
		if n := rdb.ZCard(ctx, k.Pending).Val(); n != 0 {
			b.Fatalf("%d reservations still pending", n)
		}
	}
	run := func(name string, confirm func() error) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var cpu time.Duration // this process's, the client's: the consumer's share
			for b.Loop() {
				reset(b)
				before := cpuTime(b)
				if err := confirm(); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime(b) - before
			}
			check(b)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/order")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*batch), "client-cpu-ns/order")
		})
	}
	run("one-call-per-order", func() error {
		cmds, err := confirmOneByOne(ctx, rdb, ids)
		if err != nil {
			return err
		}
		for _, c := range cmds {
			if err := c.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	run("batched", func() error {
		_, err := r.ConfirmAll(ctx, ids)
		return err
	})
	// The consumer's Redis work per batch: it reads the batch's reservations before the store's
	// commit (recordGivenBack), and confirms them after.
	run("read-then-batched", func() error {
		if _, err := r.Reservations(ctx, ids); err != nil {
			return err
		}
		_, err := r.ConfirmAll(ctx, ids)
		return err
	})
}
