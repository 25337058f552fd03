package consumer

import (
	"context"
	"log/slog"
	"testing"

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
	cl, err := events.NewClient(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
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
