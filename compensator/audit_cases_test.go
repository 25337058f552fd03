package compensator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// audit runs the auditor on e's campaign and returns the report printed.
func (e *env) audit(t *testing.T) (compensator.AuditReport, string) {
	t.Helper()
	return e.auditOf(t, e.campaign)
}

// auditOf runs the auditor on campaign ("": every campaign) and returns the report printed.
func (e *env) auditOf(t *testing.T, campaign string) (compensator.AuditReport, string) {
	t.Helper()
	rep, err := (&compensator.Auditor{Store: e.st, Redis: e.r}).Audit(e.ctx, campaign)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	rep.Print(&out)
	return rep, out.String()
}

// TestAuditOrderMovedOnWhileRedisStillPending: the consumer stores an order confirmed, then
// confirms it in Redis in a second step that may fail (not fatal: the sweeper confirms it at its
// deadline). Until then the store may already have moved the order on: the buyer paid (the store
// alone decides), an operator refunded it, or it expired; giveBack confirms first for exactly
// that case. The campaign is healthy; the audit must not flag it.
func TestAuditOrderMovedOnWhileRedisStillPending(t *testing.T) {
	for _, tc := range []struct {
		name string
		move func(e *env, c *compensator.Compensator, ev events.Event) error
	}{
		{"paid", func(e *env, c *compensator.Compensator, ev events.Event) error {
			_, err := c.Pay(e.ctx, ev.OrderID, "pay-"+ev.OrderID)
			return err
		}},
		{"refund stored, its redis step not run yet", func(e *env, c *compensator.Compensator, ev events.Event) error {
			_, _, err := e.st.RefundOrder(e.ctx, ev.OrderID)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvPaying(t, 10, 3, time.Hour)
			c := e.compensator(t, compensator.Config{})
			ev := e.reserve(t, 1, time.Hour)[0]
			if _, err := e.st.ConfirmOrders(e.ctx, []events.Event{ev}); err != nil { // the consumer's store step only
				t.Fatal(err)
			}
			if err := tc.move(e, c, ev); err != nil {
				t.Fatal(err)
			}
			if res, err := e.r.Reservation(e.ctx, ev.OrderID); err != nil || res.State != "pending" {
				t.Fatalf("reservation %+v %v, want still pending in redis", res, err)
			}
			if rep, out := e.audit(t); !rep.OK() {
				t.Errorf("audit of a healthy campaign with an order in flight between the store and redis:\n%s", out)
			}
		})
	}
}

// TestAuditMidRebuild: a rebuild of a campaign whose meta survived (a restart or a failover that
// lost the last writes) freezes it, clears its sale (restore_clear.lua), fills the records and
// holdings, then writes the remaining stock and unfreezes (restore.lua). The audit reads it
// between those steps: "frozen: a rebuild is running, figures below may move". A campaign
// mid-rebuild is healthy; the audit must not flag it.
func TestAuditMidRebuild(t *testing.T) {
	e := newEnvPaying(t, 10, 3, 0)
	evs := e.reserve(t, 3, time.Hour)
	e.confirm(t, evs)
	if rep, out := e.audit(t); !rep.OK() {
		t.Fatalf("audit before the rebuild:\n%s", out)
	}
	if _, err := e.r.Freeze(e.ctx, e.campaign); err != nil {
		t.Fatal(err)
	}
	// What restore_clear.lua does under the mark: the sale's keys go, the meta stays.
	k := lua.KeysOf(e.campaign)
	if err := e.r.Client().Del(e.ctx, k.Stock, k.Buyers, k.Res, k.Pending, k.Done).Err(); err != nil {
		t.Fatal(err)
	}
	if rep, out := e.audit(t); !rep.OK() {
		t.Errorf("audit of a campaign mid-rebuild:\n%s", out)
	}
}

// TestAuditRetiredCampaignChecksTheStore: once an ended campaign's keys have left Redis (the
// retention), "seckill audit checks it against the store alone" (README). The same store that
// fails the audit while the keys are there (orders holding more units than the stock, every
// buyer past the limit, sold disagreeing with the orders) must still fail it after.
func TestAuditRetiredCampaignChecksTheStore(t *testing.T) {
	e := newEnvPaying(t, 2, 1, 0)
	var evs []events.Event
	for _, user := range []string{"ann", "bob"} {
		id := events.NewOrderID(e.campaign)
		res, err := e.r.Reserve(e.ctx, e.campaign, id, user, 1, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: time.Now().UTC(),
			OrderID: id, CampaignID: e.campaign, UserID: user, Quantity: 1, Deadline: res.Deadline})
	}
	e.confirm(t, evs)
	db := e.st.DB()
	// The store's orders now say 6 units sold of a stock of 2, 3 per buyer of a limit of 1.
	if _, err := db.ExecContext(e.ctx, db.Rebind(`UPDATE orders SET quantity = 3 WHERE campaign_id = ?`), e.campaign); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(e.ctx, db.Rebind(`UPDATE campaigns SET ends_at_ms = ? WHERE id = ?`),
		time.Now().Add(-time.Hour).UnixMilli(), e.campaign); err != nil {
		t.Fatal(err)
	}
	if rep, out := e.audit(t); rep.OK() {
		t.Fatalf("audit with the keys still in redis passes an oversold campaign:\n%s", out)
	}
	// The retention passes: the sweeper drops the ended campaign's keys (drop.lua).
	if err := e.r.Client().Del(e.ctx, lua.KeysOf(e.campaign).All()...).Err(); err != nil {
		t.Fatal(err)
	}
	if rep, out := e.audit(t); rep.OK() {
		t.Errorf("audit of the retired campaign passes an oversold store:\n%s", out)
	}
}

// TestAuditClosedBeforeItsStartNeverInRedis: a campaign whose creation stopped between the store
// and Redis (an api that died) is put on sale by the guard's reconcile, unless it is over: an
// operator who closes (or cancels) it before its start leaves it an empty window, which Redis
// never opens and reconcile leaves alone. It sold nothing and never will until reopened; the
// audit must not call it data lost awaiting a rebuild until its planned start.
func TestAuditClosedBeforeItsStartNeverInRedis(t *testing.T) {
	e := newEnvPaying(t, 10, 3, 0)
	later := storetest.Name("later")
	starts := time.Now().Add(24 * time.Hour)
	if err := e.st.CreateCampaign(e.ctx, store.Campaign{ID: later, Name: "later", Stock: 5, PerUserLimit: 1,
		StartsAtMs: starts.UnixMilli(), CreatedAtMs: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	// The api died before LoadCampaign; the operator closes it before its start.
	if _, err := e.operator().Close(e.ctx, later); err != nil {
		t.Logf("close: %v (its sale is not in redis)", err)
	}
	if c, err := e.st.Campaign(e.ctx, later); err != nil || !c.Over(time.Now().UnixMilli()) {
		t.Fatalf("campaign %+v %v, want closed", c, err)
	}
	// The guard's round: reconcile leaves an ended campaign alone.
	if err := e.compensator(t, compensator.Config{}).CheckRedis(e.ctx); err != nil {
		t.Fatal(err)
	}
	if rep, out := e.auditOf(t, later); !rep.OK() {
		t.Errorf("audit of a campaign closed before its start:\n%s", out)
	}
}

// TestAuditGivenBackButStillHeldInRedis: a refund or an expiry is stored first, then its units
// go back in Redis (confirmed -> refunded or expired); one that stopped between the two is
// finished by the sweeper's next round (store.UnfinishedRefunds, store.ExpiringOrders). Until
// then Redis still holds the units, which is healthy; a sweep interval (the audit's grace) after
// the store's step it is not: the units are held for an order that gave them back, for good if
// nothing finishes it.
func TestAuditGivenBackButStillHeldInRedis(t *testing.T) {
	for _, tc := range []struct {
		name string
		give func(e *env, orderID string) error // the store's step alone
	}{
		{"refund", func(e *env, orderID string) error {
			_, _, err := e.st.RefundOrder(e.ctx, orderID)
			return err
		}},
		{"expiry", func(e *env, orderID string) error {
			_, err := e.st.ExpireOrder(e.ctx, orderID, time.Now().Add(2*time.Hour)) // past its pay_by
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvPaying(t, 10, 3, time.Hour)
			evs := e.reserve(t, 2, time.Hour)
			e.confirm(t, evs)
			id := evs[0].OrderID
			if err := tc.give(e, id); err != nil {
				t.Fatal(err)
			}
			if res, err := e.r.Reservation(e.ctx, id); err != nil || res.State != "confirmed" {
				t.Fatalf("reservation %+v %v, want still confirmed in redis", res, err)
			}
			db := e.st.DB()
			at := func(ms int64) {
				t.Helper()
				if _, err := db.ExecContext(e.ctx, db.Rebind(`UPDATE orders SET updated_at_ms = ? WHERE order_id = ?`), ms, id); err != nil {
					t.Fatal(err)
				}
			}
			at(time.Now().UnixMilli())
			if rep, out := e.audit(t); !rep.OK() {
				t.Errorf("audit with the %s just stored, its redis step on its way:\n%s", tc.name, out)
			}
			at(time.Now().Add(-time.Minute).UnixMilli()) // stored a minute ago, never finished
			if rep, out := e.audit(t); rep.OK() || !strings.Contains(out, id) {
				t.Errorf("audit with the %s stored a minute ago and its units still held in redis, want I2 to name %s:\n%s", tc.name, id, out)
			}
		})
	}
}

// TestAuditConfirmedWithoutARecord: a confirmed order's reservation record stays in Redis while
// its campaign's keys do (a refund gives the units back through it; trim.lua drops ended records
// only). A replay that stores a lost order whose record was trimmed after it was released
// persists it as if new (README): the store then holds units Redis has back on sale. Every
// figure still adds up; the order without a record is what tells.
func TestAuditConfirmedWithoutARecord(t *testing.T) {
	e := newEnv(t, 10, 3)
	ev := e.reserve(t, 1, time.Hour)[0]
	if _, err := e.r.Release(e.ctx, ev.OrderID); err != nil { // its units back, as the sweeper does
		t.Fatal(err)
	}
	if n, err := e.r.Trim(e.ctx, e.campaign, 0, 100); err != nil || n != 1 {
		t.Fatalf("trimmed %d records (%v), want its record gone", n, err)
	}
	if _, err := e.st.ConfirmOrders(e.ctx, []events.Event{ev}); err != nil { // the replay's store step
		t.Fatal(err)
	}
	if rep, out := e.audit(t); rep.OK() || !strings.Contains(out, ev.OrderID) {
		t.Errorf("audit of a live campaign with a confirmed order redis has no record of, want I2 to name %s:\n%s", ev.OrderID, out)
	}
}

// TestAuditBuyerWhoseOrdersAllGaveBack: a refund or an expiry takes the order's units off its
// buyer's total in the store (purchases), which the store's limit check reads. A buyer whose
// every order gave its units back holds nothing there: a total left behind refuses them units
// they may buy, and I3 compared the totals of buyers with a confirmed order only.
func TestAuditBuyerWhoseOrdersAllGaveBack(t *testing.T) {
	e := newEnvPaying(t, 10, 3, time.Hour)
	c := e.compensator(t, compensator.Config{})
	evs := e.reserve(t, 3, time.Hour) // one buyer each
	e.confirm(t, evs)
	if _, err := c.Compensate(e.ctx, evs[0].OrderID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Expire(e.ctx, evs[1].OrderID, time.Now().Add(2*time.Hour)); err != nil { // unpaid past its window
		t.Fatal(err)
	}
	if rep, out := e.audit(t); !rep.OK() {
		t.Errorf("audit after a refund and an expiry:\n%s", out)
	}
	db := e.st.DB()
	if _, err := db.ExecContext(e.ctx, db.Rebind(`UPDATE purchases SET bought = 1 WHERE campaign_id = ? AND user_id = ?`),
		e.campaign, evs[0].UserID); err != nil {
		t.Fatal(err)
	}
	if rep, out := e.audit(t); rep.OK() || !strings.Contains(out, evs[0].UserID+" counted 1") {
		t.Errorf("audit with a total the store kept for %s, whose order was refunded, want I3 to name them:\n%s", evs[0].UserID, out)
	}
}

// raceAudit is the store with another process's step landing between the audit's read of
// Redis and its read of the store.
type raceAudit struct {
	compensator.AuditStore
	during func()
}

func (s raceAudit) AuditView(ctx context.Context, campaign string) (store.Campaign, []store.Order, map[string]int64, error) {
	s.during()
	return s.AuditStore.AuditView(ctx, campaign)
}

// TestAuditBetweenItsReads: the audit reads Redis, then the store (a record Redis confirmed has
// its row by then). What happens between the two is in flight, not a violation: a purchase
// reserved and confirmed after the Redis read has a row and no record in what the audit read
// (and a rebuild that clears the records next leaves nothing to look at again); a refund
// finished after it is refunded in the store and still confirmed in that read.
func TestAuditBetweenItsReads(t *testing.T) {
	for _, tc := range []struct {
		name   string
		during func(t *testing.T, e *env, held events.Event)
	}{
		{"a purchase confirmed", func(t *testing.T, e *env, _ events.Event) {
			e.confirm(t, e.reserve(t, 1, time.Hour))
		}},
		{"a purchase confirmed, then a rebuild started", func(t *testing.T, e *env, _ events.Event) {
			e.confirm(t, e.reserve(t, 1, time.Hour))
			if _, err := e.r.Freeze(e.ctx, e.campaign); err != nil {
				t.Fatal(err)
			}
			k := lua.KeysOf(e.campaign) // what restore_clear.lua does under the mark
			if err := e.r.Client().Del(e.ctx, k.Stock, k.Buyers, k.Res, k.Pending, k.Done).Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{"a refund finished", func(t *testing.T, e *env, held events.Event) {
			if _, err := e.operator().Compensate(e.ctx, held.OrderID); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 10, 6) // room for both of buyer u0's purchases
			held := e.reserve(t, 1, time.Hour)[0]
			e.confirm(t, []events.Event{held})
			raced := false
			st := raceAudit{AuditStore: e.st, during: func() {
				if !raced {
					raced = true
					tc.during(t, e, held)
				}
			}}
			rep, err := (&compensator.Auditor{Store: st, Redis: e.r}).Audit(e.ctx, e.campaign)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			rep.Print(&out)
			if !raced || !rep.OK() {
				t.Errorf("audit with %s between its reads (raced: %v):\n%s", tc.name, raced, out.String())
			}
		})
	}
}

// TestAuditStockAddedNotYetInRedis: an operator's added stock changes the store first, then
// Redis (Sync), and the sweeper brings Redis along within a sweep if that step fails. Until
// then Redis sells from the stock it has, and conserves it: the sale is behind the store, not
// losing units. The audit must not flag it; once Redis has the change, it conserves the new
// stock.
func TestAuditStockAddedNotYetInRedis(t *testing.T) {
	e := newEnv(t, 10, 3)
	e.confirm(t, e.reserve(t, 3, time.Hour)[:2]) // the third stays pending
	sync := func(c store.Campaign) {
		t.Helper()
		if _, err := e.r.Sync(e.ctx, compensator.RedisCampaign(c)); err != nil {
			t.Fatal(err)
		}
	}
	// Redis as the api leaves a campaign: its stock and the store's version of it in its meta.
	c, _, err := e.st.ChangeCampaign(e.ctx, e.campaign, func(*store.Campaign) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	sync(c)
	if rep, out := e.audit(t); !rep.OK() {
		t.Fatalf("audit before the stock is added:\n%s", out)
	}
	// The operator adds 5: the store has them, Redis not yet.
	if c, _, err = e.st.ChangeCampaign(e.ctx, e.campaign, func(c *store.Campaign) error { c.Stock += 5; return nil }); err != nil {
		t.Fatal(err)
	}
	if rep, out := e.audit(t); !rep.OK() {
		t.Errorf("audit of a sale whose added stock has not reached redis yet:\n%s", out)
	}
	sync(c)
	if rep, out := e.audit(t); !rep.OK() || !strings.Contains(out, "stock 15,") {
		t.Errorf("audit once redis has the added stock, want it conserving 15:\n%s", out)
	}
	// Conservation against Redis's own stock still finds units lost there.
	if err := e.r.Client().DecrBy(e.ctx, lua.KeysOf(e.campaign).Stock, 1).Err(); err != nil {
		t.Fatal(err)
	}
	if c, _, err = e.st.ChangeCampaign(e.ctx, e.campaign, func(c *store.Campaign) error { c.Stock += 5; return nil }); err != nil {
		t.Fatal(err)
	}
	if rep, out := e.audit(t); rep.OK() {
		t.Errorf("audit of a sale behind the store that lost a unit in redis passes:\n%s", out)
	}
}

// TestAuditCampaignBeingCreated: a campaign's creation stores it first, then puts its sale in
// Redis, then marks it on sale (store.MarkOnSale); one whose Redis step failed is put on sale
// by the guard's reconcile once Redis answers. Until then it sold nothing and Redis never had
// it: no data was lost and no rebuild awaits it, and the audit must not say so.
func TestAuditCampaignBeingCreated(t *testing.T) {
	e := newEnv(t, 10, 3)
	fresh := storetest.Name("fresh")
	if err := e.st.CreateCampaign(e.ctx, store.Campaign{ID: fresh, Name: "fresh", Stock: 5, PerUserLimit: 1,
		StartsAtMs: time.Now().Add(-time.Minute).UnixMilli(), CreatedAtMs: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	if rep, out := e.auditOf(t, fresh); !rep.OK() {
		t.Errorf("audit of a campaign in the store whose sale is not in redis yet:\n%s", out)
	}
	// The same campaign once marked on sale and then missing from Redis is lost data.
	if err := e.st.MarkOnSale(e.ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if rep, out := e.auditOf(t, fresh); rep.OK() {
		t.Errorf("audit of a campaign on sale missing from redis:\n%s\nwant a failure", out)
	}
}

// TestAuditRetiredCampaignChecksPayments: I6 reads the store alone (a confirmed order past its
// pay_by plus a sweep interval, neither paid nor expired), and the sweeper expires such an
// order whether or not its campaign's keys are still in Redis (store.ExpiringOrders reads every
// campaign). A campaign whose keys left Redis, the retention after its end, while an order of
// a payment window longer than that was still unpaid, must still have I6 checked: the audit
// then checked the store's I2 to I4 only.
func TestAuditRetiredCampaignChecksPayments(t *testing.T) {
	e := newEnvPaying(t, 10, 3, time.Millisecond)
	e.confirm(t, e.reserve(t, 1, time.Hour))
	time.Sleep(20 * time.Millisecond) // past its pay_by; the sweeper never expires it
	db := e.st.DB()
	if _, err := db.ExecContext(e.ctx, db.Rebind(`UPDATE campaigns SET ends_at_ms = ? WHERE id = ?`),
		time.Now().Add(-time.Hour).UnixMilli(), e.campaign); err != nil {
		t.Fatal(err)
	}
	a := &compensator.Auditor{Store: e.st, Redis: e.r, Grace: time.Millisecond}
	audit := func() (bool, string) {
		t.Helper()
		rep, err := a.Audit(e.ctx, e.campaign)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		rep.Print(&out)
		return rep.OK(), out.String()
	}
	if ok, out := audit(); ok {
		t.Fatalf("audit with the keys still in redis passes an order unpaid past its pay_by:\n%s", out)
	}
	if err := e.r.Client().Del(e.ctx, lua.KeysOf(e.campaign).All()...).Err(); err != nil { // drop.lua
		t.Fatal(err)
	}
	if ok, out := audit(); ok || !strings.Contains(out, "I6") {
		t.Errorf("audit of the retired campaign passes an order unpaid past its pay_by:\n%s", out)
	}
}

// TestAuditRebuildOfALostRedisChecksTheStore: a campaign whose keys Redis lost is frozen for
// its rebuild (its meta holds the freeze alone). Redis's figures are then not to be judged,
// but the store's own are, as they are for a campaign frozen with its meta intact: an
// oversold store passed the audit as long as the rebuild was running.
func TestAuditRebuildOfALostRedisChecksTheStore(t *testing.T) {
	e := newEnv(t, 2, 1)
	e.confirm(t, []events.Event{e.reserveAs(t, "ann"), e.reserveAs(t, "bob")})
	db := e.st.DB()
	if _, err := db.ExecContext(e.ctx, db.Rebind(`UPDATE orders SET quantity = 3 WHERE campaign_id = ?`), e.campaign); err != nil {
		t.Fatal(err)
	}
	e.loseRedis(t)
	if _, err := e.r.Freeze(e.ctx, e.campaign); err != nil {
		t.Fatal(err)
	}
	if rep, out := e.audit(t); rep.OK() {
		t.Errorf("audit of an oversold store whose campaign's rebuild is running passes:\n%s", out)
	}
}

// TestAuditGoesOnPastACampaignItCannotRead: a campaign the audit cannot read (a malformed
// reservation record here; a Cluster shard that does not answer in production) is its error,
// naming that campaign, and every other campaign is still checked: one bad shard stopped the
// whole audit, and the healthy campaigns' verdicts with it.
func TestAuditGoesOnPastACampaignItCannotRead(t *testing.T) {
	e := newEnv(t, 10, 2)
	healthy := e.addCampaign(t, 10, 2, 0)
	bad := e.reserveAs(t, "u1")
	e.redis(t, "HSET", lua.KeysOf(e.campaign).Res, bad.OrderID, "not a record")
	rep, err := (&compensator.Auditor{Store: e.st, Redis: e.r}).Audit(e.ctx, "")
	if err == nil || !strings.Contains(err.Error(), e.campaign) {
		t.Errorf("audit with a campaign it cannot read: %v; want an error naming %s", err, e.campaign)
	}
	var out strings.Builder
	rep.Print(&out)
	if len(rep.Campaigns) != 1 || rep.Campaigns[0].Campaign != healthy || !rep.OK() {
		t.Errorf("audit with a campaign it cannot read reported:\n%s\nwant %s's checks, every one ok", out.String(), healthy)
	}
}
