package store_test

import (
	"context"
	"strings"
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
		c := mustPayingCampaign(t, s, n, 1, time.Minute)
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
		todo, err := s.ExpiringOrders(ctx, payBy.Add(time.Second), store.ExpiryKey{}, 1000)
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
		if todo, err := s.ExpiringOrders(ctx, payBy.Add(time.Second), store.ExpiryKey{}, 1000); err != nil || len(todo) != 0 {
			t.Errorf("after MarkUnpaid, ExpiringOrders lists %d, %v", len(todo), err)
		}
	})
}

// payConfirmed confirms n orders of one unit each, of n buyers, in a campaign with an hour's
// payment window, and returns their events.
func payConfirmed(t *testing.T, s *store.Store, n int) []events.Event {
	t.Helper()
	c := mustPayingCampaign(t, s, int64(n), 1, time.Hour)
	evs := make([]events.Event, n)
	for i := range evs {
		evs[i] = newEvent(c.ID, storetest.Name("buyer"), 1)
	}
	confirm(t, s, evs...)
	return evs
}

// wantReused fails the test unless err refuses a payment as reused and the order is still
// confirmed and unpaid.
func wantReused(t *testing.T, s *store.Store, orderID string, o store.Order, changed bool, err error) {
	t.Helper()
	if events.ErrorCode(err) != events.PaymentReused || changed {
		t.Errorf("pay %s with a payment of another order: changed %v, %v; want %s", orderID, changed, err, events.PaymentReused)
	}
	if o.Status != events.Confirmed || o.PaymentID != "" {
		t.Errorf("a refused payment returned %+v, want the order as it is: confirmed, unpaid", o)
	}
	if got := wantStatus(t, s, orderID, events.Confirmed); got.PaymentID != "" {
		t.Errorf("a refused payment left payment id %q on %s", got.PaymentID, orderID)
	}
}

// TestPaymentPaysOneOrder: a payment id pays one order. The same order paid with it again is
// the idempotent answer; another order, of another buyer, is refused and stays confirmed; and
// a payment the store refused for its order claims nothing.
func TestPaymentPaysOneOrder(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		now := time.Now()
		evs := payConfirmed(t, s, 3)
		a, b, late := evs[0].OrderID, evs[1].OrderID, evs[2].OrderID
		if o, changed, err := s.PayOrder(ctx, a, "pay-1", now); err != nil || !changed || o.Status != events.Paid {
			t.Fatalf("pay %s: %+v changed %v, %v", a, o, changed, err)
		}
		if o, changed, err := s.PayOrder(ctx, a, "pay-1", now); err != nil || changed || o.Status != events.Paid || o.PaymentID != "pay-1" {
			t.Errorf("pay %s again with its payment: %+v changed %v, %v; want it paid, unchanged", a, o, changed, err)
		}
		o, changed, err := s.PayOrder(ctx, b, "pay-1", now)
		wantReused(t, s, b, o, changed, err)
		if !strings.Contains(events.ErrorMessage(err), a) {
			t.Errorf("the refusal %q does not name the order the payment paid, %s", events.ErrorMessage(err), a)
		}
		if o, changed, err := s.PayOrder(ctx, b, "pay-2", now); err != nil || !changed || o.Status != events.Paid {
			t.Errorf("pay %s with a payment of its own: %+v changed %v, %v", b, o, changed, err)
		}

		// Refused past its window, the payment is not the late order's: it may pay another.
		if _, _, err := s.PayOrder(ctx, late, "pay-3", now.Add(2*time.Hour)); events.ErrorCode(err) != events.PaymentWindowClosed {
			t.Fatalf("pay %s past its window: %v, want %s", late, err, events.PaymentWindowClosed)
		}
		if o, changed, err := s.PayOrder(ctx, late, "pay-3", now); err != nil || !changed || o.Status != events.Paid {
			t.Errorf("pay %s in its window with a payment refused before: %+v changed %v, %v", late, o, changed, err)
		}

		// A refunded order keeps its payment: the payer is refunded, no one else may use it.
		if o, err := s.RefundOrder(ctx, a); err != nil || o.Status != events.Refunded || o.PaymentID != "pay-1" {
			t.Fatalf("refund %s: %+v, %v; want refunded with its payment id", a, o, err)
		}
		more := payConfirmed(t, s, 1)[0].OrderID
		o, changed, err = s.PayOrder(ctx, more, "pay-1", now)
		wantReused(t, s, more, o, changed, err)
	})
}

// TestPaymentPaysOneOrderConcurrently pays 20 orders of 20 buyers with one payment id at once:
// one is paid, the other 19 are refused and stay confirmed, whichever transaction commits
// first.
func TestPaymentPaysOneOrderConcurrently(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		evs := payConfirmed(t, s, 20)
		type answer struct {
			o       store.Order
			changed bool
			err     error
		}
		answers := make([]answer, len(evs))
		var wg sync.WaitGroup
		for i, e := range evs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o, changed, err := s.PayOrder(ctx, e.OrderID, "pay-once", time.Now())
				answers[i] = answer{o, changed, err}
			}()
		}
		wg.Wait()
		paid := 0
		for i, a := range answers {
			if a.err == nil && a.changed && a.o.Status == events.Paid {
				paid++
				wantStatus(t, s, evs[i].OrderID, events.Paid)
				continue
			}
			wantReused(t, s, evs[i].OrderID, a.o, a.changed, a.err)
		}
		if paid != 1 {
			t.Errorf("%d orders paid with one payment, want 1", paid)
		}
	})
}

// TestPaymentsMigrateOverReusedPayments migrates a database in which the payment service paid
// two orders with one payment, as it could before payments named one order each: the
// migration goes through and leaves both paid, a retry of either with its payment is still the
// idempotent answer, and a third order cannot take the payment.
func TestPaymentsMigrateOverReusedPayments(t *testing.T) {
	storetest.EachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		const beforePayments = 6 // the last migration of the release that paid orders without them
		s := openAt(t, url, beforePayments)
		evs := payConfirmed(t, s, 3)
		twice := []string{evs[0].OrderID, evs[1].OrderID}
		for _, id := range twice {
			if _, err := s.DB().Exec(s.DB().Rebind(`UPDATE orders SET status = 'paid', payment_id = 'pay-twice' WHERE order_id = ?`), id); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("migrate over one payment of two orders: %v", err)
		}
		for _, id := range twice {
			if o, changed, err := s.PayOrder(ctx, id, "pay-twice", time.Now()); err != nil || changed || o.Status != events.Paid {
				t.Errorf("pay %s again with the payment it was paid with: %+v changed %v, %v; want it paid, unchanged", id, o, changed, err)
			}
		}
		o, changed, err := s.PayOrder(ctx, evs[2].OrderID, "pay-twice", time.Now())
		wantReused(t, s, evs[2].OrderID, o, changed, err)
	})
}

// TestPaymentOfACancelledCampaign: an order its campaign's cancel has not refunded yet is not
// paid, on both databases; the refusal claims no payment, and a payment stored before the
// cancel is still answered as paid.
func TestPaymentOfACancelledCampaign(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		evs := payConfirmed(t, s, 3)
		if _, _, err := s.PayOrder(ctx, evs[0].OrderID, "p-before", time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ChangeCampaign(ctx, evs[0].CampaignID, func(c *store.Campaign) error {
			c.CancelledAtMs = time.Now().UnixMilli()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if o, changed, err := s.PayOrder(ctx, evs[1].OrderID, "p-after", time.Now()); events.ErrorCode(err) != events.CampaignCancelled || changed {
			t.Errorf("pay an order of a cancelled campaign: %+v changed %v, %v; want %s", o, changed, err, events.CampaignCancelled)
		}
		wantStatus(t, s, evs[1].OrderID, events.Confirmed)
		// The refused payment claimed nothing: another order may still take its id.
		if _, changed, err := s.PayOrder(ctx, evs[2].OrderID, "p-after", time.Now()); events.ErrorCode(err) != events.CampaignCancelled || changed {
			t.Errorf("pay another order of it with the refused id: changed %v, %v; want %s", changed, err, events.CampaignCancelled)
		}
		if o, _, err := s.PayOrder(ctx, evs[0].OrderID, "p-before", time.Now()); err != nil || o.Status != events.Paid {
			t.Errorf("the payment from before the cancel, again: %+v %v; want it paid, as it is", o, err)
		}
		// A replay records a payment the restored store lacks as of the time it was taken:
		// one taken before the cancel is recorded, for the cancel's refund to name it.
		if o, changed, err := s.PayOrder(ctx, evs[2].OrderID, "p-replayed", time.Now().Add(-time.Minute)); err != nil || !changed || o.Status != events.Paid {
			t.Errorf("a payment taken before the cancel, recorded by a replay: %+v changed %v, %v; want it paid", o, changed, err)
		}
	})
}

// TestConfirmedTakesALimit: the sweeper refunds a page of a cancelled campaign's orders a
// sweep, and reads no more than that page from the store; 0 reads them all, on both databases.
func TestConfirmedTakesALimit(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		evs := payConfirmed(t, s, 5)
		if _, _, err := s.PayOrder(ctx, evs[0].OrderID, "p-0", time.Now()); err != nil {
			t.Fatal(err)
		}
		for limit, want := range map[int]int{0: 5, 2: 2, 5: 5, 9: 5} {
			if os, err := s.Confirmed(ctx, evs[0].CampaignID, limit); err != nil || len(os) != want {
				t.Errorf("Confirmed with limit %d: %d orders (%v), want %d", limit, len(os), err, want)
			}
		}
	})
}

// openAt opens the database at url migrated to version only, as an earlier release left it,
// and closes it when the test ends.
func openAt(t *testing.T, url string, version int) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := store.MigrateTo(context.Background(), s, version); err != nil {
		t.Fatal(err)
	}
	return s
}
