package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// slowRefunds is a store of one campaign whose confirmed orders Redis has all refunded; each
// write takes a while, as a transaction on a loaded database does.
type slowRefunds struct {
	ReplayStore
	orders []store.Order
}

func (s slowRefunds) Campaigns(context.Context) ([]store.Campaign, error) {
	return []store.Campaign{{ID: "camp"}}, nil
}

func (s slowRefunds) Confirmed(context.Context, string) ([]store.Order, error) {
	return s.orders, nil
}

func (s slowRefunds) RecordGivenBack(_ context.Context, orders []store.Order) (stored, moved int, err error) {
	time.Sleep(300 * time.Millisecond)
	for _, o := range orders {
		if o.Status != events.Refunded || o.Reason != events.ReasonOperator {
			return 0, 0, fmt.Errorf("order %s recorded %s (%q), want refunded (%q)", o.OrderID, o.Status, o.Reason, events.ReasonOperator)
		}
	}
	return 0, len(orders), nil
}

type allRefunded struct{ Confirmer }

func (allRefunded) Reservations(_ context.Context, ids []string) (map[string]lua.Reservation, error) {
	res := map[string]lua.Reservation{}
	for _, id := range ids {
		res[id] = lua.Reservation{OrderID: id, State: lua.StateRefunded}
	}
	return res, nil
}

// TestCatchUpReportsProgressWithinACampaign: a flash sale is one campaign, and a backup from
// before its cancellation holds every order confirmed: the catch-up refunds them a page of
// BatchSize orders, one transaction, at a time, for minutes. It writes a progress line every
// second of that, not only when it moves on to another campaign.
func TestCatchUpReportsProgressWithinACampaign(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := slowRefunds{}
		for i := range 20 {
			st.orders = append(st.orders, store.Order{OrderID: fmt.Sprintf("camp.order%d", i), Status: events.Confirmed})
		}
		cfg := Config{Logger: slog.New(slog.DiscardHandler), BatchSize: 2}
		cfg.setDefaults()
		var progress strings.Builder
		n, err := catchUp(context.Background(), cfg, st, allRefunded{}, &progress)
		if err != nil || n != 20 {
			t.Fatalf("catchUp: %d moved, %v; want 20", n, err)
		}
		if lines := strings.Count(progress.String(), "catching up"); lines < 2 {
			t.Errorf("3 s of catching up wrote %d progress lines, want one a second:\n%s", lines, progress.String())
		}
	})
}
