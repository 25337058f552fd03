package consumer_test

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/store/storetest"
)

// TestReplayAtMaxRate: a replay given MaxRate (`seckill replay --max-rate`) persists its orders
// at that pace, as the consumer does, so that mending a store during a sale does not take the
// database from the consumer. 30 orders at 10 a second: the first second's 10 at once, the
// other 20 over 2 seconds. It ignored MaxRate and persisted them as fast as the store took them.
func TestReplayAtMaxRate(t *testing.T) {
	s := newReplaySale(t, storetest.MustOpen(t, storetest.SQLiteURL(t)), 30)
	for i := range 30 {
		s.buy(fmt.Sprint("u", i))
	}
	start := time.Now()
	stats, err := consumer.Replay(s.ctx, consumer.Config{Brokers: s.brokers, Topics: s.topics, MaxRate: 10, Logger: slog.New(slog.DiscardHandler)},
		consumer.From{}, s.st, s.r, io.Discard)
	took := time.Since(start)
	if err != nil || stats.Events != 30 {
		t.Fatalf("replay: %+v, %v; want 30 events", stats, err)
	}
	if took < 1800*time.Millisecond {
		t.Errorf("replay of 30 orders at 10/s took %v, want 2s at least", took.Round(time.Millisecond))
	}
}
