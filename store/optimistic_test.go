package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
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
	fallbacks := 0 // batches the optimistic way cannot do: a redelivery, an unknown campaign
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
		if slices.ContainsFunc(evs, func(e events.Event) bool { return e.CampaignID == "unknown" || slices.Contains(sent, e) }) {
			fallbacks++
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
	if fallbacks == 0 || fallbacks == batches {
		t.Errorf("of %d batches, %d need the reads: the test no longer covers both ways", batches, fallbacks)
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
	t.Logf("of %d batches, %d needed the reads", batches, fallbacks)
}
