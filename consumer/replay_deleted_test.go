package consumer_test

import (
	"context"
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

// deleteOnCatchUp is a replay's store that, as the replay begins catching up (after it took
// the end offsets of its range, before it reads any of it), moves the log start of the
// requested topic's partitions to the offsets given, as retention or kafka-delete-records do.
type deleteOnCatchUp struct {
	consumer.ReplayStore
	s    *replaySale
	upTo map[int32]int64
}

func (d deleteOnCatchUp) Campaigns(ctx context.Context) ([]store.Campaign, error) {
	d.s.t.Helper()
	offsets := kadm.Offsets{}
	for p, o := range d.upTo {
		offsets.AddOffset(d.s.topics.Requested, p, o, -1)
	}
	resp, err := kadm.NewClient(d.s.cl).DeleteRecords(ctx, offsets)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		d.s.t.Errorf("delete records: %v", err)
	}
	return d.ReplayStore.Campaigns(ctx)
}

// TestReplayOfARangeRetentionDeleted: retention deletes the rest of a replay's range while it
// runs, on the real broker. The replay reads what its client fetched before, finishes, and says
// how many events it could not read. It waited for the record at the partition's end offset
// less one, which Kafka no longer has: the replay hung until stopped.
func TestReplayOfARangeRetentionDeleted(t *testing.T) {
	s := newReplaySaleOn(t, storetest.MustOpen(t, storetest.SQLiteURL(t)), 1000, kafkatest.Real(t))
	// More than a fetch holds (franz-go's 1 MiB a partition), so that most of the range is
	// still on the broker when it is deleted.
	pad := kgo.RecordHeader{Key: "pad", Value: make([]byte, 4<<10)}
	var recs []*kgo.Record
	for i := range 400 {
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

	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second) // the bug was a replay waiting for ever
	defer cancel()
	var progress strings.Builder
	st := deleteOnCatchUp{ReplayStore: s.st, s: s, upTo: map[int32]int64{0: int64(len(recs))}}
	stats, err := consumer.Replay(ctx, consumer.Config{Brokers: s.brokers, Topics: s.topics, Logger: slog.New(slog.DiscardHandler)},
		consumer.From{}, st, s.r, &progress)
	if err != nil {
		t.Fatalf("replay: %+v, %v\n%s", stats, err, progress.String())
	}
	if stats.Total != int64(len(recs)) || stats.Deleted == 0 || stats.Events+stats.Deleted != stats.Total {
		t.Errorf("replay: %+v, want %d events in the range, read or deleted, some deleted", stats, len(recs))
	}
	if !strings.Contains(progress.String(), fmt.Sprintf("%d events of %s were deleted", stats.Deleted, s.topics.Requested)) {
		t.Errorf("the replay's progress does not say %d events were deleted:\n%s", stats.Deleted, progress.String())
	}
	if orders, err := s.st.Orders(s.ctx, s.campaign); err != nil || int64(len(orders)) != stats.Events {
		t.Errorf("the store holds %d orders (%v), want the %d events read", len(orders), err, stats.Events)
	}
}
