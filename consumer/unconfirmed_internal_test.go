package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// refunds is a store whose every order is confirmed and moves on as asked, recording which.
type refunds struct {
	Persister
	refunded []string
}

func (s *refunds) RecordGivenBack(_ context.Context, orders []store.Order) (stored, moved int, err error) {
	for _, o := range orders {
		if o.Status != events.Refunded {
			return 0, 0, fmt.Errorf("order %s recorded %s, want refunded", o.OrderID, o.Status)
		}
		s.refunded = append(s.refunded, o.OrderID)
	}
	return 0, len(orders), nil
}

// TestUnconfirmedLogsOnlyTheUnexpected: of the orders Redis's confirm left as they were, one
// it holds confirmed (a redelivery's) is logged at DEBUG only; one it refunded is refunded in
// the store, with an INFO line; those it released or has no reservation of, which the store
// cannot agree with, get one WARN per state, however many orders. Each is counted by state.
func TestUnconfirmedLogsOnlyTheUnexpected(t *testing.T) {
	var logs strings.Builder
	st := &refunds{}
	h := &handler{cfg: Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, store: st}
	before := map[string]float64{}
	for _, state := range []string{lua.StateConfirmed, lua.StateRefunded, lua.StateReleased, unknownState} {
		before[state] = testutil.ToFloat64(leftInRedis.WithLabelValues(state))
	}
	left := map[string]string{"c.again": lua.StateConfirmed, "c.refunded": lua.StateRefunded,
		"c.released1": lua.StateReleased, "c.released2": lua.StateReleased, "c.lost": ""}
	var evs []events.Event
	for _, id := range []string{"c.again", "c.refunded", "c.released1", "c.released2", "c.lost", "c.confirmed"} {
		evs = append(evs, events.Event{OrderID: id, CampaignID: "c", UserID: "u-" + id, Quantity: 1})
	}
	if err := h.unconfirmed(context.Background(), context.Background(), evs, left); err != nil {
		t.Fatal(err)
	}
	if len(st.refunded) != 1 || st.refunded[0] != "c.refunded" {
		t.Errorf("refunded %v in the store, want [c.refunded]", st.refunded)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var levels []string
	for _, l := range lines {
		level, _, _ := strings.Cut(strings.TrimPrefix(l[strings.Index(l, "level="):], "level="), " ")
		levels = append(levels, level)
		if strings.Contains(l, "c.again") && level != "DEBUG" {
			t.Errorf("a redelivered order Redis holds confirmed logged above DEBUG: %s", l)
		}
	}
	if got := strings.Join(levels, " "); strings.Count(got, "WARN") != 2 || strings.Count(got, "INFO") != 1 {
		t.Errorf("levels %s, want one INFO (the refund) and two WARN (released, unknown):\n%s", got, logs.String())
	}
	for state, want := range map[string]float64{lua.StateConfirmed: 1, lua.StateRefunded: 1, lua.StateReleased: 2, unknownState: 1} {
		if got := testutil.ToFloat64(leftInRedis.WithLabelValues(state)) - before[state]; got != want {
			t.Errorf("seckill_consumer_unconfirmed_total{state=%q} rose by %v, want %v", state, got, want)
		}
	}
}

// TestUnconfirmedInAReplayCounts: in a replay, an order the confirm step moves on is counted
// in the replay's CaughtUp, as the catch-up's and the batch's own moves are, not logged.
func TestUnconfirmedInAReplayCounts(t *testing.T) {
	var logs strings.Builder
	h := &handler{cfg: Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, store: &refunds{}, replay: &ReplayStats{}}
	evs := []events.Event{{OrderID: "c.refunded", CampaignID: "c", UserID: "ann", Quantity: 1}}
	if err := h.unconfirmed(context.Background(), context.Background(), evs, map[string]string{"c.refunded": lua.StateRefunded}); err != nil {
		t.Fatal(err)
	}
	if h.replay.CaughtUp != 1 || logs.Len() > 0 {
		t.Errorf("CaughtUp %d, logged %q; want 1, nothing", h.replay.CaughtUp, logs.String())
	}
}
