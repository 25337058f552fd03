package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// unannounced returns the ids of the orders UnannouncedPayments lists as paid by paidBy.
func unannounced(t *testing.T, s *store.Store, paidBy time.Time) []string {
	t.Helper()
	os, err := s.UnannouncedPayments(context.Background(), paidBy, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, o := range os {
		if o.Status != events.Paid || !o.PaymentUnannounced {
			t.Errorf("UnannouncedPayments lists %s, %s, unannounced %v", o.OrderID, o.Status, o.PaymentUnannounced)
		}
		ids = append(ids, o.OrderID)
	}
	return ids
}

// TestPaidListedUntilAnnounced: a payment is in the store before its OrderPaid is on the
// results topic, and a process that dies in between (or a Kafka that refuses the record) used
// to leave it off the topic for good unless the payment service paid again. A paid order is
// listed as unannounced, in order id order and a page at a time, until MarkPaidAnnounced;
// marking it again, or marking an order not paid, changes nothing; an order paid after
// paidBy is not listed yet. On both databases.
func TestPaidListedUntilAnnounced(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		evs := payConfirmed(t, s, 3)
		ids := []string{evs[0].OrderID, evs[1].OrderID, evs[2].OrderID}
		slices.Sort(ids)
		a, b, c := ids[0], ids[1], ids[2]
		paidAt := time.Now()
		for _, id := range []string{a, b} {
			if _, _, err := s.PayOrder(ctx, id, "pay-"+id, paidAt); err != nil {
				t.Fatal(err)
			}
		}
		if got := unannounced(t, s, paidAt); !slices.Equal(got, []string{a, b}) {
			t.Errorf("unannounced after two payments: %v, want %v", got, []string{a, b})
		}
		if got := unannounced(t, s, paidAt.Add(-time.Millisecond)); len(got) != 0 {
			t.Errorf("unannounced as of before the payments: %v, want none", got)
		}
		if page, err := s.UnannouncedPayments(ctx, paidAt, "", 1); err != nil || len(page) != 1 || page[0].OrderID != a {
			t.Errorf("a page of 1: %+v %v, want %s", page, err, a)
		}
		if page, err := s.UnannouncedPayments(ctx, paidAt, a, 1); err != nil || len(page) != 1 || page[0].OrderID != b {
			t.Errorf("the page after %s: %+v %v, want %s", a, page, err, b)
		}
		for range 2 { // idempotent
			if err := s.MarkPaidAnnounced(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.MarkPaidAnnounced(ctx, c); err != nil { // confirmed: nothing to mark
			t.Fatal(err)
		}
		if got := unannounced(t, s, paidAt); !slices.Equal(got, []string{b}) {
			t.Errorf("unannounced after marking %s: %v, want %v", a, got, []string{b})
		}
		if o := wantStatus(t, s, a, events.Paid); o.PaymentUnannounced {
			t.Errorf("order %s marked announced reads %+v", a, o)
		}
		// Marked before it was paid, c is unannounced all the same once paid.
		if _, _, err := s.PayOrder(ctx, c, "pay-"+c, paidAt); err != nil {
			t.Fatal(err)
		}
		if got := unannounced(t, s, paidAt); !slices.Equal(got, []string{b, c}) {
			t.Errorf("unannounced after paying %s: %v, want %v", c, got, []string{b, c})
		}
		// A retry of a payment announced changes nothing.
		if _, changed, err := s.PayOrder(ctx, a, "pay-"+a, time.Now()); err != nil || changed {
			t.Fatalf("pay %s again: changed %v, %v", a, changed, err)
		}
		if got := unannounced(t, s, time.Now()); !slices.Equal(got, []string{b, c}) {
			t.Errorf("unannounced after a retry of %s's payment: %v, want %v", a, got, []string{b, c})
		}
		// A refunded order is no payment to announce.
		if _, _, err := s.RefundOrder(ctx, b); err != nil {
			t.Fatal(err)
		}
		if got := unannounced(t, s, time.Now()); !slices.Equal(got, []string{c}) {
			t.Errorf("unannounced after refunding %s: %v, want %v", b, got, []string{c})
		}
	})
}

// TestPaidAnnouncedMigration: orders paid before the store noted announcements are taken as
// announced, so an upgrade's first sweeps do not announce every payment ever taken again; an
// order paid after the upgrade is listed until marked. On both databases.
func TestPaidAnnouncedMigration(t *testing.T) {
	storetest.EachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		s := openAt(t, url, store.Migrations()-1)
		evs := payConfirmed(t, s, 2)
		old, later := evs[0].OrderID, evs[1].OrderID
		if _, err := s.DB().Exec(s.DB().Rebind(`UPDATE orders SET status = 'paid', payment_id = 'pay-old' WHERE order_id = ?`), old); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DB().Exec(s.DB().Rebind(`INSERT INTO payments (payment_id, order_id) VALUES ('pay-old', ?)`), old); err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if got := unannounced(t, s, time.Now().Add(time.Hour)); len(got) != 0 {
			t.Errorf("unannounced right after the migration: %v, want none", got)
		}
		if o := wantStatus(t, s, old, events.Paid); o.PaymentUnannounced {
			t.Errorf("order paid before the migration: %+v, want it announced", o)
		}
		if _, _, err := s.PayOrder(ctx, later, "pay-later", time.Now()); err != nil {
			t.Fatal(err)
		}
		if got := unannounced(t, s, time.Now().Add(time.Hour)); !slices.Equal(got, []string{later}) {
			t.Errorf("unannounced after a payment past the migration: %v, want %v", got, []string{later})
		}
	})
}
