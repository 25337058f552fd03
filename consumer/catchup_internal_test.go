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
// refund takes a while, as a transaction on a loaded database does.
type slowRefunds struct {
	ReplayStore
	orders []store.Order
}

func (s slowRefunds) Campaigns(context.Context) ([]store.Campaign, error) {
	return []store.Campaign{{ID: "camp"}}, nil
}

func (s slowRefunds) Confirmed(context.Context, string) ([]store.Order, error) { return s.orders, nil }

func (s slowRefunds) RefundOrder(_ context.Context, id string) (store.Order, error) {
	time.Sleep(300 * time.Millisecond)
	return store.Order{OrderID: id, Status: events.Refunded}, nil
}

func (s slowRefunds) MarkRefunded(context.Context, string) error { return nil }

type allRefunded struct{ Confirmer }

func (allRefunded) Reservations(_ context.Context, ids []string) (map[string]lua.Reservation, error) {
	res := map[string]lua.Reservation{}
	for _, id := range ids {
		res[id] = lua.Reservation{OrderID: id, State: lua.StateRefunded}
	}
	return res, nil
}

// TestCatchUpReportsProgressWithinACampaign: a flash sale is one campaign, and a backup from
// before its cancellation holds every order confirmed: the catch-up refunds them one by one, two
// transactions each, for minutes. It writes a progress line every second of that, not only when
// it moves on to another campaign.
func TestCatchUpReportsProgressWithinACampaign(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := slowRefunds{}
		for i := range 10 {
			st.orders = append(st.orders, store.Order{OrderID: fmt.Sprintf("camp.order%d", i), Status: events.Confirmed})
		}
		cfg := Config{Logger: slog.New(slog.DiscardHandler)}
		cfg.setDefaults()
		var progress strings.Builder
		n, err := catchUp(context.Background(), cfg, st, allRefunded{}, &progress)
		if err != nil || n != 10 {
			t.Fatalf("catchUp: %d moved, %v; want 10", n, err)
		}
		if lines := strings.Count(progress.String(), "catching up"); lines < 2 {
			t.Errorf("3 s of catching up wrote %d progress lines, want one a second:\n%s", lines, progress.String())
		}
	})
}
