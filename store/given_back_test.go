package store_test

import (
	"context"
	"testing"

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
		row := func(e events.Event, st events.Status, reason string) store.Order {
			return store.Order{OrderID: e.OrderID, CampaignID: e.CampaignID, UserID: e.UserID, Quantity: int64(e.Quantity),
				Status: st, Reason: reason, CreatedAtMs: e.OccurredAt.UnixMilli()}
		}
		orders := []store.Order{row(failed, events.Failed, events.ReasonReleasedBeforeReplay), row(refunded, events.Refunded, events.ReasonOperator),
			row(expired, events.Expired, events.ReasonUnpaid), row(kept, events.Failed, events.ReasonReleasedBeforeReplay),
			row(failed, events.Failed, events.ReasonReleasedBeforeReplay)} // a redelivered event: one row

		for i, want := range []int{3, 0} {
			if n, err := s.RecordGivenBack(ctx, orders); err != nil || n != want {
				t.Errorf("RecordGivenBack #%d = %d, %v; want %d stored", i+1, n, err, want)
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
		if _, err := s.RecordGivenBack(ctx, []store.Order{row(newEvent(c.ID, "fay", 1), events.Confirmed, "")}); err == nil {
			t.Error("RecordGivenBack of a confirmed order: nil error")
		}
	})
}
