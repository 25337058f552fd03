package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestConfirmOrdersOptimistic: on PostgreSQL, ConfirmOrders' optimistic way (and its fall back
// to the reads) answers every batch exactly as the reads alone do (UseReads), and leaves
// the same orders, sold and buyers' totals: random batches with redeliveries, events repeated
// within a batch, buyers past their limit, a campaign selling out and an unknown campaign.
func TestConfirmOrdersOptimistic(t *testing.T) {
	ctx := context.Background()
	optimistic := storetest.MustOpen(t, storetest.PostgresURL(t))
	reads := storetest.MustOpen(t, storetest.PostgresURL(t))
	store.UseReads(reads)
	small, big := storetest.Name("small"), storetest.Name("big")
	for _, s := range []*store.Store{optimistic, reads} {
		for _, c := range []store.Campaign{{ID: small, Name: "small", Stock: 150, PerUserLimit: 3}, {ID: big, Name: "big", Stock: 10_000, PerUserLimit: 4}} {
			if err := s.CreateCampaign(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var sent []events.Event
	retriesBefore, doneBefore := store.OptimisticRetries(), store.OptimisticDone()
	const batches = 150
	for b := range batches {
		var evs []events.Event
		for range 1 + rng.IntN(12) {
			switch r := rng.IntN(100); {
			case r < 8 && len(sent) > 0: // a redelivery
				evs = append(evs, sent[rng.IntN(len(sent))])
			case r < 12 && len(evs) > 0: // repeated within the batch
				evs = append(evs, evs[rng.IntN(len(evs))])
			default:
				c := big
				switch {
				case r < 14:
					c = "unknown"
				case r < 40:
					c = small
				}
				evs = append(evs, newEvent(c, fmt.Sprintf("u%d", rng.IntN(200)), 1+rng.IntN(2)))
			}
		}
		sent = append(sent, evs...)
		got, err := optimistic.ConfirmOrders(ctx, evs)
		if err != nil {
			t.Fatal(err)
		}
		want, err := reads.ConfirmOrders(ctx, evs)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("batch %d, event %d (%s of %s, %d units): optimistic %+v, reads %+v", b, i, evs[i].OrderID, evs[i].UserID, evs[i].Quantity, got[i], want[i])
			}
		}
	}
	retries, done := store.OptimisticRetries()-retriesBefore, store.OptimisticDone()-doneBefore
	if retries == 0 || done == 0 || done+retries == batches {
		t.Errorf("of %d batches, %d done the optimistic way, %d done again with the reads, none straight with the reads: the test no longer covers every way",
			batches, done, retries)
	}
	for _, c := range []string{small, big} {
		co, oo, ho, err := optimistic.AuditView(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		cr, or, hr, err := reads.AuditView(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if co.Sold != cr.Sold || len(oo) != len(or) || fmt.Sprint(ho) != fmt.Sprint(hr) {
			t.Errorf("campaign %s: optimistic sold %d, %d orders, holdings %v; reads sold %d, %d orders, holdings %v",
				c, co.Sold, len(oo), ho, cr.Sold, len(or), hr)
		}
		if c == small && co.Sold != co.Stock {
			t.Errorf("campaign %s sold %d of %d: the test no longer sells it out", c, co.Sold, co.Stock)
		}
	}
	t.Logf("of %d batches, %d done the optimistic way, %d done again with the reads", batches, done, retries)
}

// TestConfirmOrdersRedeliveredBacklog: after a batch the optimistic way could not do (a
// redelivery), the batches like it go straight to the reads, and the optimistic way comes back
// with the first batch it would have done.
func TestConfirmOrdersRedeliveredBacklog(t *testing.T) {
	ctx := context.Background()
	s := storetest.MustOpen(t, storetest.PostgresURL(t))
	c := mustCampaign(t, s, 1000, 10)
	fresh := func() []events.Event {
		evs := make([]events.Event, 20)
		for i := range evs {
			evs[i] = newEvent(c.ID, fmt.Sprintf("u%d", i), 1)
		}
		return evs
	}
	counts := func() [2]int64 { return [2]int64{store.OptimisticDone(), store.OptimisticRetries()} }
	step := func(what string, evs []events.Event, want [2]int64, dup bool) {
		t.Helper()
		before := counts()
		rs := confirm(t, s, evs...)
		for i, r := range rs {
			if r.Status != events.Confirmed || r.Duplicate != dup {
				t.Fatalf("%s: result %d = %+v, want confirmed, duplicate %v", what, i, r, dup)
			}
		}
		if got := counts(); got[0]-before[0] != want[0] || got[1]-before[1] != want[1] {
			t.Errorf("%s: %d optimistic, %d done again; want %d and %d", what, got[0]-before[0], got[1]-before[1], want[0], want[1])
		}
	}
	batch := fresh()
	step("first delivery", batch, [2]int64{1, 0}, false)
	step("redelivery", batch, [2]int64{0, 1}, true)
	step("second redelivery", batch, [2]int64{0, 0}, true) // straight to the reads
	step("new orders after the backlog", fresh(), [2]int64{0, 0}, false)
	step("and the next", fresh(), [2]int64{1, 0}, false)
	if got, err := s.Campaign(ctx, c.ID); err != nil || got.Sold != 60 {
		t.Errorf("sold = %d (%v), want 60", got.Sold, err)
	}
}
