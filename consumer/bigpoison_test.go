package consumer_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/store/storetest"
)

// TestLargePoisonIsDeadLettered: a garbled record of 1,000,000 bytes fits Kafka's default
// max.message.bytes (1,048,588), so a producer other than seckill's can write it to the
// requested topic. Its dead letter is the same bytes plus the reason headers, which is more than
// the consumer's producer takes (franz-go's 1,000,012-byte batch): the produce fails with
// MESSAGE_TOO_LARGE on every retry. It used to be retried until the consumer stopped: no offset
// committed, the partition blocked, and the confirmations of the orders behind it sent again on
// every retry. The consumer must move past it: the poison in the DLQ without its value (the
// headers say how many bytes were left out and where the original is), every offset
// committed, and each order behind it confirmed once on the results topic.
func TestLargePoisonIsDeadLettered(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, brokers []string) {
		ctx := context.Background()
		st := storetest.MustOpen(t, storetest.SQLiteURL(t))
		campaign := openCampaign(t, st, "big", 10, 2, false)
		topics := kafkatest.Topics(t, brokers)
		adm := produceBehindPoison(t, brokers, topics, bytes.Repeat([]byte("x"), 1_000_000), campaign, "ann", "bob")

		runConsumer(t, consumer.Config{Brokers: brokers, Topics: topics}, st)

		waitCommitted(t, adm, topics, "it cannot dead-letter the large record and commits nothing behind it")

		rctx, cancelRead := context.WithTimeout(ctx, 10*time.Second)
		defer cancelRead()
		dead, err := events.ReadTopic(rctx, brokers, topics.DLQ)
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != 1 || len(dead[0].Value) != 0 || events.ValueOmitted(dead[0]) != 1_000_000 ||
			events.Header(dead[0], events.HeaderSourceTopic) != topics.Requested || events.Header(dead[0], events.HeaderSourceOffset) != "0" {
			for _, d := range dead {
				t.Logf("dead letter: key %q, %d bytes of value, headers %q", d.Key, len(d.Value), d.Headers)
			}
			t.Fatalf("%d dead letters; want one, without its value, saying 1000000 bytes were left out of %s offset 0", len(dead), topics.Requested)
		}
		results, err := events.ReadTopic(rctx, brokers, topics.Results)
		if err != nil {
			t.Fatal(err)
		}
		if len(results) != 2 {
			t.Errorf("%d records on the results topic; want the confirmations of ann's and bob's orders, once each", len(results))
		}
	})
}
