package consumer_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/store/storetest"
)

// TestUnstorableEventIsPoison: an event the store could never take is poison. It goes to the
// dead-letter topic, and the orders before and after it in the same batch are stored. Here: a
// user id with a NUL byte (PostgreSQL's text refuses it) and a quantity whose sum with the
// buyer's other units overflows int64 (PostgreSQL's bigint refuses it). Had Decode taken
// them, the store would refuse their whole batch on every retry; the partition would stall and
// every accepted order in and after that batch would fail at its deadline.
func TestUnstorableEventIsPoison(t *testing.T) {
	for _, tc := range []struct {
		name   string
		poison func(campaign string) events.Event
	}{
		{"nul byte in user id", func(c string) events.Event { return orderEvent(c, "mallory\x00", 1) }},
		// ann's first unit is in the same batch, so ann holds 1 when this one is decided.
		{"quantity that overflows", func(c string) events.Event { return orderEvent(c, "ann", math.MaxInt64) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := storetest.MustOpen(t, storetest.PostgresURL(t))
			campaign := openCampaign(t, st, "poison", 10, 2, false)
			brokers := kafkatest.Fake(t)
			topics := kafkatest.Topics(t, brokers)

			before, poison, after := orderEvent(campaign, "ann", 1), tc.poison(campaign), orderEvent(campaign, "bob", 1)
			cl := kafkatest.Client(t, brokers)
			var recs []*kgo.Record
			for _, e := range []events.Event{before, poison, after} {
				rec, err := events.Record(topics.Requested, e)
				if err != nil {
					t.Fatal(err)
				}
				rec.Key = []byte("one-partition") // one partition, one batch
				recs = append(recs, rec)
			}
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}

			runConsumer(t, consumer.Config{Brokers: brokers, Topics: topics}, st)

			deadline := time.Now().Add(30 * time.Second)
			for {
				_, errBefore := st.Order(ctx, before.OrderID)
				_, errAfter := st.Order(ctx, after.OrderID)
				if errBefore == nil && errAfter == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after 30s the buyers' orders beside the poison event are not stored (ann: %v; bob: %v): the partition is stalled", errBefore, errAfter)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if o, err := st.Order(ctx, poison.OrderID); events.ErrorCode(err) != events.OrderNotFound {
				t.Errorf("the poison order is in the store: %+v, %v", o, err)
			}
			dl := deadLetters(t, brokers, topics.DLQ, 1)
			if reason := events.Header(dl[0], events.HeaderReason); string(dl[0].Value) != string(recs[1].Value) ||
				!strings.HasPrefix(reason, events.ReasonPoison) {
				t.Errorf("dead letter %s (reason %q), want the poison event %s with reason %s", dl[0].Value, reason, recs[1].Value, events.ReasonPoison)
			}
		})
	}
}

// deadLetters reads the first n records of the dead-letter topic, failing after 30s.
func deadLetters(t *testing.T, brokers []string, dlq string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %d dead letters after 30s", len(out), n)
		}
		out = append(out, fs.Records()...)
	}
	return out
}
