package consumer_test

import (
	"bytes"
	"context"
	"errors"
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
	s := newReplaySale(t, st, 1)
	restore := s.backup() // taken before the sale: the loss of every row of the campaign

	ann := s.buy("ann")
	if o, err := s.res.Fail(s.ctx, ann, events.ReasonExpired, "sweeper"); err != nil || o.Status != events.Failed {
		t.Fatalf("the sweeper fails ann's order: %+v %v", o, err)
	}
	bob := s.buy("bob")
	s.confirm(bob)
	s.refund(bob)
	cy := s.buy("cy")
	s.confirm(cy)
	s.unpaid(cy)
	s.expire(cy)
	dee := s.buy("dee")
	s.confirm(dee)

	restore()
	for i, wantGivenBack := range []int64{3, 0} { // the second replay finds everything in place
		if stats := s.replay(consumer.From{}); stats.Events != 4 || stats.GivenBack != wantGivenBack || stats.CaughtUp != 0 {
			t.Errorf("replay #%d: %+v, want 4 events, %d given back, none caught up", i+1, stats, wantGivenBack)
		}
		s.wantOrders(i+1, []wantOrder{
			{ann, events.Failed, events.ReasonReleasedBeforeReplay},
			{bob, events.Refunded, events.ReasonOperator},
			{cy, events.Expired, events.ReasonUnpaid},
			{dee, events.Confirmed, ""},
		})
		// Only dee's order holds the unit, in the store's counters as in Redis.
		s.wantHeld(i+1, map[string]int64{"dee": 1})
	}
}

// TestReplayCatchesUpAnEarlierState: the backup holds orders that moved on after it was taken.
// Bob's and Cy's orders are confirmed in it, Fay's paid; then an operator refunds Bob's, Cy's
// expires unpaid and Fay's is refunded, each in the store and then in Redis, and Dee and Eve
// buy two of the units given back. Gil's refund reached the store before the backup and not
// Redis (the compensator stopped between the two), so the backup holds it later than Redis
// does. The store is restored and replay runs twice from the backup's place in the requested
// topic, which holds Dee's and Eve's purchases only. Redis says how the three orders ended, so
// the replay refunds Bob's and Fay's and expires Cy's, their units off sold and off their
// buyers' totals, with the reason that says they are back in Redis, before it persists Dee's
// and Eve's orders, which take two of those units; Gil's stays refunded, and the second replay
// changes nothing. Before, the three stayed as the backup had them, holding units Redis had
// put back on sale: the audit found the store disagreeing with Redis (I2), and Eve's order,
// confirmed in Redis, was refused store_sold_out. On both databases.
func TestReplayCatchesUpAnEarlierState(t *testing.T) { storetest.Each(t, testReplayCatchUp) }

func testReplayCatchUp(t *testing.T, st *store.Store) {
	s := newReplaySale(t, st, 4)
	before := []events.Event{s.buy("bob"), s.buy("cy"), s.buy("fay"), s.buy("gil")}
	bob, cy, fay, gil := before[0], before[1], before[2], before[3]
	for _, e := range before {
		s.confirm(e)
	}
	s.pay(fay)
	if o, _, err := st.RefundOrder(s.ctx, gil.OrderID); err != nil || o.Status != events.Refunded {
		t.Fatalf("the store refunds gil's order: %+v %v", o, err)
	}
	s.unpaid(cy)
	restore := s.backup()

	s.refund(bob)
	s.expire(cy)
	s.refund(fay)
	dee, eve := s.buy("dee"), s.buy("eve")
	s.confirm(dee)
	s.confirm(eve)

	restore()
	for i, wantCaughtUp := range []int64{3, 0} {
		if stats := s.replay(consumer.From{Offset: int64(len(before))}); stats.Events != 2 || stats.GivenBack != 0 || stats.CaughtUp != wantCaughtUp {
			t.Errorf("replay #%d: %+v, want 2 events, none given back, %d caught up", i+1, stats, wantCaughtUp)
		}
		s.wantOrders(i+1, []wantOrder{
			{bob, events.Refunded, events.ReasonOperator},
			{cy, events.Expired, events.ReasonUnpaid},
			// Paid: its OrderRefunded, naming pay-fay, may have been lost with the store,
			// and the sweeper announces it again.
			{fay, events.Refunded, ""},
			{gil, events.Refunded, ""}, // the sweeper finishes it in Redis
			{dee, events.Confirmed, ""},
			{eve, events.Confirmed, ""},
		})
		s.wantHeld(i+1, map[string]int64{"dee": 1, "eve": 1})
	}
}

// TestReplayRecordsPaymentsAgain: Redis keeps a paid order as confirmed, so only the results
// topic's OrderPaid tells of a payment the backup lacks. Hal's order is confirmed in the backup
// and paid after it; Ivy buys and pays after it (her order is not in the backup at all); Fay's
// is paid in the backup and refunded after it. The store is restored and replay runs twice.
// Hal's and Ivy's orders come back paid with their payments, and Fay's stays refunded: her
// payment, on the topic too, does not take it back. Before, Hal's order stayed confirmed and
// Ivy's came back confirmed, both to be expired by the sweeper at their pay_by with their units
// put back on sale, though paid for. On both databases.
func TestReplayRecordsPaymentsAgain(t *testing.T) { storetest.Each(t, testReplayPayments) }

func testReplayPayments(t *testing.T, st *store.Store) {
	s := newReplaySale(t, st, 3)
	hal, fay := s.buy("hal"), s.buy("fay")
	s.confirm(hal)
	s.confirm(fay)
	s.pay(fay)
	restore := s.backup()

	s.pay(hal)
	s.refund(fay)
	ivy := s.buy("ivy")
	s.confirm(ivy)
	s.pay(ivy)

	restore()
	for i, wantPaid := range []int64{2, 0} {
		if stats := s.replay(consumer.From{}); stats.Events != 3 || stats.CaughtUp != 1-int64(i) || stats.Paid != wantPaid {
			t.Errorf("replay #%d: %+v, want 3 events, %d caught up, %d paid", i+1, stats, 1-i, wantPaid)
		}
		s.wantOrders(i+1, []wantOrder{
			{hal, events.Paid, ""},
			{ivy, events.Paid, ""},
			{fay, events.Refunded, ""}, // its refund to announce again, naming pay-fay
		})
		if left, err := st.UnfinishedRefunds(s.ctx, "", 10); err != nil || len(left) != 1 || left[0].PaymentID != "pay-fay" {
			t.Errorf("replay #%d: unfinished refunds %+v %v; want fay's, paid by pay-fay", i+1, left, err)
		}
		for _, e := range []events.Event{hal, ivy} {
			if o, err := st.Order(s.ctx, e.OrderID); err != nil || o.PaymentID != "pay-"+e.UserID {
				t.Errorf("replay #%d: %s's order paid by %q %v, want pay-%s", i+1, e.UserID, o.PaymentID, err, e.UserID)
			}
		}
		s.wantHeld(i+1, map[string]int64{"hal": 1, "ivy": 1})
		// Recorded from the results topic, the payments are on it: the sweeper must not
		// announce them again.
		if left, err := st.UnannouncedPayments(s.ctx, time.Now().Add(time.Hour), "", 100); err != nil || len(left) != 0 {
			t.Errorf("replay #%d: payments left to announce %+v, %v; want none", i+1, left, err)
		}
	}
}

// TestReplayKeepsARefundedPayment: three faults at once. Jo buys after the backup, is confirmed
// and pays (OrderPaid naming pay-jo reaches the results topic); an operator refunds her order
// and Kafka refuses its OrderRefunded, the one event the payment service gives pay-jo back on;
// the compensator dies before a sweep announces it again; the store is restored from the
// backup. Replay brings Jo's order back refunded, as Redis ended it, and Redis keeps no payment:
// before, the row came back without pay-jo and marked finished, so nothing named the payment
// again, and the payer was never refunded. Now the payment comes back on the row, and the
// refund is listed as unfinished, so the sweeper announces it again naming pay-jo. On both
// databases.
func TestReplayKeepsARefundedPayment(t *testing.T) { storetest.Each(t, testReplayRefundedPayment) }

func testReplayRefundedPayment(t *testing.T, st *store.Store) {
	s := newReplaySale(t, st, 1)
	restore := s.backup()
	jo := s.buy("jo")
	s.confirm(jo)
	s.pay(jo)
	refused := *s.res
	refused.Producer = kafkaFunc(func(*kgo.Record) error { return errors.New("kafka refuses the record") })
	if o, err := refused.Compensate(s.ctx, jo.OrderID); o.Status != events.Refunded || events.ErrorCode(err) != events.Unavailable {
		t.Fatalf("an operator refunds jo's order, its announcement refused: %+v %v; want refunded, unavailable", o, err)
	}

	restore()
	for i, wantPaid := range []int64{1, 0} {
		if stats := s.replay(consumer.From{}); stats.GivenBack != 1-int64(i) || stats.Paid != wantPaid {
			t.Errorf("replay #%d: %+v, want %d given back, %d paid", i+1, stats, 1-i, wantPaid)
		}
		if o, err := st.Order(s.ctx, jo.OrderID); err != nil || o.Status != events.Refunded || o.PaymentID != "pay-jo" {
			t.Errorf("replay #%d: jo's order %s paid by %q %v; want refunded, pay-jo", i+1, o.Status, o.PaymentID, err)
		}
		s.wantHeld(i+1, map[string]int64{})
	}
	if left, err := st.UnfinishedRefunds(s.ctx, "", 10); err != nil || len(left) != 1 || left[0].OrderID != jo.OrderID {
		t.Fatalf("unfinished refunds after the replays: %+v %v; want jo's order, its refund still to announce", left, err)
	}

	// What the sweeper does with an unfinished refund (Resolver.Fail of its row).
	var announced []events.Event
	heard := *s.res
	heard.Producer = kafkaFunc(func(r *kgo.Record) error {
		e, err := events.Decode(r.Value)
		announced = append(announced, e)
		return err
	})
	if o, err := heard.Compensate(s.ctx, jo.OrderID); err != nil || o.Status != events.Refunded || o.Reason != events.ReasonOperator {
		t.Fatalf("the refund finished: %+v %v", o, err)
	}
	if len(announced) != 1 || announced[0].Type != events.OrderRefunded || announced[0].PaymentID != "pay-jo" {
		t.Errorf("the refund finished announced %+v; want one OrderRefunded naming pay-jo", announced)
	}
	s.wantHeld(3, map[string]int64{})
}

// kafkaFunc is a Producer whose every record is answered at once by the function's error.
type kafkaFunc func(*kgo.Record) error

func (f kafkaFunc) TryProduce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	promise(r, f(r))
}

// TestReplayLogsAReusedPayment: the results topic may hold an OrderPaid that paid Bob's order
// with the payment that had paid Ann's, announced by an api from before the store refused a
// payment's second order. Replay leaves Bob's order unpaid, as the api now would, and logs it
// as it logs a payment too late for its order, for the payment service to settle: before, the
// store's payment_reused refusal fell through replay's switch and nobody heard of the event.
func TestReplayLogsAReusedPayment(t *testing.T) { storetest.Each(t, testReplayReusedPayment) }

func testReplayReusedPayment(t *testing.T, st *store.Store) {
	s := newReplaySale(t, st, 2)
	var logs bytes.Buffer
	s.log = &logs
	ann, bob := s.buy("ann"), s.buy("bob")
	s.confirm(ann)
	s.confirm(bob)
	s.pay(ann)
	reused := bob.New(events.OrderPaid, time.Now())
	reused.PaymentID = "pay-ann"
	s.produce(s.topics.Results, reused)

	if stats := s.replay(consumer.From{}); stats.Paid != 0 {
		t.Errorf("replay: %+v, want no payment recorded", stats)
	}
	s.wantOrders(1, []wantOrder{{ann, events.Paid, ""}, {bob, events.Confirmed, ""}})
	var warned bool
	for line := range strings.Lines(logs.String()) {
		warned = warned || strings.Contains(line, "order_id="+bob.OrderID) && strings.Contains(line, string(events.PaymentReused))
	}
	if !warned {
		t.Errorf("replay did not log the OrderPaid of bob's order with ann's payment:\n%s", logs.String())
	}
}

// replaySale is a campaign with a payment window on the store under test, Redis and a fake
// Kafka, and what the api, the consumer and the compensator do to its orders: the stage of the
// replay stories.
type replaySale struct {
	t        *testing.T
	ctx      context.Context
	st       *store.Store
	r        *lua.Redis
	campaign string
	brokers  []string
	topics   events.Topics
	cl       *kgo.Client
	res      *compensator.Resolver
	log      io.Writer // what the replay logs; nil: nowhere
}

// replayWindow is the payment window of a replaySale's campaign.
const replayWindow = 10 * time.Minute

func newReplaySale(t *testing.T, st *store.Store, stock int64) *replaySale {
	t.Helper()
	return newReplaySaleOn(t, st, stock, kafkatest.Fake(t))
}

// newReplaySaleOn is newReplaySale on brokers: the real broker, for a story kfake does not tell
// as Kafka does.
func newReplaySaleOn(t *testing.T, st *store.Store, stock int64, brokers []string) *replaySale {
	t.Helper()
	s := &replaySale{t: t, ctx: context.Background(), st: st, r: lua.New(luatest.MustRedis(t)), campaign: storetest.Name("replay"), brokers: brokers}
	t.Cleanup(func() { s.r.Close() })
	start := time.Now().Add(-time.Minute)
	if err := st.CreateCampaign(s.ctx, store.Campaign{ID: s.campaign, Name: "replay", Stock: stock, PerUserLimit: 1,
		StartsAtMs: start.UnixMilli(), CreatedAtMs: start.UnixMilli(), OnSale: true, PaymentWindowMs: replayWindow.Milliseconds()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.r.LoadCampaign(s.ctx, lua.Campaign{ID: s.campaign, Remaining: stock, Limit: 1, StartsAt: start, Stock: stock}); err != nil {
		t.Fatal(err)
	}
	s.topics = kafkatest.Topics(t, s.brokers)
	// One partition, so the replay reads the purchases in the order they were made, the order
	// in which the old replay's mistake is certain; across partitions it reads them in any.
	var err error
	if s.cl, err = events.NewClient(s.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.cl.Close)
	s.res = &compensator.Resolver{Store: st, Redis: s.r, Producer: s.cl, Results: s.topics.Results,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	return s
}

// buy does what the api does: reserve, then produce, to the requested topic's first partition.
func (s *replaySale) buy(user string) events.Event {
	s.t.Helper()
	return s.buyIn(0, user)
}

// buyIn is buy into the requested topic's partition p.
func (s *replaySale) buyIn(p int32, user string) events.Event {
	s.t.Helper()
	e := orderEvent(s.campaign, user, 1)
	if _, err := s.r.Reserve(s.ctx, s.campaign, e.OrderID, user, 1, time.Hour); err != nil {
		s.t.Fatalf("reserve for %s: %v", user, err)
	}
	s.produceTo(s.topics.Requested, p, e)
	return e
}

// produce writes e to topic's first partition.
func (s *replaySale) produce(topic string, e events.Event) {
	s.t.Helper()
	s.produceTo(topic, 0, e)
}

// produceTo writes e to topic's partition p.
func (s *replaySale) produceTo(topic string, p int32, e events.Event) {
	s.t.Helper()
	rec, err := events.Record(topic, e)
	if err != nil {
		s.t.Fatal(err)
	}
	rec.Partition = p
	if err := s.cl.ProduceSync(s.ctx, rec).FirstErr(); err != nil {
		s.t.Fatal(err)
	}
}

// confirm does what the consumer does: the store, then Redis.
func (s *replaySale) confirm(e events.Event) {
	s.t.Helper()
	if res, err := s.st.ConfirmOrders(s.ctx, []events.Event{e}); err != nil || res[0].Status != events.Confirmed {
		s.t.Fatalf("confirm %s: %+v %v", e.UserID, res, err)
	}
	if _, err := s.r.Confirm(s.ctx, e.OrderID); err != nil {
		s.t.Fatal(err)
	}
}

// pay is the payment service's payment of e's order, pay-<user>.
func (s *replaySale) pay(e events.Event) {
	s.t.Helper()
	if o, err := s.res.Pay(s.ctx, e.OrderID, "pay-"+e.UserID); err != nil || o.Status != events.Paid {
		s.t.Fatalf("%s pays: %+v %v", e.UserID, o, err)
	}
}

// refund is an operator's refund of e's order.
func (s *replaySale) refund(e events.Event) {
	s.t.Helper()
	if o, err := s.res.Compensate(s.ctx, e.OrderID); err != nil || o.Status != events.Refunded {
		s.t.Fatalf("an operator refunds %s's order: %+v %v", e.UserID, o, err)
	}
}

// unpaid lets e's order go unpaid past its pay_by: the store's row is moved back, as the clock
// cannot be moved on, so that a backup taken after holds the pay_by that has passed by the
// time the replay runs.
func (s *replaySale) unpaid(e events.Event) {
	s.t.Helper()
	db := s.st.DB()
	if _, err := db.ExecContext(s.ctx, db.Rebind(`UPDATE orders SET pay_by_ms = ? WHERE order_id = ?`),
		time.Now().Add(-time.Second).UnixMilli(), e.OrderID); err != nil {
		s.t.Fatal(err)
	}
}

// expire is the sweeper's expiry of e's order, unpaid past its pay_by.
func (s *replaySale) expire(e events.Event) {
	s.t.Helper()
	if o, err := s.res.Expire(s.ctx, e.OrderID, time.Now()); err != nil || o.Status != events.Expired {
		s.t.Fatalf("%s's order expires unpaid: %+v %v", e.UserID, o, err)
	}
}

// backup reads the campaign's rows as a backup of the store holds them, and returns what
// restores them: the campaign's sold, its orders and its buyers' totals as they were, whatever
// happened since.
func (s *replaySale) backup() (restore func()) {
	s.t.Helper()
	c, err := s.st.Campaign(s.ctx, s.campaign)
	if err != nil {
		s.t.Fatal(err)
	}
	orders, err := s.st.Orders(s.ctx, s.campaign)
	if err != nil {
		s.t.Fatal(err)
	}
	holdings, err := s.st.Holdings(s.ctx, s.campaign)
	if err != nil {
		s.t.Fatal(err)
	}
	return func() {
		s.t.Helper()
		db := s.st.DB()
		exec := func(q string, args ...any) {
			if _, err := db.ExecContext(s.ctx, db.Rebind(q), args...); err != nil {
				s.t.Fatal(err)
			}
		}
		exec(`DELETE FROM orders WHERE campaign_id = ?`, s.campaign)
		exec(`DELETE FROM purchases WHERE campaign_id = ?`, s.campaign)
		exec(`UPDATE campaigns SET sold = ? WHERE id = ?`, c.Sold, s.campaign)
		for _, o := range orders {
			exec(`INSERT INTO orders (order_id, campaign_id, user_id, quantity, status, reason, created_at_ms, updated_at_ms, pay_by_ms, payment_id, payment_unannounced)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, o.OrderID, o.CampaignID, o.UserID, o.Quantity, string(o.Status), o.Reason,
				o.CreatedAtMs, o.UpdatedAtMs, o.PayByMs, o.PaymentID, o.PaymentUnannounced)
		}
		for u, n := range holdings {
			exec(`INSERT INTO purchases (campaign_id, user_id, bought) VALUES (?, ?, ?)`, s.campaign, u, n)
		}
	}
}

// replay runs a replay from from, as `seckill replay --from` does.
func (s *replaySale) replay(from consumer.From) consumer.ReplayStats {
	s.t.Helper()
	// The resolver's announcements are produced in the background: all on the topic first.
	if err := s.cl.Flush(s.ctx); err != nil {
		s.t.Fatal(err)
	}
	var progress strings.Builder
	log := s.log
	if log == nil {
		log = io.Discard
	}
	stats, err := consumer.Replay(s.ctx, consumer.Config{Brokers: s.brokers, Topics: s.topics,
		Logger: slog.New(slog.NewTextHandler(log, nil))}, from, s.st, s.r, &progress)
	if err != nil {
		s.t.Fatalf("replay: %v\n%s", err, progress.String())
	}
	if !strings.Contains(progress.String(), "replay: done") {
		s.t.Errorf("replay: no summary in its progress:\n%s", progress.String())
	}
	return stats
}

// wantOrder is the row an order's event must have in the store.
type wantOrder struct {
	e      events.Event
	status events.Status
	reason string
}

func (s *replaySale) wantOrders(round int, want []wantOrder) {
	s.t.Helper()
	for _, w := range want {
		o, err := s.st.Order(s.ctx, w.e.OrderID)
		held, _ := s.r.Reservation(s.ctx, w.e.OrderID)
		if err != nil || o.Status != w.status || o.Reason != w.reason {
			s.t.Errorf("replay #%d: %s's order %q (%q) %v, Redis has it %s; want %s (%q)",
				round, w.e.UserID, o.Status, o.Reason, err, held.State, w.status, w.reason)
		}
	}
}

// wantHeld checks that holdings are the units buyers hold, in the store's sold and buyers'
// totals, and that the audit finds the store and Redis agreeing.
func (s *replaySale) wantHeld(round int, holdings map[string]int64) {
	s.t.Helper()
	var sold int64
	for _, n := range holdings {
		sold += n
	}
	if c, err := s.st.Campaign(s.ctx, s.campaign); err != nil || c.Sold != sold {
		s.t.Errorf("replay #%d: sold %d %v, want %d", round, c.Sold, err, sold)
	}
	if h, err := s.st.Holdings(s.ctx, s.campaign); err != nil || len(h) != len(holdings) {
		s.t.Errorf("replay #%d: holdings %v %v, want %v", round, h, err, holdings)
	} else {
		for u, n := range holdings {
			if h[u] != n {
				s.t.Errorf("replay #%d: holdings %v, want %v", round, h, holdings)
				break
			}
		}
	}
	rep, err := (&compensator.Auditor{Store: s.st, Redis: s.r}).Audit(s.ctx, s.campaign)
	if err != nil || !rep.OK() {
		var out strings.Builder
		rep.Print(&out)
		s.t.Errorf("replay #%d: audit %v:\n%s", round, err, out.String())
	}
}
