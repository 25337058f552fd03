package bench

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
	"github.com/seckill/seckill/store/storetest"
)

// TestDrainBacklogIsReservedInRedis: the drain measures the consumer at its production work,
// which includes confirming each order's pending reservation in Redis. Its backlog was
// produced straight to Kafka with nothing in Redis, so the consumer confirmed nothing and
// warned once a batch that Redis did not hold what the store did. Every order of the backlog
// must now be a pending reservation, until its event's deadline.
func TestDrainBacklogIsReservedInRedis(t *testing.T) {
	luatest.MustRedis(t)
	brokers := kafkatest.Real(t)
	ctx := context.Background()
	env, err := NewEnv(ctx, os.Getenv(luatest.RedisEnv), storetest.PostgresURL(t), brokers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Close(context.Background(), false) })
	r := &runner{env: env, prog: NewProgress(io.Discard), cfg: Config{Sizes: Sizes{FlashUsers: 7}}}
	prefix := env.Prefix("drain-test")
	if err := env.CreateTopics(ctx, prefix, 2); err != nil {
		t.Fatal(err)
	}
	const n = 300
	topic := events.NewTopics(prefix).Requested
	campaign, err := r.drainCampaign(ctx, "drain-test", n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.produce(ctx, "drain-test", topic, campaign, n); err != nil {
		t.Fatal(err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pollCtx, cancel := context.WithTimeout(ctx, time.Minute) // bounded: a short topic polled on for good
	defer cancel()
	seen := map[string]bool{}
	for len(seen) < n {
		fs := cl.PollFetches(pollCtx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("%d of %d events read: %v", len(seen), n, err)
		}
		for _, rec := range fs.Records() {
			ev, err := events.Decode(rec.Value)
			if err != nil {
				t.Fatal(err)
			}
			seen[ev.OrderID] = true
			res, err := env.Lua.Reservation(ctx, ev.OrderID)
			if err != nil || res.State != lua.StatePending || res.User != ev.UserID || !res.Deadline.Equal(ev.Deadline) {
				t.Fatalf("order %s of the backlog is %+v %v in Redis, want pending for %s until %v", ev.OrderID, res, err, ev.UserID, ev.Deadline)
			}
		}
	}
}
