package consumer_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store/storetest"
)

// TestReplayDoesNotDeadLetterAgain: the consumer dead-lettered the poison events and the store's
// refusals of a range when it read them first, and the compensator resolved them. A replay of
// the range counts them and writes no dead letter: it wrote each again, which doubled them in
// `seckill dlq stats` and fired the dead-letter alert at every replay.
func TestReplayDoesNotDeadLetterAgain(t *testing.T) {
	s := newReplaySale(t, storetest.MustOpen(t, storetest.SQLiteURL(t)), 1)
	ann := s.buy("ann")
	s.confirm(ann)
	// Bob's order came when the unit was Ann's: the store refused it, and the compensator
	// released his reservation, whose record Redis has since dropped (a day after).
	s.produce(s.topics.Requested, orderEvent(s.campaign, "bob", 1))
	if err := s.cl.ProduceSync(s.ctx, &kgo.Record{Topic: s.topics.Requested, Partition: 0, Value: []byte("{not an event")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	stats := s.replay(consumer.From{})
	if stats.Events != 3 || stats.Poison != 1 || stats.Refused != 1 {
		t.Errorf("replay: %+v, want 3 events, 1 poison, 1 refused", stats)
	}
	letters, err := events.ReadTopic(s.ctx, s.brokers, s.topics.DLQ)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range letters {
		t.Errorf("the replay dead-lettered %s/%s again: %s", events.Header(l, events.HeaderSourcePartition),
			events.Header(l, events.HeaderSourceOffset), events.Header(l, events.HeaderReason))
	}
	s.wantOrders(1, []wantOrder{{ann, events.Confirmed, ""}})
}
