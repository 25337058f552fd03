package compensator_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
)

// TestAuditFailsEachViolation breaks one invariant at a time in a healthy campaign, the way a bug
// of the product would leave it, and wants exactly the checks that guard it to fail. The other
// audit tests mostly want a healthy campaign passed; a check that could never fail would pass
// them all, as would a check that fails only beside another.
func TestAuditFailsEachViolation(t *testing.T) {
	const (
		i1 = "I1 conservation"
		i2 = "I2 resolution"
		i3 = "I3 per-user limit"
		i4 = "I4 no oversell"
		i5 = "I5 no lost order"
		i6 = "I6 paid or expired"
	)
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, e *env, k lua.Keys, confirmed []events.Event)
		fail  []string
	}{
		{"redis holds a buyer past the limit", func(t *testing.T, e *env, k lua.Keys, confirmed []events.Event) {
			// reserve.lua without its limit check: a second purchase of u0's, counted and
			// taken from the stock like any other, takes them past 3.
			id := events.NewOrderID(e.campaign)
			deadline := time.Now().Add(time.Hour).UnixMilli()
			e.redis(t, "HSET", k.Res, id, fmt.Sprintf("pending|3|%d|%s", deadline, confirmed[0].UserID))
			e.redis(t, "ZADD", k.Pending, deadline, id)
			e.redis(t, "HINCRBY", k.Buyers, confirmed[0].UserID, 3)
			e.redis(t, "DECRBY", k.Stock, 3)
		}, []string{i3}},
		{"redis counts a buyer's units wrong", func(t *testing.T, e *env, k lua.Keys, confirmed []events.Event) {
			e.redis(t, "HINCRBY", k.Buyers, confirmed[0].UserID, 1) // a release that gave back too little
		}, []string{i3}},
		{"redis counts a buyer without a reservation", func(t *testing.T, e *env, k lua.Keys, _ []events.Event) {
			e.redis(t, "HSET", k.Buyers, "ghost", 1)
		}, []string{i3}},
		{"redis sold more than its stock", func(t *testing.T, e *env, k lua.Keys, _ []events.Event) {
			e.redis(t, "SET", k.Stock, -1)
		}, []string{i1, i4}},
		{"redis gave units back twice", func(t *testing.T, e *env, k lua.Keys, _ []events.Event) {
			e.redis(t, "INCRBY", k.Stock, 1)
		}, []string{i1}},
		{"the store confirmed an order redis released", func(t *testing.T, e *env, _ lua.Keys, _ []events.Event) {
			ev := e.reserveAs(t, "late")
			if _, err := e.st.ConfirmOrders(e.ctx, []events.Event{ev}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.r.Release(e.ctx, ev.OrderID); err != nil { // every figure still adds up
				t.Fatal(err)
			}
		}, []string{i2}},
		{"the store's sold disagrees with its orders", func(t *testing.T, e *env, _ lua.Keys, _ []events.Event) {
			e.sql(t, `UPDATE campaigns SET sold = sold + 1 WHERE id = ?`, e.campaign)
		}, []string{i2}},
		{"the store's total of a buyer disagrees with their orders", func(t *testing.T, e *env, _ lua.Keys, confirmed []events.Event) {
			e.sql(t, `UPDATE purchases SET bought = bought + 1 WHERE campaign_id = ? AND user_id = ?`, e.campaign, confirmed[0].UserID)
		}, []string{i3}},
		{"a reservation left pending past its deadline", func(t *testing.T, e *env, k lua.Keys, _ []events.Event) {
			ev := e.reserveAs(t, "late")
			e.redis(t, "HSET", k.Res, ev.OrderID, fmt.Sprintf("pending|%d|1|late", ev.Quantity)) // a sweeper that never came
		}, []string{i5}},
		{"a confirmed order left unpaid past its window", func(t *testing.T, e *env, _ lua.Keys, confirmed []events.Event) {
			e.sql(t, `UPDATE orders SET pay_by_ms = 1 WHERE order_id = ?`, confirmed[0].OrderID)
		}, []string{i6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvPaying(t, 10, 3, time.Hour)
			evs := e.reserve(t, 2, time.Hour)
			e.confirm(t, evs)
			if rep, out := e.audit(t); !rep.OK() {
				t.Fatalf("audit of the healthy campaign:\n%s", out)
			}
			tc.spoil(t, e, lua.KeysOf(e.campaign), evs)
			rep, out := e.audit(t)
			var failed []string
			for _, ch := range rep.Campaigns[0].Checks {
				if !ch.OK {
					failed = append(failed, ch.Name)
				}
			}
			if !slices.Equal(failed, tc.fail) {
				t.Errorf("failed checks %q, want %q:\n%s", failed, tc.fail, out)
			}
		})
	}
}

// reserveAs reserves one unit of e's campaign for user, pending until an hour from now, and
// returns its OrderRequested event.
func (e *env) reserveAs(t *testing.T, user string) events.Event {
	t.Helper()
	id := events.NewOrderID(e.campaign)
	res, err := e.r.Reserve(e.ctx, e.campaign, id, user, 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: time.Now().UTC(),
		OrderID: id, CampaignID: e.campaign, UserID: user, Quantity: 1, Deadline: res.Deadline}
}

// redis runs one command on the test's Redis.
func (e *env) redis(t *testing.T, args ...any) {
	t.Helper()
	if err := e.r.Client().Do(e.ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
}

// sql runs one statement on the test's store.
func (e *env) sql(t *testing.T, query string, args ...any) {
	t.Helper()
	db := e.st.DB()
	if _, err := db.ExecContext(e.ctx, db.Rebind(query), args...); err != nil {
		t.Fatal(err)
	}
}
