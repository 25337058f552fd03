package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestPaymentRacesExpiry pays and expires each of 300 orders at the same instant, the payment
// a millisecond inside its window and the expiry at its end: each order ends one way only, the
// loser's answer says so, and the totals count the paid orders' units and no expired one's.
func TestPaymentRacesExpiry(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		const n = 300
		c := store.Campaign{ID: storetest.Name("pay"), Name: "pay", Stock: n, PerUserLimit: 1,
			StartsAtMs: time.Now().Add(-time.Minute).UnixMilli(), CreatedAtMs: time.Now().UnixMilli(), PaymentWindowMs: 60_000}
		if err := s.CreateCampaign(ctx, c); err != nil {
			t.Fatal(err)
		}
		evs := make([]events.Event, n)
		for i := range evs {
			evs[i] = newEvent(c.ID, storetest.Name("buyer"), 1)
		}
		if _, err := s.ConfirmOrders(ctx, evs); err != nil {
			t.Fatal(err)
		}
		o, err := s.Order(ctx, evs[0].OrderID)
		if err != nil || o.Status != events.Confirmed || o.PayByMs < time.Now().Add(50*time.Second).UnixMilli() {
			t.Fatalf("a confirmed order of a campaign with a 60 s window: %+v %v", o, err)
		}
		// Every window ends at payBy: the payment comes a millisecond before, the expiry at it.
		payBy := time.Now().Add(time.Hour)
		if _, err := s.DB().Exec(s.DB().Rebind(`UPDATE orders SET pay_by_ms = ? WHERE campaign_id = ?`), payBy.UnixMilli(), c.ID); err != nil {
			t.Fatal(err)
		}
		paid, expired := make([]bool, n), make([]bool, n)
		var wg sync.WaitGroup
		for i, e := range evs {
			wg.Add(2)
			go func() {
				defer wg.Done()
				o, changed, err := s.PayOrder(ctx, e.OrderID, "pay-"+e.OrderID, payBy.Add(-time.Millisecond))
				switch {
				case err == nil && changed && o.Status == events.Paid:
					paid[i] = true
				case events.ErrorCode(err) == events.PaymentWindowClosed:
				default:
					t.Errorf("pay %s: %+v changed %v, %v", e.OrderID, o, changed, err)
				}
			}()
			go func() {
				defer wg.Done()
				o, err := s.ExpireOrder(ctx, e.OrderID, payBy)
				switch {
				case err == nil && o.Status == events.Expired:
					expired[i] = true
				case err == nil && o.Status == events.Paid:
				default:
					t.Errorf("expire %s: %+v, %v", e.OrderID, o, err)
				}
			}()
		}
		wg.Wait()
		var nPaid int64
		for i := range evs {
			if paid[i] == expired[i] {
				t.Errorf("order %d: paid %v, expired %v: want one of them", i, paid[i], expired[i])
			}
			if paid[i] {
				nPaid++
			}
		}
		rows := checkTotals(t, s, c)
		got, err := s.Campaign(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Sold != nPaid {
			t.Errorf("sold %d, want the %d paid units", got.Sold, nPaid)
		}
		if units, err := s.PaidUnits(ctx, c.ID); err != nil || units != nPaid {
			t.Errorf("PaidUnits %d, %v; want %d", units, err, nPaid)
		}
		t.Logf("%d orders raced: %d paid, %d expired", n, nPaid, int64(n)-nPaid)
		// What the sweeper lists: the expired ones until their units are marked back, then none.
		todo, err := s.ExpiringOrders(ctx, payBy.Add(time.Second), 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(todo) != n-int(nPaid) {
			t.Errorf("ExpiringOrders lists %d, want the %d expired whose units are not back", len(todo), n-int(nPaid))
		}
		for _, o := range todo {
			if rows[o.OrderID].Status != events.Expired {
				t.Errorf("ExpiringOrders lists %s, which is %s", o.OrderID, rows[o.OrderID].Status)
			}
			if err := s.MarkUnpaid(ctx, o.OrderID); err != nil {
				t.Fatal(err)
			}
		}
		if todo, err := s.ExpiringOrders(ctx, payBy.Add(time.Second), 1000); err != nil || len(todo) != 0 {
			t.Errorf("after MarkUnpaid, ExpiringOrders lists %d, %v", len(todo), err)
		}
	})
}
