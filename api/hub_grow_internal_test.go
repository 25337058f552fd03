package api

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
)

// TestHubReadsAPartitionAddedWhileItRuns: the results topic grown while the api runs (the
// topics share --partitions, and an operator grows them together) gets results on the new
// partition from the consumer and the compensator. The hub must read them within seconds, as
// units given back reach every api's sold-out flag within a second: left to franz-go's
// 5-minute metadata refresh, a campaign stayed sold out at this api that long with units back
// on sale.
func TestHubReadsAPartitionAddedWhileItRuns(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, brokers []string) {
		topics := kafkatest.Topics(t, brokers) // 3 partitions
		given := make(chan string, 10)
		h, err := newHub(brokers, topics.Results, func(c string) { given <- c }, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		failed := func(p int32, campaign string) {
			// A client of its own, which knows the partitions the topic has now, and asks again
			// while a broker does not know them yet (the growth reaches each at its own pace):
			// it refuses a partition it has not heard of at once, without asking.
			cl := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
			t.Helper()
			rec, err := events.Record(topics.Results, events.Event{Type: events.OrderFailed, Version: events.Version, EventID: events.NewID(),
				OccurredAt: time.Now().UTC(), OrderID: events.NewOrderID(campaign), CampaignID: campaign, UserID: "u1", Quantity: 1})
			if err != nil {
				t.Fatal(err)
			}
			rec.Partition = p
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err := cl.ProduceSync(ctx, rec).FirstErr()
				cancel()
				if err == nil {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("produce to partition %d: %v", p, err)
				}
				cl.ForceMetadataRefresh()
			}
		}
		read := func(campaign string, within time.Duration) bool {
			timeout := time.After(within)
			for {
				select {
				case c := <-given:
					if c == campaign {
						return true
					}
				case <-timeout:
					return false
				}
			}
		}
		// The hub reads the topic as it was: an event a few seconds apart until it reads one.
		// Its first read of a topic created a moment before waits for the topic to reach its
		// brokers' metadata, which on a loaded broker took more than the 30 s this once allowed.
		for i, start := 0, time.Now(); ; i++ {
			old := fmt.Sprintf("old-%d", i)
			failed(0, old)
			if read(old, 3*time.Second) {
				t.Logf("the hub read partition 0 after %d events, %v", i+1, time.Since(start).Round(time.Millisecond))
				break
			}
			if time.Since(start) > 90*time.Second {
				t.Fatalf("the hub read none of %d OrderFailed events on partition 0 in 90s", i+1)
			}
		}

		kafkatest.GrowPartitions(t, brokers, topics.Results, 4)
		failed(3, "new")
		if !read("new", 45*time.Second) {
			t.Fatal("the hub did not read new's OrderFailed, on the partition added while it ran, in 45s")
		}
	})
}
