package consumer_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestReplayBesideLiveConsumers: a replay from the start runs while two members of the group
// persist the same backlog. Each order is confirmed once, the store and Redis agree, and
// neither the replay nor the group refuses or dead-letters an order.
func TestReplayBesideLiveConsumers(t *testing.T) {
	storetest.Each(t, func(t *testing.T, st *store.Store) {
		const n = 300
		s := newReplaySale(t, st, n)
		holdings := map[string]int64{}
		for i := range n {
			user := fmt.Sprintf("user-%d", i)
			s.buyIn(int32(i%3), user)
			holdings[user] = 1
		}
		cfg := consumer.Config{Brokers: s.brokers, Topics: s.topics, BatchSize: 20, Logger: slog.New(slog.DiscardHandler)}
		for range 2 {
			cons, err := consumer.New(cfg, s.st, s.r)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(s.ctx)
			done := make(chan error, 1)
			go func() { done <- cons.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
				cons.Close()
			})
		}
		stats, err := consumer.Replay(s.ctx, cfg, consumer.From{}, s.st, s.r, io.Discard)
		if err != nil {
			t.Fatalf("replay: %v", err)
		}
		if stats.Events != n || stats.Refused != 0 || stats.Poison != 0 || stats.GivenBack != 0 || stats.CaughtUp != 0 {
			t.Errorf("replay %+v, want %d events and nothing else", stats, n)
		}
		waitCommitted(t, kadm.NewClient(s.cl), s.topics, "the group did not persist the backlog")
		s.wantHeld(1, holdings)
		s.wantRedisSold(n, n)
		if dl := s.deadLetters(); len(dl) > 0 {
			t.Errorf("%d dead letters, want none", len(dl))
		}
	})
}
