package events_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
)

// TestReadTopicAfterRecordsDeleted: a partition whose records are all gone (retention, or an
// operator's kafka-delete-records after handling the dead letters) has an end offset above 0
// and nothing to read. ReadTopic, which `seckill dlq list|show|stats|redrive` runs on the DLQ,
// must return what is left, not wait for records that no longer exist: it used to wait on
// every partition with an end above 0, and every dlq command hung for its minute, then failed.
// One dead letter written after the deletion is all that is left to read.
func TestReadTopicAfterRecordsDeleted(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, brokers []string) {
		ctx := context.Background()
		topics := kafkatest.Topics(t, brokers)
		produceN(t, brokers, topics.DLQ, 9)
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		ends, err := events.EndOffsets(ctx, adm, topics.DLQ)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := adm.DeleteRecords(ctx, ends.Offsets())
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("delete records: %v", err)
		}
		left := &kgo.Record{Topic: topics.DLQ, Key: []byte("left"), Value: []byte("after the deletion")}
		if err := cl.ProduceSync(ctx, left).FirstErr(); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		recs, err := events.ReadTopic(rctx, brokers, topics.DLQ)
		if err != nil || len(recs) != 1 || string(recs[0].Value) != string(left.Value) {
			t.Fatalf("ReadTopic of a topic whose records were deleted = %d records, %v after %v; want the one written since and no error",
				len(recs), err, time.Since(start).Round(time.Millisecond))
		}
	})
}

// TestReadTopicOfARangeRetentionDeleted: retention (or kafka-delete-records) deletes the rest
// of a partition's range while ReadTopic reads it, on the real broker. No record at the end
// offset less one will ever come: ReadTopic waited for it until its context ended, and every
// dlq command hung for its minute, then failed. It must return the other partitions' records.
func TestReadTopicOfARangeRetentionDeleted(t *testing.T) {
	brokers := kafkatest.Real(t)
	ctx := context.Background()
	topic := kafkatest.Topics(t, brokers).DLQ
	cl := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(i % 2), Value: []byte(strconv.Itoa(i))})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Partition 0's records are all deleted once ReadTopic took its end offsets.
	deleteP0 := func() {
		offsets := kadm.Offsets{}
		offsets.AddOffset(topic, 0, int64(len(recs)/2), -1)
		resp, err := kadm.NewClient(cl).DeleteRecords(ctx, offsets)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Errorf("delete records: %v", err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second) // the bug was a read waiting for ever
	defer cancel()
	start := time.Now()
	got, err := events.ReadTopicThen(rctx, brokers, topic, deleteP0)
	if err != nil || len(got) != len(recs)/2 {
		t.Fatalf("ReadTopic of a topic whose partition 0 was deleted as it read = %d records, %v after %v; want partition 1's %d and no error",
			len(got), err, time.Since(start).Round(time.Millisecond), len(recs)/2)
	}
	for _, r := range got {
		if r.Partition != 1 {
			t.Errorf("ReadTopic returned a deleted record of partition %d offset %d", r.Partition, r.Offset)
		}
	}
}

// TestReadTopicGoesOnAfterDataLoss: the broker answers a fetch in the middle of the range with
// OFFSET_OUT_OF_RANGE, as after an unclean leader election that truncated the log. franz-go
// resets the partition, rewinding, and reports an ErrDataLoss, which is informational: it goes
// on by itself. ReadTopic failed outright on it. It must return the partition's records once
// each, as the log has them now.
func TestReadTopicGoesOnAfterDataLoss(t *testing.T) {
	kafka := kafkatest.FakeCluster(t)
	brokers := kafka.ListenAddrs()
	ctx := context.Background()
	topic := kafkatest.Topics(t, brokers).DLQ
	cl := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	// Each its own batch, too big for two in a fetch, so that the range takes several fetches.
	const n = 4
	for i := range n {
		rec := &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i)), Value: make([]byte, 600<<10)}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	lost := kafkatest.LoseRecordsOnce(kafka)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	recs, err := events.ReadTopic(rctx, brokers, topic)
	if err != nil || len(recs) != n {
		t.Fatalf("ReadTopic after data loss = %d records, %v; want the %d records and no error", len(recs), err, n)
	}
	for i, r := range recs {
		if r.Offset != int64(i) {
			t.Errorf("record %d is at offset %d, want %d", i, r.Offset, i)
		}
	}
	if !lost() {
		t.Error("no fetch in the middle of the range: the test did not lose data")
	}
}

// buffered is a hook that calls fn with each record its client fetched.
type buffered func(*kgo.Record)

func (b buffered) OnFetchRecordBuffered(r *kgo.Record) { b(r) }

// TestReadTopicLetsGoOfDonePartitions: on a busy topic, ReadTopic kept the partitions it had
// read to their end assigned until the last one was done, fetching (and discarding) what was
// written to them since at every fetch. Here partition 0 has one record to read and five
// written after ReadTopic took its ends, and partition 1 five to read, each too big for two in
// a fetch: partition 1 takes five fetches. Of partition 0's five new records, at most two may
// be fetched: the one with its last record, and one in a fetch that left before it was done.
func TestReadTopicLetsGoOfDonePartitions(t *testing.T) {
	brokers := kafkatest.Fake(t)
	ctx := context.Background()
	topic := kafkatest.Topics(t, brokers).DLQ
	cl := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	const n = 5
	produce := func(p int32, n, size int) {
		t.Helper()
		var recs []*kgo.Record
		for range n {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: make([]byte, size)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Error(err)
		}
	}
	produce(0, 1, 1)
	for range n { // each its own batch
		produce(1, 1, 600<<10)
	}
	var past atomic.Int64
	fetched := buffered(func(r *kgo.Record) {
		if r.Partition == 0 && r.Offset > 0 {
			past.Add(1)
		}
	})
	busy := func() {
		for range n {
			produce(0, 1, 600<<10)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	recs, err := events.ReadTopicThen(rctx, brokers, topic, busy, kgo.WithHooks(fetched))
	if err != nil || len(recs) != 1+n {
		t.Fatalf("ReadTopic = %d records, %v; want %d and no error", len(recs), err, 1+n)
	}
	if got := past.Load(); got > 2 {
		t.Errorf("ReadTopic fetched %d of the %d records written to partition 0 after its end, want at most 2: it went on fetching a partition it was done with", got, n)
	}
}
