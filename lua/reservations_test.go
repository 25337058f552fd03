package lua_test

import (
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
)

// TestReservations: the many-order read that replay makes per batch answers, for orders of two
// campaigns in one call, what Reservation answers for each alone, and leaves out the orders
// Redis has no record of, the ids that name no campaign and a malformed record (which failed
// the whole read, and stalled a replay for good).
func TestReservations(t *testing.T) {
	for _, be := range []struct {
		name string
		open func(*testing.T) *backend
	}{{"redis", openRedis}, {"miniredis", openMiniredis}} {
		t.Run(be.name, func(t *testing.T) {
			b := be.open(t)
			ctx := t.Context()
			one, two := b.open(t, 10, 3), b.open(t, 10, 3)
			var ids []string
			for _, c := range []string{one, two, one} {
				ids = append(ids, reserve(t, b.r, c, "alice", 1, time.Minute).OrderID)
			}
			if _, err := b.r.Release(ctx, ids[0]); err != nil {
				t.Fatal(err)
			}
			if _, err := b.r.Confirm(ctx, ids[1]); err != nil {
				t.Fatal(err)
			}
			unknown := events.NewOrderID(two)
			malformed := reserve(t, b.r, two, "bob", 1, time.Minute).OrderID
			if err := b.r.Client().HSet(ctx, lua.KeysOf(two).Res, malformed, "pending|1|soon|bob").Err(); err != nil {
				t.Fatal(err)
			}
			got, err := b.r.Reservations(ctx, append(ids, unknown, "not an order id", malformed))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(ids) {
				t.Errorf("Reservations = %v, want the %d orders Redis holds", got, len(ids))
			}
			for i, id := range ids {
				want, err := b.r.Reservation(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if !sameReservation(got[id], want) {
					t.Errorf("order %d: Reservations has %+v, Reservation %+v", i, got[id], want)
				}
			}
			if got, err := b.r.Reservations(ctx, nil); err != nil || len(got) != 0 {
				t.Errorf("Reservations(none) = %v, %v", got, err)
			}
		})
	}
}
