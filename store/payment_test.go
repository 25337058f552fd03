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
		if o, _, err := s.RefundOrder(ctx, a); err != nil || o.Status != events.Refunded || o.PaymentID != "pay-1" {
			t.Fatalf("refund %s: %+v, %v; want refunded with its payment id", a, o, err)
		}
		more := payConfirmed(t, s, 1)[0].OrderID
		o, changed, err = s.PayOrder(ctx, more, "pay-1", now)
		wantReused(t, s, more, o, changed, err)
	})
}

// TestNameRefundedPayment: a replay names the payment of an order the store holds refunded
// without one (it came back from Redis, which keeps no payment). The refund is left to announce
// again; naming it again changes nothing; the payment of another order, a refunded order with
// a payment of its own, and an order not refunded are refused or left as they are, and claim
// nothing.
func TestNameRefundedPayment(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		evs := payConfirmed(t, s, 4)
		lost, other, paid, confirmed := evs[0].OrderID, evs[1].OrderID, evs[2].OrderID, evs[3].OrderID
		if _, _, err := s.PayOrder(ctx, paid, "pay-paid", time.Now()); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{lost, other, paid} {
			if _, _, err := s.RefundOrder(ctx, id); err != nil {
				t.Fatal(err)
			}
			if err := s.MarkRefunded(ctx, id); err != nil {
				t.Fatal(err)
			}
		}

		for i, want := range []bool{true, false} {
			if changed, err := s.NameRefundedPayment(ctx, lost, "pay-lost"); err != nil || changed != want {
				t.Errorf("name the payment #%d: changed %v, %v; want %v", i+1, changed, err, want)
			}
			if o := wantStatus(t, s, lost, events.Refunded); o.PaymentID != "pay-lost" || o.Reason != "" {
				t.Errorf("#%d: %+v; want refunded, paid by pay-lost, its refund unfinished", i+1, o)
			}
		}
		if changed, err := s.NameRefundedPayment(ctx, other, "pay-lost"); events.ErrorCode(err) != events.PaymentReused || changed {
			t.Errorf("name another order's payment: changed %v, %v; want %s", changed, err, events.PaymentReused)
		}
		for _, id := range []string{paid, confirmed} {
			if changed, err := s.NameRefundedPayment(ctx, id, "pay-free"); err != nil || changed {
				t.Errorf("name a payment of %s: changed %v, %v; want unchanged", id, changed, err)
			}
		}
		if o := wantStatus(t, s, other, events.Refunded); o.PaymentID != "" || o.Reason != events.ReasonOperator {
			t.Errorf("the refused order: %+v; want it as it was", o)
		}
		if o := wantStatus(t, s, paid, events.Refunded); o.PaymentID != "pay-paid" || o.Reason != events.ReasonOperator {
			t.Errorf("the order refunded with its payment: %+v; want it as it was", o)
		}
		// Left as they were, they claimed nothing: the payment still pays an order.
		if o, changed, err := s.PayOrder(ctx, confirmed, "pay-free", time.Now()); err != nil || !changed || o.Status != events.Paid {
			t.Errorf("pay %s with a payment named nowhere: %+v changed %v, %v", confirmed, o, changed, err)
		}
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

// TestCancelRefundsItsOrders: the store step of a cancel refunds the campaign's confirmed and
// paid orders in its own transaction, their units off sold and off each buyer's bought, on both
// databases. A cancel cut short after its store step used to leave them confirmed and paid: the
// buyers charged for a sale called off, and an order still payable until someone ran the
// cancel again. A refunded order's units are not yet back in Redis (its reason is ""), so
// UnfinishedRefunds lists it for the sweeper; its payment is refused as the campaign's cancel;
// an order another campaign holds, or that ended before, is left as it is.
func TestCancelRefundsItsOrders(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		c, other := mustPayingCampaign(t, s, 20, 5, time.Hour), mustPayingCampaign(t, s, 20, 5, time.Hour)
		evs := []events.Event{newEvent(c.ID, "ann", 2), newEvent(c.ID, "ann", 1), newEvent(c.ID, "bob", 3), newEvent(c.ID, "cy", 1)}
		kept := newEvent(other.ID, "ann", 2)
		confirm(t, s, append(evs, kept)...)
		if _, _, err := s.PayOrder(ctx, evs[0].OrderID, "p-before", time.Now()); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.RefundOrder(ctx, evs[3].OrderID); err != nil { // refunded before the cancel
			t.Fatal(err)
		}
		cancelled, refunded, err := s.ChangeCampaign(ctx, c.ID, func(c *store.Campaign) error {
			c.CancelledAtMs = time.Now().UnixMilli()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(refunded) != 3 || cancelled.Sold != 0 {
			t.Errorf("the cancel refunded %d orders and left %d sold; want 3 refunded and nothing sold", len(refunded), cancelled.Sold)
		}
		for i, ev := range evs[:3] {
			if o := wantStatus(t, s, ev.OrderID, events.Refunded); o.Reason != "" {
				t.Errorf("order %d refunded by the cancel has reason %q; want \"\" until Redis has its units back", i, o.Reason)
			}
		}
		if o := wantStatus(t, s, evs[0].OrderID, events.Refunded); o.PaymentID != "p-before" {
			t.Errorf("the paid order refunded by the cancel: %+v; want its payment id kept, for its refund to name", o)
		}
		wantStatus(t, s, kept.OrderID, events.Confirmed)
		if got, err := s.Campaign(ctx, c.ID); err != nil || got.Sold != 0 {
			t.Errorf("the cancelled campaign: %+v %v; want nothing sold", got, err)
		}
		if got, err := s.Campaign(ctx, other.ID); err != nil || got.Sold != 2 {
			t.Errorf("the other campaign: %+v %v; want its 2 units sold still", got, err)
		}
		if h, err := s.Holdings(ctx, c.ID); err != nil || h["ann"] != 0 || h["bob"] != 0 || h["cy"] != 0 {
			t.Errorf("the buyers' units after the cancel: %v %v; want none", h, err)
		}
		if h, err := s.Holdings(ctx, other.ID); err != nil || h["ann"] != 2 {
			t.Errorf("ann's units of the other campaign: %v %v; want 2", h, err)
		}
		unfinished, err := s.UnfinishedRefunds(ctx, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		listed := 0
		for _, o := range unfinished {
			if o.CampaignID == c.ID {
				listed++
			}
		}
		if listed != 4 {
			t.Errorf("%d unfinished refunds of the cancelled campaign listed; want the cancel's 3 and the earlier one", listed)
		}
		// No payment after the cancel: the order is refunded, and the answer says why.
		if o, changed, err := s.PayOrder(ctx, evs[1].OrderID, "p-after", time.Now()); events.ErrorCode(err) != events.CampaignCancelled || changed {
			t.Errorf("pay an order of a cancelled campaign: %+v changed %v, %v; want %s", o, changed, err, events.CampaignCancelled)
		}
		// The refused payment claimed nothing: another order may still take its id.
		if _, changed, err := s.PayOrder(ctx, kept.OrderID, "p-after", time.Now()); err != nil || !changed {
			t.Errorf("pay an order of another campaign with the refused id: changed %v, %v; want it paid", changed, err)
		}
		// Not campaign_cancelled, which tells the payment service to refund the payer: the
		// order's refund names this payment already, and a replay records it again.
		if o, changed, err := s.PayOrder(ctx, evs[0].OrderID, "p-before", time.Now()); events.ErrorCode(err) != events.OrderNotPayable || changed {
			t.Errorf("the payment from before the cancel, again: %+v changed %v, %v; want %s: the cancel refunded it, naming it", o, changed, err, events.OrderNotPayable)
		}
		// Cancelling again refunds nothing more.
		if _, refunded, err := s.ChangeCampaign(ctx, c.ID, func(*store.Campaign) error { return nil }); err != nil || len(refunded) != 0 {
			t.Errorf("a change of the cancelled campaign refunded %d orders (%v); want none", len(refunded), err)
		}
	})
}

// TestCancelRacesPayments pays each of 200 orders while their campaign is cancelled, on both
// databases. A payment does not take the campaign's lock the cancel holds: the order's row
// decides. Whichever commits first, no order stays paid, and a payment that succeeded is
// refunded by the cancel naming it; one refused is refused as the campaign's cancel.
func TestCancelRacesPayments(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		const n = 200
		evs := payConfirmed(t, s, n)
		paid := make([]bool, n)
		var refunded []store.Order
		var wg sync.WaitGroup
		for i, e := range evs {
			wg.Go(func() {
				_, changed, err := s.PayOrder(ctx, e.OrderID, "pay-"+e.OrderID, time.Now())
				switch {
				case err == nil && changed:
					paid[i] = true
				case events.ErrorCode(err) != events.CampaignCancelled:
					t.Errorf("pay %s while its campaign is cancelled: changed %v, %v; want paid or %s", e.OrderID, changed, err, events.CampaignCancelled)
				}
			})
			if i == n/2 {
				wg.Go(func() {
					var err error
					_, refunded, err = s.ChangeCampaign(ctx, e.CampaignID, func(c *store.Campaign) error {
						c.CancelledAtMs = time.Now().UnixMilli()
						return nil
					})
					if err != nil {
						t.Error(err)
					}
				})
			}
		}
		wg.Wait()
		if len(refunded) != n {
			t.Errorf("the cancel refunded %d orders, want all %d", len(refunded), n)
		}
		payments := 0
		for i, e := range evs {
			o := wantStatus(t, s, e.OrderID, events.Refunded)
			if paid[i] {
				payments++
				if o.PaymentID != "pay-"+e.OrderID {
					t.Errorf("order %s paid before the cancel, refunded: %+v; want its payment named", e.OrderID, o)
				}
			}
		}
		if c, err := s.Campaign(ctx, evs[0].CampaignID); err != nil || c.Sold != 0 {
			t.Errorf("the cancelled campaign: %+v %v; want nothing sold", c, err)
		}
		t.Logf("%d payments before the cancel, %d refused", payments, n-payments)
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

// TestGivingBack lists the refunds and expiries of the campaigns asked for whose reason is still
// "", and no other order, on both databases: the console reads their reservations in Redis.
func TestGivingBack(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		evs := payConfirmed(t, s, 4)
		other := payConfirmed(t, s, 1)
		for _, e := range []events.Event{evs[0], evs[1], other[0]} {
			if _, _, err := s.RefundOrder(ctx, e.OrderID); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.MarkRefunded(ctx, evs[1].OrderID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ExpireOrder(ctx, evs[2].OrderID, time.Now().Add(2*time.Hour)); err != nil {
			t.Fatal(err)
		}
		got, err := s.GivingBack(ctx, []string{evs[0].CampaignID})
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, o := range got {
			ids[o.OrderID] = true
		}
		if len(got) != 2 || !ids[evs[0].OrderID] || !ids[evs[2].OrderID] {
			t.Errorf("GivingBack: %+v; want the unfinished refund and the unfinished expiry of the campaign", got)
		}
	})
}
