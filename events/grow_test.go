package events_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events/kafkatest"
)

// TestGroupConsumesAPartitionAddedWhileItRuns: an operator grows the requested topic during a
// sale, and an api that learned of the new partition first produces purchases to it. The
// group must consume them well within a reservation's time (2 min by default): left to
// franz-go's 5-minute metadata refresh, they waited for it, and the sweeper failed orders
// that had been answered 202.
func TestGroupConsumesAPartitionAddedWhileItRuns(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, brokers []string) {
		topics := kafkatest.Topics(t, brokers) // 3 partitions
		group := topics.ConsumerGroup()
		got := make(chan *kgo.Record, 100)
		runPipelined(t, brokers, group, topics.Requested, slog.New(slog.DiscardHandler), func(fs kgo.Fetches) func() error {
			fs.EachRecord(func(r *kgo.Record) { got <- r })
			return nil
		})
		// The member is consuming: a record on an old partition comes through.
		produceN(t, brokers, topics.Requested, 1)
		select {
		case <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("the member did not consume a record in 30s")
		}

		kafkatest.GrowPartitions(t, brokers, topics.Requested, 4)
		// A new producer (an api started after the growth) knows partition 3.
		cl := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		r := &kgo.Record{Topic: topics.Requested, Partition: 3, Value: []byte(strconv.Itoa(1))}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := cl.ProduceSync(ctx, r).FirstErr()
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("produce to the new partition: %v", err)
			}
		}
		const within = 45 * time.Second
		timeout := time.After(within)
		for {
			select {
			case rec := <-got:
				if rec.Partition == 3 {
					return
				}
			case <-timeout:
				t.Fatalf("the group did not consume the record on the partition added while it ran in %v", within)
			}
		}
	})
}
