package api

import (
	"context"
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
		// An event on the topic as it was, sent as the hub starts, once: read within seconds
		// (the topic created a moment before may not be on its broker yet, which the hub asks
		// again every second). The hub once started past it, never to read it.
		failed(0, "old")
		if !read("old", 10*time.Second) {
			t.Fatal("the hub did not read old's OrderFailed in 10s")
		}

		kafkatest.GrowPartitions(t, brokers, topics.Results, 4)
		failed(3, "new")
		if !read("new", 45*time.Second) {
			t.Fatal("the hub did not read new's OrderFailed, on the partition added while it ran, in 45s")
		}
	})
}
