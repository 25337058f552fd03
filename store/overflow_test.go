package store_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestConfirmOrdersQuantityOverflow: the store decides with what is left of the limit and the
// stock, so no quantity can wrap its sums. events.Validate refuses quantities past MaxUnits, but
// the store is the last line of defence and takes whatever it is given: with held+q > limit and
// sold+q > stock in int64, a batch of 1, 2^63-1, 2^63-1 and 2 units for one buyer summed to 1
// (mod 2^64) and was confirmed whole, two orders of 9,223,372,036,854,775,807 units on a
// campaign of 10, with sold and the buyer's bought grown by 1.
func TestConfirmOrdersQuantityOverflow(t *testing.T) {
	limit, soldOut := store.Result{Reason: events.ReasonStoreLimit}, store.Result{Reason: events.ReasonStoreSoldOut}
	for _, tc := range []struct {
		name     string
		limit    int64
		buyers   [4]string // of 1, 2^63-1, 2^63-1 and 2 units
		want     []store.Result
		wantSold int64
	}{
		{"past the buyer's limit", 2, [4]string{"ann", "ann", "ann", "ann"}, []store.Result{confirmed, limit, limit, limit}, 1},
		// Other buyers, each within a limit of 2^63-1, and the stock must refuse them.
		{"past the stock", math.MaxInt64, [4]string{"ann", "bob", "cy", "ann"}, []store.Result{confirmed, soldOut, soldOut, confirmed}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, s *store.Store) {
				c := mustCampaign(t, s, 10, tc.limit)
				b := tc.buyers
				evs := []events.Event{newEvent(c.ID, b[0], 1), newEvent(c.ID, b[1], math.MaxInt64),
					newEvent(c.ID, b[2], math.MaxInt64), newEvent(c.ID, b[3], 2)}
				rs, err := s.ConfirmOrders(context.Background(), evs)
				if err != nil {
					t.Fatalf("ConfirmOrders: %v", err)
				}
				wantResults(t, rs, tc.want...)
				for i, r := range tc.want {
					if r.Reason != "" {
						wantNoOrder(t, s, evs[i].OrderID)
					}
				}
				wantSold(t, s, c.ID, tc.wantSold)
				wantHoldings(t, s, c.ID, map[string]int64{"ann": tc.wantSold})
			})
		})
	}
}

// TestConfirmOrdersTakesEventsAtTheBounds: every field the store keeps, at the largest that
// events.Validate lets through, is one both databases take. The consumer retries a batch the
// store fails until it succeeds, so a valid event the store refused would stall its partition:
// a new column or constraint narrower than Validate must fail here first.
func TestConfirmOrdersTakesEventsAtTheBounds(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		id := storetest.Name("bounds")
		id += strings.Repeat("x", 64-len(id))
		now := time.Now()
		if err := s.CreateCampaign(context.Background(), store.Campaign{ID: id, Name: "bounds", Stock: events.MaxUnits,
			PerUserLimit: events.MaxUnits, StartsAtMs: now.Add(-time.Minute).UnixMilli(), CreatedAtMs: now.UnixMilli()}); err != nil {
			t.Fatal(err)
		}
		long, wide := strings.Repeat("z", events.MaxUserLen), strings.Repeat("😀", events.MaxUserLen)
		first, last := newEvent(id, long, events.MaxUnits-1), newEvent(id, wide, 1)
		first.OrderID, last.OrderID = id+"."+strings.Repeat("a", 64), id+"."+strings.Repeat("b", 64)
		first.OccurredAt = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
		last.OccurredAt = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
		wantResults(t, confirm(t, s, first, last), confirmed, confirmed)
		wantSold(t, s, id, events.MaxUnits)
		wantHoldings(t, s, id, map[string]int64{long: events.MaxUnits - 1, wide: 1})
	})
}
