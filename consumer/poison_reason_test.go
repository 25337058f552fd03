package consumer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/store/storetest"
)

// TestPoisonWithALargeReasonIsDeadLettered: a poison record of 300 kB (a third of what any
// producer takes) whose order id is 300,000 DEL bytes. Validate quotes the order id in its
// reason, and %q writes each DEL as \x7f: the reason header was 1.2 MB, so the dead letter was
// too large with its value and still too large without it, retried for ever with nothing
// behind it committed. The reason is cut to a kilobyte.
func TestPoisonWithALargeReasonIsDeadLettered(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, brokers []string) {
		ctx := context.Background()
		st := storetest.MustOpen(t, storetest.SQLiteURL(t))
		campaign := openCampaign(t, st, "reason", 10, 2, false)
		topics := kafkatest.Topics(t, brokers)
		other, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		poison := `{"type":"OrderRequested","version":1,"event_id":"e","order_id":"` + campaign + `.` +
			strings.Repeat("\x7f", 300_000) + `","campaign_id":"other","user_id":"u","quantity":1}`
		recs := []*kgo.Record{{Topic: topics.Requested, Key: []byte("k"), Value: []byte(poison)}}
		rec, err := events.Record(topics.Requested, orderEvent(campaign, "ann", 1))
		if err != nil {
			t.Fatal(err)
		}
		rec.Key = []byte("k")
		recs = append(recs, rec)
		if err := other.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}

		runConsumer(t, consumer.Config{Brokers: brokers, Topics: topics}, st)

		waitCommitted(t, kadm.NewClient(other), topics, "the 300 kB poison record blocks its partition")
	})
}
