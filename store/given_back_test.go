package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestRecordGivenBack: replay records orders the store lost whose units were given back. They
// come back with their status and reason, hold no units (the campaign's one unit is still for
// sale), an order the store has already is left alone, an order twice in one call is stored
// once, and a second call stores nothing.
func TestRecordGivenBack(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		c := mustCampaign(t, s, 1, 1)
		failed, refunded, expired, kept := newEvent(c.ID, "ann", 1), newEvent(c.ID, "bob", 1), newEvent(c.ID, "cy", 1), newEvent(c.ID, "dee", 1)
		if _, err := s.FailOrder(ctx, kept, events.ReasonOperator); err != nil {
			t.Fatal(err)
		}
		orders := []store.Order{givenBackRow(failed, events.Failed, events.ReasonReleasedBeforeReplay), givenBackRow(refunded, events.Refunded, events.ReasonOperator),
			givenBackRow(expired, events.Expired, events.ReasonUnpaid), givenBackRow(kept, events.Failed, events.ReasonReleasedBeforeReplay),
			givenBackRow(failed, events.Failed, events.ReasonReleasedBeforeReplay)} // a redelivered event: one row

		for i, want := range []int{3, 0} {
			if n, moved, err := s.RecordGivenBack(ctx, orders); err != nil || n != want || moved != 0 {
				t.Errorf("RecordGivenBack #%d = %d stored, %d moved, %v; want %d stored", i+1, n, moved, err, want)
			}
		}
		for _, o := range orders[:3] {
			got := wantStatus(t, s, o.OrderID, o.Status)
			if got.Reason != o.Reason || got.UserID != o.UserID || got.Quantity != o.Quantity || got.CreatedAtMs != o.CreatedAtMs {
				t.Errorf("order %s = %+v, want %+v", o.OrderID, got, o)
			}
		}
		if o := wantStatus(t, s, kept.OrderID, events.Failed); o.Reason != events.ReasonOperator {
			t.Errorf("the order stored before = %+v, want its reason %q kept", o, events.ReasonOperator)
		}
		wantSold(t, s, c.ID, 0)
		wantHoldings(t, s, c.ID, map[string]int64{})

		// The persister finds them final, and the unit goes to the next buyer.
		wantResults(t, confirm(t, s, failed, refunded, expired, newEvent(c.ID, "eve", 1)),
			store.Result{Status: events.Failed, Duplicate: true}, store.Result{Status: events.Refunded, Duplicate: true},
			store.Result{Status: events.Expired, Duplicate: true}, confirmed)
		wantSold(t, s, c.ID, 1)

		// A status that holds units is refused: it would need sold and bought.
		if _, _, err := s.RecordGivenBack(ctx, []store.Order{givenBackRow(newEvent(c.ID, "fay", 1), events.Confirmed, "")}); err == nil {
			t.Error("RecordGivenBack of a confirmed order: nil error")
		}
	})
}

// givenBackRow is the row Redis tells of e's order: ended as st, for reason.
func givenBackRow(e events.Event, st events.Status, reason string) store.Order {
	return store.Order{OrderID: e.OrderID, CampaignID: e.CampaignID, UserID: e.UserID, Quantity: int64(e.Quantity),
		Status: st, Reason: reason, CreatedAtMs: e.OccurredAt.UnixMilli()}
}

// TestRecordGivenBackMovesHeldOrders: orders a store restored from a backup holds confirmed,
// which Redis has refunded or expired since, are moved on as Redis ended them, their units off
// sold and off their buyers' totals, with the reason that says the units are back in Redis.
// An order the store holds paid is not expired (Redis expired it unpaid, so the store's payment
// came after), a failed status moves nothing, and a second call moves nothing.
func TestRecordGivenBackMovesHeldOrders(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		c := mustPayingCampaign(t, s, 4, 1, time.Minute)
		refunded, expired, paid, failed := newEvent(c.ID, "ann", 1), newEvent(c.ID, "bob", 1), newEvent(c.ID, "cy", 1), newEvent(c.ID, "dee", 1)
		confirm(t, s, refunded, expired, paid, failed)
		if _, _, err := s.PayOrder(ctx, paid.OrderID, "pay-cy", time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB().Exec(s.DB().Rebind(`UPDATE orders SET pay_by_ms = ? WHERE campaign_id = ?`), time.Now().Add(-time.Second).UnixMilli(), c.ID); err != nil {
			t.Fatal(err)
		}
		orders := []store.Order{givenBackRow(refunded, events.Refunded, events.ReasonOperator), givenBackRow(expired, events.Expired, events.ReasonUnpaid),
			givenBackRow(paid, events.Expired, events.ReasonUnpaid), givenBackRow(failed, events.Failed, events.ReasonReleasedBeforeReplay)}
		for i, want := range []int{2, 0} {
			if n, moved, err := s.RecordGivenBack(ctx, orders); err != nil || n != 0 || moved != want {
				t.Errorf("RecordGivenBack #%d = %d stored, %d moved, %v; want %d moved", i+1, n, moved, err, want)
			}
		}
		for _, o := range orders[:2] {
			if got := wantStatus(t, s, o.OrderID, o.Status); got.Reason != o.Reason {
				t.Errorf("order %s moved on with reason %q, want %q", o.OrderID, got.Reason, o.Reason)
			}
		}
		wantStatus(t, s, paid.OrderID, events.Paid)
		wantStatus(t, s, failed.OrderID, events.Confirmed)
		wantSold(t, s, c.ID, 2)
		wantHoldings(t, s, c.ID, map[string]int64{"cy": 1, "dee": 1})
	})
}
