package consumer_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// stopAfterCommit is a replay's store that stops the replay (an operator's ^C) just after the
// store committed a batch.
type stopAfterCommit struct {
	consumer.ReplayStore
	stop context.CancelFunc
}

func (s stopAfterCommit) ConfirmOrders(ctx context.Context, evs []events.Event) ([]store.Result, error) {
	defer s.stop()
	return s.ReplayStore.ConfirmOrders(ctx, evs)
}

// TestReplayStoppedFinishesTheBatchInHand: a replay stopped while a batch is in hand finishes
// it within the drain, as the consumer does: orders it stored are confirmed in Redis and
// announced. Only another replay from as far back would announce them, and an operator who
// stopped one need not run it again.
func TestReplayStoppedFinishesTheBatchInHand(t *testing.T) {
	st := storetest.MustOpen(t, storetest.SQLiteURL(t))
	s := newReplaySale(t, st, 1)
	ann := s.buy("ann") // the store lost it: not confirmed there

	ctx, stop := context.WithCancel(s.ctx)
	defer stop()
	_, err := consumer.Replay(ctx, consumer.Config{Brokers: s.brokers, Topics: s.topics, Logger: slog.New(slog.DiscardHandler)},
		consumer.From{}, stopAfterCommit{st, stop}, s.r, io.Discard)
	t.Logf("the stopped replay: %v", err)
	s.wantOrders(1, []wantOrder{{ann, events.Confirmed, ""}})
	if res, err := s.r.Reservation(s.ctx, ann.OrderID); err != nil || res.State != lua.StateConfirmed {
		t.Errorf("ann's reservation is %q (%v), want %s", res.State, err, lua.StateConfirmed)
	}
	results, err := events.ReadTopic(s.ctx, s.brokers, s.topics.Results)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if e, err := events.Decode(r.Value); err == nil && e.Type == events.OrderConfirmed && e.OrderID == ann.OrderID {
			return
		}
	}
	t.Errorf("ann's order is confirmed in the store, and the results topic holds no OrderConfirmed of it (%d records)", len(results))
}
