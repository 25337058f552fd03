package consumer_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestReplayAfterLossKeepsOutcomes: replay is for a store that lost rows (restored from a
// backup that lacks the last minutes): "missing ones come back". A campaign has one unit, which
// goes round: Ann's reservation expires and the sweeper fails it, giving the unit back; Bob buys
// it, is confirmed and refunded by an operator; Cy buys it, is confirmed and does not pay in the
// payment window; Dee buys it and is confirmed. Each give-back wrote the store first and Redis
// second. The store then loses the campaign's rows and replay runs. Redis still knows how each
// reservation ended, so the replay brings Ann back failed, Bob refunded, Cy expired and Dee
// confirmed with the unit. Before, the replay confirmed Ann's order, which the store no longer
// had, and refused Dee's, confirmed before the loss, as store_sold_out: a buyer told "failed"
// held the unit Redis had sold again, and the buyer who had it lost it. On both databases: on
// PostgreSQL the persister's optimistic batch meets the recorded rows.
func TestReplayAfterLossKeepsOutcomes(t *testing.T) { storetest.Each(t, testReplayAfterLoss) }

func testReplayAfterLoss(t *testing.T, st *store.Store) {
	ctx := context.Background()
	r := lua.New(luatest.MustRedis(t))
	t.Cleanup(func() { r.Close() })
	campaign := storetest.Name("replay")
	start := time.Now().Add(-time.Minute)
	const window = 10 * time.Minute
	if err := st.CreateCampaign(ctx, store.Campaign{ID: campaign, Name: "replay", Stock: 1, PerUserLimit: 1,
		StartsAtMs: start.UnixMilli(), CreatedAtMs: start.UnixMilli(), OnSale: true, PaymentWindowMs: window.Milliseconds()}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadCampaign(ctx, lua.Campaign{ID: campaign, Remaining: 1, Limit: 1, StartsAt: start, Stock: 1}); err != nil {
		t.Fatal(err)
	}
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers)
	// One partition, so the replay reads the purchases in the order they were made, the order
	// in which the old replay's mistake is certain; across partitions it reads them in any.
	cl, err := events.NewClient(brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	buy := func(user string) events.Event { // what the api does: reserve, then produce
		e := orderEvent(campaign, user, 1)
		if _, err := r.Reserve(ctx, campaign, e.OrderID, user, 1, time.Hour); err != nil {
			t.Fatalf("reserve for %s: %v", user, err)
		}
		rec, err := events.Record(topics.Requested, e)
		if err != nil {
			t.Fatal(err)
		}
		rec.Partition = 0
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return e
	}
	confirm := func(e events.Event) { // what the consumer does: the store, then Redis
		t.Helper()
		if res, err := st.ConfirmOrders(ctx, []events.Event{e}); err != nil || res[0].Status != events.Confirmed {
			t.Fatalf("confirm %s: %+v %v", e.UserID, res, err)
		}
		if _, err := r.Confirm(ctx, e.OrderID); err != nil {
			t.Fatal(err)
		}
	}
	res := &compensator.Resolver{Store: st, Redis: r, Producer: cl, Results: topics.Results,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}

	ann := buy("ann")
	if o, err := res.Fail(ctx, ann, events.ReasonExpired, "sweeper"); err != nil || o.Status != events.Failed {
		t.Fatalf("the sweeper fails ann's order: %+v %v", o, err)
	}
	bob := buy("bob")
	confirm(bob)
	if o, err := res.Compensate(ctx, bob.OrderID); err != nil || o.Status != events.Refunded {
		t.Fatalf("an operator refunds bob's order: %+v %v", o, err)
	}
	cy := buy("cy")
	confirm(cy)
	if o, err := res.Expire(ctx, cy.OrderID, time.Now().Add(window+time.Minute)); err != nil || o.Status != events.Expired {
		t.Fatalf("cy's order expires unpaid: %+v %v", o, err)
	}
	dee := buy("dee")
	confirm(dee)

	// The store loses the campaign's rows, as in the pipeline's replay test.
	db := st.DB()
	for _, q := range []string{`DELETE FROM orders WHERE campaign_id = ?`, `DELETE FROM purchases WHERE campaign_id = ?`, `UPDATE campaigns SET sold = 0 WHERE id = ?`} {
		if _, err := db.ExecContext(ctx, db.Rebind(q), campaign); err != nil {
			t.Fatal(err)
		}
	}
	for i, wantGivenBack := range []int64{3, 0} { // the second replay finds everything in place
		var progress strings.Builder
		stats, err := consumer.Replay(ctx, consumer.Config{Brokers: brokers, Topics: topics,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, consumer.From{}, st, r, &progress)
		if err != nil {
			t.Fatalf("replay #%d: %v\n%s", i+1, err, progress.String())
		}
		if stats.Events != 4 || stats.GivenBack != wantGivenBack {
			t.Errorf("replay #%d: %+v, want 4 events, %d given back", i+1, stats, wantGivenBack)
		}
		if !strings.Contains(progress.String(), "replay: done") {
			t.Errorf("replay #%d: no summary in its progress:\n%s", i+1, progress.String())
		}
		for _, c := range []struct {
			e      events.Event
			status events.Status
			reason string
		}{
			{ann, events.Failed, events.ReasonReleasedBeforeReplay},
			{bob, events.Refunded, events.ReasonOperator},
			{cy, events.Expired, events.ReasonUnpaid},
			{dee, events.Confirmed, ""},
		} {
			o, err := st.Order(ctx, c.e.OrderID)
			held, _ := r.Reservation(ctx, c.e.OrderID)
			if err != nil || o.Status != c.status || o.Reason != c.reason {
				t.Errorf("replay #%d: %s's order %q (%q) %v, Redis has it %s; want %s (%q)",
					i+1, c.e.UserID, o.Status, o.Reason, err, held.State, c.status, c.reason)
			}
		}
		// Only dee's order holds the unit, in the store's counters as in Redis.
		if c, err := st.Campaign(ctx, campaign); err != nil || c.Sold != 1 {
			t.Errorf("replay #%d: sold %d %v, want 1", i+1, c.Sold, err)
		}
		if h, err := st.Holdings(ctx, campaign); err != nil || len(h) != 1 || h["dee"] != 1 {
			t.Errorf("replay #%d: holdings %v %v, want dee's 1", i+1, h, err)
		}
	}
}
