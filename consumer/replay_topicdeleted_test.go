package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// deleteTopicOnCatchUp is a replay's store that deletes the requested topic as the replay
// begins catching up: after it took its range's offsets, before it reads any of it. It returns
// once the broker no longer lists the topic: a real Kafka deletes it after answering, and in
// between served CI's replay the whole range, which then ended without an error.
type deleteTopicOnCatchUp struct {
	consumer.ReplayStore
	s *replaySale
}

func (d deleteTopicOnCatchUp) Campaigns(ctx context.Context) ([]store.Campaign, error) {
	adm := kadm.NewClient(d.s.cl)
	if err := events.DeleteTopics(ctx, adm, d.s.topics.Requested); err != nil {
		d.s.t.Errorf("delete topic: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		td, err := adm.ListTopics(ctx, d.s.topics.Requested)
		if err == nil && !td.Has(d.s.topics.Requested) {
			break
		}
		if time.Now().After(deadline) {
			d.s.t.Errorf("the deleted topic %s is still listed after 30 s (%v)", d.s.topics.Requested, err)
			break
		}
	}
	return d.ReplayStore.Campaigns(ctx)
}

// TestReplayOfATopicDeletedMidRun: the requested topic is deleted while a replay reads it (an
// operator's mistake, a cluster being torn down). The replay stops with an error naming the
// topic and saying it is gone. It printed its progress line every second and waited for the
// topic's records until ^C.
func TestReplayOfATopicDeletedMidRun(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, brokers []string) {
		s := newReplaySaleOn(t, storetest.MustOpen(t, storetest.SQLiteURL(t)), 1000, brokers)
		// Many times what a fetch holds (franz-go's 1 MiB a partition, a fetch or two buffered
		// ahead), so that most of the range is still on the broker when the topic goes.
		pad := kgo.RecordHeader{Key: "pad", Value: make([]byte, 4<<10)}
		var recs []*kgo.Record
		for i := range 2000 {
			rec, err := events.Record(s.topics.Requested, orderEvent(s.campaign, fmt.Sprint("u", i), 1))
			if err != nil {
				t.Fatal(err)
			}
			rec.Partition, rec.Headers = 0, append(rec.Headers, pad)
			recs = append(recs, rec)
		}
		if err := s.cl.ProduceSync(s.ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		// Not a timed assertion: the bound only turns the old endless loop into a failure.
		ctx, cancel := context.WithTimeout(s.ctx, 60*time.Second)
		defer cancel()
		var progress strings.Builder
		stats, err := consumer.Replay(ctx, consumer.Config{Brokers: s.brokers, Topics: s.topics, Logger: slog.New(slog.DiscardHandler)},
			consumer.From{}, deleteTopicOnCatchUp{ReplayStore: s.st, s: s}, s.r, &progress)
		if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), s.topics.Requested) ||
			!strings.Contains(err.Error(), "deleted") {
			t.Fatalf("replay of a topic deleted mid-run: %+v, %v; want an error naming %s as deleted\n%s", stats, err, s.topics.Requested, progress.String())
		}
	})
}
