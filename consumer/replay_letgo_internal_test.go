package consumer

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events/kafkatest"
)

// buffered is a hook that calls fn with each record its client fetched.
type buffered func(*kgo.Record)

func (b buffered) OnFetchRecordBuffered(r *kgo.Record) { b(r) }

// TestReplayLetsGoOfDonePartitions: during a sale the requested topic takes thousands of
// records a second, and the replay's client, which consumes the whole topic, went on fetching
// (and discarding) what was written to the partitions it had read to their end, and to those
// whose range was empty from the start, until the last partition was done, competing with the
// live consumer for the broker. Here partition 0 has one record to read, partition 1 five, each
// too big for two in a fetch (franz-go fetches again only once the last fetch was polled):
// partition 1 takes five fetches. Partition 2 has none. Once the first fetch is in, five records
// are written to partitions 0 and 2 each. Of partition 0's, at most one may be fetched, in the
// fetch that left as its last record was polled; of partition 2's, none.
func TestReplayLetsGoOfDonePartitions(t *testing.T) {
	brokers := kafkatest.Fake(t)
	ctx := context.Background()
	topics := kafkatest.Topics(t, brokers) // 3 partitions
	cl := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	const n = 5
	produce := func(p int32, n, size int) {
		t.Helper()
		for range n { // each its own batch
			rec := &kgo.Record{Topic: topics.Requested, Partition: p, Value: make([]byte, size)}
			if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(0, 1, 1)
	produce(1, n, 600<<10)

	var past, empty atomic.Int64
	first := make(chan struct{})
	fetched := buffered(func(r *kgo.Record) {
		switch {
		case r.Partition == 0 && r.Offset > 0:
			past.Add(1)
		case r.Partition == 1 && r.Offset == 0:
			close(first)
		case r.Partition == 2:
			empty.Add(1)
		}
	})
	cfg := Config{Brokers: brokers, Topics: topics, Logger: slog.New(slog.DiscardHandler)}
	cfg.setDefaults()
	tr, err := openRange(ctx, cfg, topics.Requested, From{}, io.Discard, kgo.WithHooks(fetched))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.cl.Close()
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("the replay's client fetched nothing")
	}
	produce(0, n, 600<<10)
	produce(2, n, 600<<10)

	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	read, err := tr.read(rctx, cfg, newPace(cfg), io.Discard, func() string { return "" },
		func([]*kgo.Record) error { return nil })
	if err != nil || read != 1+n {
		t.Fatalf("replay read %d events, %v; want %d and no error", read, err, 1+n)
	}
	if got := past.Load(); got > 1 {
		t.Errorf("the replay fetched %d of the %d records written to partition 0 after its end, want at most 1: it went on fetching a partition it was done with", got, n)
	}
	if got := empty.Load(); got > 0 {
		t.Errorf("the replay fetched %d of the %d records written to partition 2, whose range was empty, want none", got, n)
	}
}
