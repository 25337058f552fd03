package consumer_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestRedeliveredBatchChangesNothing: the group reads again (its offsets rewound, as a member
// that died before its commit leaves them) a batch whose orders have moved on since: one
// confirmed, one paid, one refunded, one expired unpaid, one the api failed before the
// consumer saw it, beside a new one. Nothing moves back: the store and Redis keep every
// order's state and units, the audit agrees, and nothing is dead-lettered. On both databases.
func TestRedeliveredBatchChangesNothing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, st *store.Store) {
		s := newReplaySale(t, st, 10)
		ann, bob, cat, dan := s.buy("ann"), s.buy("bob"), s.buy("cat"), s.buy("dan")
		eve := s.buy("eve")
		if o, err := s.res.Fail(s.ctx, eve, events.ReasonProduce, "api"); err != nil || o.Status != events.Failed {
			t.Fatalf("the api fails eve's order: %+v %v", o, err)
		}
		s.consume()
		s.pay(bob)
		s.refund(cat)
		s.unpaid(dan)
		s.expire(dan)
		gus := s.buy("gus")

		// Rewind the group to the start of the topic: every event is read again.
		adm := kadm.NewClient(s.cl)
		offs := kadm.Offsets{}
		ends, err := events.EndOffsets(s.ctx, adm, s.topics.Requested)
		if err != nil {
			t.Fatal(err)
		}
		ends.Each(func(o kadm.ListedOffset) {
			offs.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: 0, LeaderEpoch: -1})
		})
		if resp, err := adm.CommitOffsets(s.ctx, s.topics.ConsumerGroup(), offs); err != nil || resp.Error() != nil {
			t.Fatalf("rewind the group: %v %v", err, resp.Error())
		}
		s.consume()

		s.wantOrders(2, []wantOrder{
			{ann, events.Confirmed, ""}, {bob, events.Paid, ""}, {cat, events.Refunded, events.ReasonOperator},
			{dan, events.Expired, events.ReasonUnpaid}, {eve, events.Failed, events.ReasonProduce}, {gus, events.Confirmed, ""},
		})
		s.wantHeld(2, map[string]int64{"ann": 1, "bob": 1, "gus": 1})
		s.wantRedisSold(10, 3)
		if dl := s.deadLetters(); len(dl) > 0 {
			t.Errorf("%d dead letters, want none", len(dl))
		}
	})
}
