package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestSweepListsPage: the sweeper reads its lists (ExpiringOrders, UnfinishedRefunds) a page
// at a time, each page after the last one's final key, until a short page ends the list. Paged
// so, from the top, each list gives every order on it once, and nothing else; orders that
// share a pay_by (a batch confirmed together) are told apart by order id, so none is skipped
// at a page's edge.
func TestSweepListsPage(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		const n, page = 12, 2
		c := mustPayingCampaign(t, s, n, 1, time.Hour)
		ids := make([]string, n)
		for i := range ids {
			ev := newEvent(c.ID, storetest.Name("buyer"), 1)
			if _, err := s.ConfirmOrders(ctx, []events.Event{ev}); err != nil {
				t.Fatal(err)
			}
			ids[i] = ev.OrderID
		}
		// Orders 0–2 share one past pay_by, 3–5 an earlier one, 6–11 a future one.
		now := time.Now()
		for _, r := range []struct {
			from, to int
			payBy    time.Time
		}{{0, 3, now.Add(-time.Minute)}, {3, 6, now.Add(-2 * time.Minute)}, {6, n, now.Add(time.Hour)}} {
			for _, id := range ids[r.from:r.to] {
				if _, err := s.DB().Exec(s.DB().Rebind(`UPDATE orders SET pay_by_ms = ? WHERE order_id = ?`), r.payBy.UnixMilli(), id); err != nil {
					t.Fatal(err)
				}
			}
		}
		// 1 and 4 expired with their units not back yet: on the list still, with their pay_by.
		for _, i := range []int{1, 4} {
			if _, err := s.ExpireOrder(ctx, ids[i], now); err != nil {
				t.Fatal(err)
			}
		}
		// 6–8 refunded with their units not back; 9 refunded and finished.
		for _, i := range []int{6, 7, 8, 9} {
			if _, _, err := s.RefundOrder(ctx, ids[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.MarkRefunded(ctx, ids[9]); err != nil {
			t.Fatal(err)
		}

		pages := func(list string, next func() ([]store.Order, error)) map[string]int {
			t.Helper()
			listed := map[string]int{}
			for range n { // at most n pages: more means a page came back again
				got, err := next()
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range got {
					listed[o.OrderID]++
				}
				if len(got) < page {
					return listed
				}
			}
			t.Fatalf("%s: still full pages after %d", list, n)
			return nil
		}
		want := func(list string, listed map[string]int, want ...int) {
			t.Helper()
			for _, i := range want {
				if listed[ids[i]] != 1 {
					t.Errorf("%s lists order %d %d times, want once", list, i, listed[ids[i]])
				}
				delete(listed, ids[i])
			}
			if len(listed) != 0 {
				t.Errorf("%s lists orders it should not: %v", list, listed)
			}
		}

		var after store.ExpiryKey
		want("ExpiringOrders", pages("ExpiringOrders", func() ([]store.Order, error) {
			got, err := s.ExpiringOrders(ctx, now, after, page)
			if len(got) > 0 {
				after = got[len(got)-1].ExpiryKey()
			}
			return got, err
		}), 0, 1, 2, 3, 4, 5)
		var afterID string
		want("UnfinishedRefunds", pages("UnfinishedRefunds", func() ([]store.Order, error) {
			got, err := s.UnfinishedRefunds(ctx, afterID, page)
			if len(got) > 0 {
				afterID = got[len(got)-1].OrderID
			}
			return got, err
		}), 6, 7, 8)
	})
}
