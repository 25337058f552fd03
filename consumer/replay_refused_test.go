package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestReplayKeepsAConfirmedOrderTheStoreRefuses: the store is restored from a backup taken
// before the campaign was created, so it has neither the campaign's row nor Ann's order, which
// the consumer confirmed in the store and in Redis before the loss. A replay meets her order,
// and the store refuses it (campaign_not_found). Redis holds it confirmed, with the unit sold:
// the replay leaves it out of the store and out of the DLQ, for the operator to restore the
// campaign and replay again, which confirms it. Before, the replay dead-lettered it, the
// compensator stored it failed and announced OrderFailed to a buyer told confirmed, while the
// release left Redis's confirmed reservation alone: the order ended twice, and its unit stayed
// sold to nobody. On both databases.
func TestReplayKeepsAConfirmedOrderTheStoreRefuses(t *testing.T) {
	storetest.Each(t, testReplayRefusedConfirmed)
}

func testReplayRefusedConfirmed(t *testing.T, st *store.Store) {
	const stock = 2
	s := newReplaySale(t, st, stock)
	c, err := st.Campaign(s.ctx, s.campaign)
	if err != nil {
		t.Fatal(err)
	}
	ann := s.buy("ann")
	s.confirm(ann)

	db := st.DB()
	for _, q := range []string{`DELETE FROM orders WHERE campaign_id = ?`, `DELETE FROM purchases WHERE campaign_id = ?`, `DELETE FROM campaigns WHERE id = ?`} {
		if _, err := db.ExecContext(s.ctx, db.Rebind(q), s.campaign); err != nil {
			t.Fatal(err)
		}
	}
	if stats := s.replay(consumer.From{}); stats.Events != 1 || stats.Refused != 1 {
		t.Errorf("replay: %+v, want 1 event, 1 refused", stats)
	}
	// What the compensator does with the replay's dead letters (Compensator.deadLetter).
	for _, rec := range s.deadLetters() {
		e, err := events.Decode(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.res.Fail(s.ctx, e, events.Header(rec, events.HeaderReason), "dlq"); err != nil {
			t.Fatal(err)
		}
	}
	s.wantRedisSold(stock, 1)
	if o, err := st.Order(s.ctx, ann.OrderID); events.ErrorCode(err) != events.OrderNotFound {
		t.Errorf("ann's order in the store: %q (%q) %v, want none while Redis holds it confirmed and the campaign is missing", o.Status, o.Reason, err)
	}

	// The operator restores the campaign's row and replays again.
	c.Sold = 0
	if err := st.CreateCampaign(s.ctx, c); err != nil {
		t.Fatal(err)
	}
	if stats := s.replay(consumer.From{}); stats.Events != 1 || stats.Refused != 0 {
		t.Errorf("replay #2: %+v, want 1 event, none refused", stats)
	}
	s.wantOrders(2, []wantOrder{{ann, events.Confirmed, ""}})
	s.wantHeld(2, map[string]int64{"ann": 1})
	s.wantRedisSold(stock, 1)
}

// wantRedisSold checks that Redis's remaining stock and confirmed units add up to stock, with
// sold units confirmed.
func (s *replaySale) wantRedisSold(stock, sold int64) {
	s.t.Helper()
	snap, err := s.r.Snapshot(s.ctx, s.campaign)
	if err != nil {
		s.t.Fatal(err)
	}
	var confirmed int64
	for _, r := range snap.Reservations {
		if r.State == lua.StateConfirmed {
			confirmed += int64(r.Quantity)
		}
	}
	if snap.Remaining+confirmed != stock || confirmed != sold {
		s.t.Errorf("Redis: %d remaining, %d confirmed; want %d in all, %d confirmed", snap.Remaining, confirmed, stock, sold)
	}
}

// deadLetters reads every record on the DLQ topic.
func (s *replaySale) deadLetters() []*kgo.Record {
	s.t.Helper()
	cl := kafkatest.Client(s.t, s.brokers, kgo.ConsumeTopics(s.topics.DLQ), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ends, err := events.EndOffsets(s.ctx, kadm.NewClient(cl), s.topics.DLQ)
	if err != nil {
		s.t.Fatal(err)
	}
	var want int64
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for int64(len(recs)) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			s.t.Fatalf("read %d of %d dead letters: %v", len(recs), want, err)
		}
		recs = append(recs, fs.Records()...)
	}
	return recs
}
