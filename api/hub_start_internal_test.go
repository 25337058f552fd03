package api

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
)

// TestHubReadsAnEventSentWhileItStarts: a result produced while the hub looks up where to start
// must be read. The hub starts at the events stamped since it started, which Kafka answers with
// "none" (-1) for a partition with none yet; franz-go's AfterMilli start offset then took the
// partition's end, listed in a second request sent at the same time, and an event that landed
// between Kafka's two answers lay before that end: never read. On real Kafka a hub started as
// an OrderFailed was produced started partition 0 at offset 1 past the event at 0 in 5 runs of
// 45 (the partition growth test's "the hub did not read old's OrderFailed in 30s"); in
// production an api starting, or finding a partition added, skips the units given back at that
// moment and keeps its sold-out flag on. kafka here answers the hub's lookup by time as it would
// have just before the event landed, and holds the answer until the event has.
func TestHubReadsAnEventSentWhileItStarts(t *testing.T) {
	// franz-go sent the two requests from two goroutines, in either order: a few hubs, so that
	// one meets its lookup by time answered first.
	for range 5 {
		kafka := kafkatest.FakeCluster(t)
		brokers := kafka.ListenAddrs()
		topics := kafkatest.Topics(t, brokers)
		looked, landed := make(chan struct{}), make(chan struct{})
		kafka.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
			lr := req.(*kmsg.ListOffsetsRequest)
			if len(lr.Topics) == 0 || len(lr.Topics[0].Partitions) == 0 || lr.Topics[0].Partitions[0].Timestamp < 0 {
				kafka.KeepControl() // not a lookup by time: kafka answers it
				return nil, nil, false
			}
			resp := lr.ResponseKind().(*kmsg.ListOffsetsResponse)
			for _, rt := range lr.Topics {
				st := kmsg.NewListOffsetsResponseTopic()
				st.Topic = rt.Topic
				for _, rp := range rt.Partitions {
					sp := kmsg.NewListOffsetsResponseTopicPartition()
					sp.Partition, sp.Offset, sp.Timestamp = rp.Partition, -1, -1 // nothing on the topic yet
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			close(looked)
			kafka.SleepControl(func() { <-landed })
			return resp, nil, true
		})
		given := make(chan string, 10)
		h, err := newHub(brokers, topics.Results, func(c string) { given <- c }, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		select {
		case <-looked:
		case <-time.After(10 * time.Second):
			t.Fatal("the hub did not look up its start by time in 10s")
		}
		cl := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		rec, err := events.Record(topics.Results, events.Event{Type: events.OrderFailed, Version: events.Version, EventID: events.NewID(),
			OccurredAt: time.Now().UTC(), OrderID: events.NewOrderID("c"), CampaignID: "c", UserID: "u1", Quantity: 1})
		if err != nil {
			t.Fatal(err)
		}
		rec.Partition = 0
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := cl.ProduceSync(ctx, rec).First()
		cancel()
		close(landed)
		if err != nil {
			t.Fatalf("produce: %v", err)
		}
		select {
		case <-given:
		case <-time.After(5 * time.Second):
			t.Fatalf("the hub did not read an OrderFailed (partition 0, offset %d) produced while it looked up where to start, in 5s", r.Offset)
		}
	}
}
