package consumer_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/store/storetest"
)

// TestReplayGoesOnAfterDataLoss: the broker answers a fetch in the middle of the replay's range
// with OFFSET_OUT_OF_RANGE, as after an unclean leader election that truncated the log.
// franz-go resets the partition, rewinding, and reports an ErrDataLoss, which is
// informational: it goes on by itself. The replay stopped on it, with the rest of the range
// not replayed. It must go on: the events read again are persisted again, which changes
// nothing, the persister being idempotent.
func TestReplayGoesOnAfterDataLoss(t *testing.T) {
	s, stats := replayWithDataLoss(t, "")
	if stats.Total != dataLossRange || stats.Events != dataLossRange || stats.Deleted != 0 {
		t.Errorf("replay: %+v, want the %d events of the range read, each counted once, none deleted", stats, dataLossRange)
	}
	if orders, err := s.st.Orders(s.ctx, s.campaign); err != nil || len(orders) != dataLossRange {
		t.Errorf("the store holds %d orders (%v), want the %d replayed", len(orders), err, dataLossRange)
	}
}

// TestReplayCountsEachPoisonAndRefusalOnceAfterDataLoss: the data loss rewinds the partition
// to the replay's start, so its first event is read twice. It was counted twice, as poison or
// as refused: the summary said 2 poison events of a range of 4 that held one. The events read
// are counted once per place in the log; the poison and the refusals must be too.
func TestReplayCountsEachPoisonAndRefusalOnceAfterDataLoss(t *testing.T) {
	for _, first := range []string{"poison", "refused"} {
		t.Run(first, func(t *testing.T) {
			_, stats := replayWithDataLoss(t, first)
			if stats.Events != dataLossRange || stats.Poison+stats.Refused != 1 {
				t.Errorf("replay: %+v, want the %d events read once, and the one %s counted once", stats, dataLossRange, first)
			}
		})
	}
}

// dataLossRange is how many events replayWithDataLoss's range holds.
const dataLossRange = 4

// replayWithDataLoss replays a range of dataLossRange events, each its own fetch, in which the
// broker loses data once, mid-range; first makes the range's first event "poison" or one the
// store "refused" (its campaign is not there), or, "", an order like the others.
func replayWithDataLoss(t *testing.T, first string) (*replaySale, consumer.ReplayStats) {
	t.Helper()
	kafka := kafkatest.FakeCluster(t)
	s := newReplaySaleOn(t, storetest.MustOpen(t, storetest.SQLiteURL(t)), 1000, kafka.ListenAddrs())
	// Each its own batch, too big for two in a fetch, so that the range takes several fetches.
	pad := kgo.RecordHeader{Key: "pad", Value: make([]byte, 600<<10)}
	for i := range dataLossRange {
		campaign := s.campaign
		if i == 0 && first == "refused" {
			campaign = "missing"
		}
		rec, err := events.Record(s.topics.Requested, orderEvent(campaign, fmt.Sprint("u", i), 1))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && first == "poison" {
			rec.Value = []byte("{not an event")
		}
		rec.Partition, rec.Headers = 0, append(rec.Headers, pad)
		if err := s.cl.ProduceSync(s.ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	lost := kafkatest.LoseRecordsOnce(kafka)
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	var progress strings.Builder
	stats, err := consumer.Replay(ctx, consumer.Config{Brokers: s.brokers, Topics: s.topics, Logger: slog.New(slog.DiscardHandler)},
		consumer.From{}, s.st, s.r, &progress)
	if err != nil {
		t.Fatalf("replay: %+v, %v\n%s", stats, err, progress.String())
	}
	if !lost() {
		t.Fatal("no fetch in the middle of the range: the test did not lose data")
	}
	return s, stats
}
