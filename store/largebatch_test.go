package store_test

import (
	"fmt"
	"testing"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestConfirmOrdersTakesABatchPastTheParameterLimit: a batch of more distinct orders and buyers
// than a statement takes parameters (PostgreSQL 65,535, SQLite 32,766), as `--batch-size 70000`
// polls from the backlog at a sale's end, is decided with the reads (orders past the stock,
// which the optimistic way leaves to them), and is redelivered whole. The consumer retries a
// batch the store fails until it succeeds: the reads' IN lists held one parameter per order and
// per buyer, and the batch stalled the consumer on every retry. One unit, so that the store
// writes one order: 70,000 on SQLite under -race take minutes.
func TestConfirmOrdersTakesABatchPastTheParameterLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("a batch of 70,000 orders")
	}
	const n = 70_000
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		c := mustCampaign(t, s, 1, 1)
		evs := make([]events.Event, n)
		for i := range evs {
			evs[i] = newEvent(c.ID, fmt.Sprintf("u%d", i), 1)
		}
		rs := confirm(t, s, evs...)
		if rs[0] != confirmed || rs[n-1] != (store.Result{Reason: events.ReasonStoreSoldOut}) {
			t.Errorf("first %+v, last %+v: want confirmed, then sold out", rs[0], rs[n-1])
		}
		wantSold(t, s, c.ID, 1)
		// Redelivered: every order is known, none adds a unit.
		rs = confirm(t, s, evs...)
		if rs[0] != (store.Result{Status: events.Confirmed, Duplicate: true}) {
			t.Errorf("redelivered: first %+v, want a confirmed duplicate", rs[0])
		}
		wantSold(t, s, c.ID, 1)
	})
}
