package consumer_test

import (
	"testing"
	"time"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events/kafkatest"
)

// TestMaxRateIsTheGroups: --max-rate is what the whole group persists a second, however many
// members it has, since the pace protects the one database they all write to. Each member takes
// the share its partitions are of the topic's: alone it has the whole pace, two on four
// partitions have half each, and the one left when the other goes has the whole pace again.
func TestMaxRateIsTheGroups(t *testing.T) {
	const rate = 1000
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers)
	kafkatest.GrowPartitions(t, brokers, topics.Requested, 4)
	// The topic is empty: the members only join, so nothing is persisted.
	cfg := consumer.Config{Brokers: brokers, Topics: topics, MaxRate: rate}

	a, _ := runConsumer(t, cfg, nil)
	waitPace(t, "the only member", a, 4, rate)

	b, stopB := runConsumer(t, cfg, nil)
	waitPace(t, "the first of two members", a, 2, rate/2)
	waitPace(t, "the second of two members", b, 2, rate/2)

	stopB()
	waitPace(t, "the member left after the other went", a, 4, rate)
}

// waitPace waits up to 20 s until cons owns owned partitions and paces at limit events a
// second; who says which member it is.
func waitPace(t *testing.T, who string, cons *consumer.Consumer, owned int, limit float64) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		gotOwned, gotLimit := cons.Pace()
		if gotOwned == owned && gotLimit == limit {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s %s owns %d partitions and paces at %v events/s, want %d partitions at %v", who, gotOwned, gotLimit, owned, limit)
		}
	}
}
