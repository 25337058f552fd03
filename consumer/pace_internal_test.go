package consumer

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
)

// TestPaceFollowsTopicGrowth: the rebalance that follows the topic's growth gives a member its
// share of the new count, not of the one it learned before. Here the member keeps partitions 0
// and 1 while the topic grows from 3 to 4: kept at 2/3 of the pace, the group's members would
// add up to more than the whole.
func TestPaceFollowsTopicGrowth(t *testing.T) {
	const rate = 1200
	ctx := context.Background()
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers) // 3 partitions
	cl := kafkatest.Client(t, brokers)
	p := newPace(Config{Topics: topics, BatchSize: 500, MaxRate: rate, Logger: slog.New(slog.DiscardHandler)})

	p.assigned(ctx, cl, map[string][]int32{topics.Requested: {0, 1}})
	if got, want := float64(p.lim.Limit()), float64(rate*2/3); got != want {
		t.Fatalf("owning 2 of 3 partitions: pace %v, want %v", got, want)
	}
	kafkatest.GrowPartitions(t, brokers, topics.Requested, 4)
	p.assigned(ctx, cl, nil) // the rebalance after the growth leaves this member its two
	if got, want := float64(p.lim.Limit()), float64(rate*2/4); got != want {
		t.Errorf("owning 2 of 4 partitions: pace %v, want %v", got, want)
	}
}

// TestPaceWaitsForABatchSizedBeforeARebalance: ConsumePipelined asks batchSize for a poll's bound
// before the poll, and franz-go runs the group's callbacks while the poll waits (and before it
// starts), so a rebalance can shrink this member's share, and the burst with it, under a batch
// already sized by the old one: a new member joining takes partitions from this one. The batch
// must still be waited for, at the new pace, not refused: a refusal is persist's error, which
// ends the consumer's Run.
func TestPaceWaitsForABatchSizedBeforeARebalance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rate, topic = 600, "requested"
		p := newPace(Config{Topics: events.Topics{Requested: topic}, BatchSize: 500, MaxRate: rate, Logger: slog.New(slog.DiscardHandler)})
		p.mu.Lock()
		p.total = 3
		p.owned = map[int32]bool{0: true, 1: true, 2: true}
		p.set()
		p.mu.Unlock()

		n := p.batchSize()                     // the bound of a poll that waits for records
		p.gone(map[string][]int32{topic: {2}}) // a member joins while it waits: 2 of 3 partitions left
		if got, want := p.batchSize(), 400; got != want {
			t.Fatalf("owning 2 of 3 partitions: batch size %d, want %d", got, want)
		}
		start := time.Now()
		if err := p.wait(context.Background(), n); err != nil {
			t.Fatalf("wait for a batch of %d polled before the share shrank: %v", n, err)
		}
		// The limiter held 400 tokens (the new burst): the other 100 come at the new 400/s.
		if got, want := time.Since(start), 250*time.Millisecond; got != want {
			t.Errorf("a batch of %d waited %v at 400/s with 400 tokens in hand, want %v", n, got, want)
		}
	})
}
