package consumer_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// catchUpSeen is a replay's store that notes whether the replay began its writes: catching up
// reads the campaigns first.
type catchUpSeen struct {
	consumer.ReplayStore
	seen *atomic.Bool
}

func (c catchUpSeen) Campaigns(ctx context.Context) ([]store.Campaign, error) {
	c.seen.Store(true)
	return c.ReplayStore.Campaigns(ctx)
}

// TestReplayFromAnOffsetPastTheEnd: --from an offset past the end of every partition of the
// requested topic (a typo, a time's digits, another cluster's offset) names no event, and the
// replay refuses it, an operator's value (exit 2), before it writes anything. It printed
// "0 events … from offset 999999", caught the store up with Redis, recorded the results
// topic's payments from its start, and succeeded: the operator read that nothing was missing.
func TestReplayFromAnOffsetPastTheEnd(t *testing.T) {
	s := newReplaySale(t, storetest.MustOpen(t, storetest.SQLiteURL(t)), 10)
	s.buy("ann")
	s.buy("bob")
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	var progress strings.Builder
	var wrote atomic.Bool
	stats, err := consumer.Replay(ctx, consumer.Config{Brokers: s.brokers, Topics: s.topics, Logger: slog.New(slog.DiscardHandler)},
		consumer.From{Offset: 999999}, catchUpSeen{s.st, &wrote}, s.r, &progress)
	if events.ErrorCode(err) != events.Invalid || !strings.Contains(err.Error(), "999999") || !strings.Contains(err.Error(), s.topics.Requested) {
		t.Errorf("replay from offset 999999 of a topic of 2 events: %+v, %v; want an invalid error naming the offset and %s\n%s",
			stats, err, s.topics.Requested, progress.String())
	}
	if wrote.Load() {
		t.Errorf("replay from offset 999999 of a topic of 2 events began to write (it caught the store up)")
	}
}
