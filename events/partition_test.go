package events_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
)

// TestPartitioner checks the api producer's partitioning: purchases of many buyers produced
// together share one batch, so one partition (hashed by key they would spread over all three),
// while an order's results, each produced on its own, all land in its key's partition, in order.
func TestPartitioner(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, brokers []string) {
		topics := kafkatest.Topics(t, brokers)
		cl, err := events.NewClient(brokers, kgo.ProducerLinger(100*time.Millisecond), topics.Partitioner())
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx := context.Background()

		var mu sync.Mutex
		parts := map[int32]int{}
		var wg sync.WaitGroup
		for i := range 30 {
			wg.Add(1)
			r := &kgo.Record{Topic: topics.Requested, Key: fmt.Appendf(nil, "camp/buyer-%d", i), Value: []byte("{}")}
			cl.Produce(ctx, r, func(r *kgo.Record, err error) {
				defer wg.Done()
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				parts[r.Partition]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if len(parts) != 1 {
			t.Errorf("30 purchases produced together went to partitions %v, want one", parts)
		}

		var order []int64
		var part int32 = -1
		for i := range 10 {
			r := &kgo.Record{Topic: topics.Results, Key: []byte("camp/heidi"), Value: fmt.Appendf(nil, `{"n":%d}`, i)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
			if part >= 0 && r.Partition != part {
				t.Fatalf("result %d of one key in partition %d, the ones before in %d", i, r.Partition, part)
			}
			part = r.Partition
			order = append(order, r.Offset)
		}
		for i := 1; i < len(order); i++ {
			if order[i] <= order[i-1] {
				t.Errorf("offsets of one key's results out of order: %v", order)
			}
		}
	})
}
