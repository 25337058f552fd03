package consumer_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
)

// TestConsumerPersistsWhileRedisHangs: a Redis that takes connections and never answers (a
// primary paused by a fork or SIGSTOP, a network that drops its replies) must not hold the
// batches: the consumer persists without Redis, as it does while Redis refuses its calls, and
// stops within its drain. Each call to such a Redis took go-redis's timeouts and retries, 40 s
// with the defaults, and 10 orders of 100 were persisted in a minute.
func TestConsumerPersistsWhileRedisHangs(t *testing.T) {
	const n = 100
	st, campaign, brokers, topics := backlog(t, "hung", n)
	addr, _ := luatest.Silent(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	r := lua.New(rdb)
	t.Cleanup(func() {
		r.Close()
		rdb.Close()
	})
	cons, err := consumer.New(consumer.Config{Brokers: brokers, Topics: topics, BatchSize: 10, Logger: slog.New(slog.DiscardHandler)}, st, r)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- cons.Run(ctx) }()
	for {
		c, err := st.Campaign(context.Background(), campaign)
		if err != nil {
			t.Fatal(err)
		}
		if c.Sold == n {
			break
		}
		if time.Since(start) > 20*time.Second {
			cancel()
			<-done
			t.Fatalf("with Redis hung, %d of %d orders persisted in 20s", c.Sold, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d orders in batches of 10 with Redis hung: %v", n, time.Since(start))
	stopping := time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if d := time.Since(stopping); d > 5*time.Second {
		t.Errorf("Run took %v to stop with Redis hung", d)
	}
}
