package consumer_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestReplayPastAMalformedReservation: one reservation record Redis cannot parse (the scripts
// answer "malformed" for it and go on: confirm.lua "stops nothing else") must not stop a replay.
// The given-back step read a batch's records with Reservations, which failed the whole read on
// one malformed record and was retried for ever: the other order never came back.
func TestReplayPastAMalformedReservation(t *testing.T) {
	ctx := context.Background()
	st := storetest.MustOpen(t, storetest.SQLiteURL(t))
	r := lua.New(luatest.MustRedis(t))
	t.Cleanup(func() { r.Close() })
	campaign := storetest.Name("malformed")
	start := time.Now().Add(-time.Minute)
	if err := st.CreateCampaign(ctx, store.Campaign{ID: campaign, Name: "m", Stock: 10, PerUserLimit: 2,
		StartsAtMs: start.UnixMilli(), CreatedAtMs: start.UnixMilli(), OnSale: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadCampaign(ctx, lua.Campaign{ID: campaign, Remaining: 10, Limit: 2, StartsAt: start, Stock: 10}); err != nil {
		t.Fatal(err)
	}
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers)
	cl, err := events.NewClient(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	bad, good := orderEvent(campaign, "ann", 1), orderEvent(campaign, "bob", 1)
	for _, e := range []events.Event{bad, good} {
		if _, err := r.Reserve(ctx, campaign, e.OrderID, e.UserID, 1, time.Hour); err != nil {
			t.Fatal(err)
		}
		rec, err := events.Record(topics.Requested, e)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Client().HSet(ctx, lua.KeysOf(campaign).Res, bad.OrderID, "pending|1|soon|ann").Err(); err != nil {
		t.Fatal(err)
	}

	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = consumer.Replay(rctx, consumer.Config{Brokers: brokers, Topics: topics,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, consumer.From{}, st, r, io.Discard)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if o, err := st.Order(ctx, good.OrderID); err != nil || o.Status != events.Confirmed {
		t.Errorf("bob's order after the replay: %+v, %v; want confirmed", o, err)
	}
}
