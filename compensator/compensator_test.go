package compensator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// env is a campaign on real Redis and PostgreSQL, with kfake topics of its own.
type env struct {
	ctx      context.Context
	st       *store.Store
	r        *lua.Redis
	brokers  []string
	topics   events.Topics
	campaign string
	stock    int64
}

func newEnv(t *testing.T, stock, limit int64) *env {
	t.Helper()
	return newEnvPaying(t, stock, limit, 0)
}

// newEnvPaying is newEnv for a campaign whose confirmed orders must be paid within window.
func newEnvPaying(t testing.TB, stock, limit int64, window time.Duration) *env {
	t.Helper()
	return newEnvOn(t, luatest.MustRedis(t), stock, limit, window)
}

// newEnvOn is newEnvPaying on the Redis deployment of rdb.
func newEnvOn(t testing.TB, rdb redis.UniversalClient, stock, limit int64, window time.Duration) *env {
	t.Helper()
	e := &env{ctx: context.Background(), r: lua.New(rdb), stock: stock}
	t.Cleanup(func() { e.r.Close() })
	e.st = storetest.MustOpen(t, storetest.PostgresURL(t))
	e.brokers = kafkatest.Fake(t)
	e.topics = kafkatest.Topics(t, e.brokers)
	e.campaign = e.addCampaign(t, stock, limit, window)
	return e
}

// addCampaign creates a campaign on sale since an hour ago, in the store and in Redis, and
// returns its id.
func (e *env) addCampaign(t testing.TB, stock, limit int64, window time.Duration) string {
	t.Helper()
	id := storetest.Name("comp")
	now := time.Now()
	if err := e.st.CreateCampaign(e.ctx, store.Campaign{ID: id, Name: "c", Stock: stock, PerUserLimit: limit,
		StartsAtMs: now.Add(-time.Hour).UnixMilli(), CreatedAtMs: now.UnixMilli(), PaymentWindowMs: window.Milliseconds()}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.LoadCampaign(e.ctx, lua.Campaign{ID: id, Remaining: stock, Limit: limit, StartsAt: now.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.MarkOnSale(e.ctx, id); err != nil { // as the api does once Redis has it
		t.Fatal(err)
	}
	return id
}

func (e *env) compensator(t testing.TB, cfg compensator.Config) *compensator.Compensator {
	t.Helper()
	cfg.Brokers, cfg.Topics = e.brokers, e.topics
	c, err := compensator.New(cfg, e.st, e.r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// loseRedis deletes every key of the campaign's sale, as a Redis that lost its data has none.
func (e *env) loseRedis(t *testing.T) {
	t.Helper()
	k := lua.KeysOf(e.campaign)
	if err := e.r.Client().Del(e.ctx, k.Stock, k.Buyers, k.Res, k.Pending, k.Meta).Err(); err != nil {
		t.Fatal(err)
	}
}

// reserve makes n reservations of random quantities that expire after ttl, and returns their
// OrderRequested events.
func (e *env) reserve(t testing.TB, n int, ttl time.Duration) []events.Event {
	t.Helper()
	evs := make([]events.Event, n)
	for i := range evs {
		id := events.NewOrderID(e.campaign)
		user := fmt.Sprintf("u%d", i)
		qty := 1 + rand.IntN(3)
		res, err := e.r.Reserve(e.ctx, e.campaign, id, user, qty, ttl)
		if err != nil {
			t.Fatalf("reserve %d: %v", i, err)
		}
		evs[i] = events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: time.Now().UTC(),
			OrderID: id, CampaignID: e.campaign, UserID: user, Quantity: qty, Deadline: res.Deadline}
	}
	return evs
}

// check asserts that every order of evs is in one final state in both the store and Redis, and
// that the stock is conserved: remaining + confirmed units = stock.
func (e *env) check(t *testing.T, evs []events.Event) map[events.Status]int {
	t.Helper()
	states := map[events.Status]int{}
	held := map[string]int64{}
	for _, ev := range evs {
		o, err := e.st.Order(e.ctx, ev.OrderID)
		if err != nil {
			t.Errorf("order %s: %v", ev.OrderID, err)
			continue
		}
		res, err := e.r.Reservation(e.ctx, ev.OrderID)
		if err != nil {
			t.Fatal(err)
		}
		want := map[events.Status]string{events.Confirmed: "confirmed", events.Failed: "released", events.Refunded: "refunded", events.Expired: "expired"}[o.Status]
		if res.State != want {
			t.Errorf("order %s is %s in the store but %s in redis", ev.OrderID, o.Status, res.State)
		}
		states[o.Status]++
		if o.Status == events.Confirmed {
			held[o.UserID] += o.Quantity
		}
	}
	e.wantConserved(t, held, "confirmed")
	return states
}

// wantConserved asserts that the units the buyers of holds keep (what: "confirmed", "paid") and
// those left on sale add up to the stock, in Redis and in the store, and that Redis and the
// store count exactly those units for each buyer.
func (e *env) wantConserved(t *testing.T, holds map[string]int64, what string) {
	t.Helper()
	var kept int64
	for _, n := range holds {
		kept += n
	}
	remaining, _, err := e.r.Remaining(e.ctx, e.campaign)
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.st.Campaign(e.ctx, e.campaign)
	if err != nil {
		t.Fatal(err)
	}
	if remaining+kept != e.stock || c.Sold != kept {
		t.Errorf("stock not conserved: remaining %d + %s %d != stock %d (store sold %d)", remaining, what, kept, e.stock, c.Sold)
	}
	buyers, err := e.r.Client().HGetAll(e.ctx, lua.KeysOf(e.campaign).Buyers).Result()
	if err != nil {
		t.Fatal(err)
	}
	bought, err := e.st.Holdings(e.ctx, e.campaign)
	if err != nil {
		t.Fatal(err)
	}
	for user, n := range holds {
		if buyers[user] != fmt.Sprint(n) || bought[user] != n {
			t.Errorf("buyer %s holds %d %s units; Redis counts %q, the store %d", user, n, what, buyers[user], bought[user])
		}
	}
	if len(buyers) != len(holds) {
		t.Errorf("Redis counts %d buyers, %d hold %s units", len(buyers), len(holds), what)
	}
}

type nopProducer struct{}

func (nopProducer) TryProduce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	promise(r, nil)
}

// refusingProducer is Kafka refusing every record.
type refusingProducer struct{}

func (refusingProducer) TryProduce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	promise(r, errors.New("kafka refused the record"))
}

// TestRefusedAnnouncementLogsToConfigLogger: an outcome Kafka refuses to announce is logged by the
// compensator's Logger (JSON in production), not by the process's default text logger.
func TestRefusedAnnouncementLogsToConfigLogger(t *testing.T) {
	e := newEnv(t, 10, 10)
	var logs bytes.Buffer
	comp := e.compensator(t, compensator.Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	comp.Producer = refusingProducer{}
	ev := e.reserve(t, 1, time.Minute)[0]
	if o, err := comp.Fail(e.ctx, ev, events.ReasonOperator, "operator"); err != nil || o.Status != events.Failed {
		t.Fatalf("fail: %+v %v", o, err)
	}
	for line := range strings.Lines(logs.String()) {
		var rec struct {
			Level, Msg string
			OrderID    string `json:"order_id"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if rec.Level == "WARN" && rec.Msg == "announce an order's outcome" && rec.OrderID == ev.OrderID {
			return
		}
	}
	t.Errorf("no JSON warning of the refused OrderFailed of %s in the compensator's log:\n%s", ev.OrderID, logs.String())
}

// TestResolversRace lets the DLQ handler, the operator, the sweeper and the consumer hit the
// same reservations at once: each ends in one state, and stock comes back exactly once.
func TestResolversRace(t *testing.T) {
	e := newEnv(t, 400, 10)
	evs := e.reserve(t, 100, 50*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // all past their deadline: the sweeper wants them too
	comp := e.compensator(t, compensator.Config{})
	res := &compensator.Resolver{Store: e.st, Redis: e.r, Producer: nopProducer{}, Results: e.topics.Results}

	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	run := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- err
			}
		}()
	}
	for i, ev := range evs {
		run(func() error { _, err := res.Fail(e.ctx, ev, events.ReasonStoreSoldOut, "dlq"); return err })
		if i%3 == 0 {
			run(func() error { _, err := res.Compensate(e.ctx, ev.OrderID); return err })
		}
		if i%2 == 0 {
			run(func() error { // the consumer
				out, err := e.st.ConfirmOrders(e.ctx, []events.Event{ev})
				if err == nil && out[0].Status == events.Confirmed {
					_, err = e.r.Confirm(e.ctx, ev.OrderID)
				}
				return err
			})
		}
	}
	for range 3 {
		run(func() error { _, err := comp.SweepOnce(e.ctx, store.Fence{}); return err })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	states := e.check(t, evs)
	t.Logf("final states: %v", states)
	if states[events.Failed] == 0 {
		t.Error("no order failed: the race did not happen")
	}
}

// TestSweepers runs two compensators over the same expired reservations: each reservation is
// released once, and a paused former lease holder cannot write.
func TestSweepers(t *testing.T) {
	t.Run("two compensators", func(t *testing.T) {
		e := newEnv(t, 1000, 10)
		ctx, cancel := context.WithCancel(e.ctx)
		var wg sync.WaitGroup
		for range 2 {
			c := e.compensator(t, compensator.Config{SweepInterval: 30 * time.Millisecond})
			wg.Add(1)
			go func() { defer wg.Done(); c.Run(ctx) }()
		}
		evs := e.reserve(t, 200, 100*time.Millisecond)
		deadline := time.Now().Add(20 * time.Second)
		for {
			n, err := e.r.Client().ZCard(e.ctx, lua.KeysOf(e.campaign).Pending).Result()
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d reservations still pending", n)
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		wg.Wait()
		if states := e.check(t, evs); states[events.Failed] != len(evs) {
			t.Errorf("states %v, want all %d failed", states, len(evs))
		}
	})

	t.Run("paused former holder", func(t *testing.T) {
		e := newEnv(t, 100, 10)
		evs := e.reserve(t, 2, 10*time.Millisecond)
		time.Sleep(50 * time.Millisecond) // past their deadlines
		name := e.topics.Prefix + ".sweeper"
		holder := func(lease time.Duration) store.Fence { // as the sweeper takes its lease
			t.Helper()
			lock, err := e.r.TryLock(e.ctx, name, lease)
			if err != nil {
				t.Fatalf("lease: %v", err)
			}
			f, err := e.st.IssueFence(e.ctx, name, lock.Count)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		paused := holder(100 * time.Millisecond)
		time.Sleep(200 * time.Millisecond) // a pause longer than the lease
		successor := holder(time.Minute)
		// The paused holder wakes up and acts on what it saw before its pause: refused, though
		// its successor has not written yet.
		res := &compensator.Resolver{Store: e.st, Redis: e.r, Producer: nopProducer{}, Results: e.topics.Results}
		_, err := res.FailFenced(e.ctx, evs[1], events.ReasonExpired, "sweeper", paused)
		if !errors.Is(err, store.ErrStaleFence) {
			t.Fatalf("paused holder's write: %v, want ErrStaleFence", err)
		}
		if _, err := res.FailFenced(e.ctx, evs[0], events.ReasonExpired, "sweeper", successor); err != nil {
			t.Fatalf("successor's write: %v", err)
		}
		if _, err := e.st.Order(e.ctx, evs[1].OrderID); events.ErrorCode(err) != events.OrderNotFound {
			t.Errorf("the stale write left a row: %v", err)
		}
		if r, _ := e.r.Reservation(e.ctx, evs[1].OrderID); r.State != "pending" {
			t.Errorf("the stale write released the reservation: %s", r.State)
		}
	})
}

// TestRebuild loses a campaign's Redis state and checks the guard freezes it and rebuilds it
// exactly from the store.
func TestRebuild(t *testing.T) {
	e := newEnv(t, 50, 3)
	evs := e.reserve(t, 12, time.Hour)
	// Four confirmed, two of them refunded later; four failed; four pending when Redis is lost.
	res := &compensator.Resolver{Store: e.st, Redis: e.r, Producer: nopProducer{}, Results: e.topics.Results}
	if _, err := e.st.ConfirmOrders(e.ctx, evs[:4]); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs[:4] {
		e.r.Confirm(e.ctx, ev.OrderID)
	}
	for _, ev := range evs[2:8] { // refunds 2..3, fails 4..7
		if _, err := res.Compensate(e.ctx, ev.OrderID); err != nil {
			t.Fatal(err)
		}
	}
	// Order 7 failed longer ago than the retention: Redis had trimmed its record before the loss.
	if _, err := e.st.DB().Exec(e.st.DB().Rebind(`UPDATE orders SET updated_at_ms = ? WHERE order_id = ?`),
		time.Now().Add(-25*time.Hour).UnixMilli(), evs[7].OrderID); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	comp := e.compensator(t, compensator.Config{GuardInterval: 50 * time.Millisecond, RebuildGrace: time.Millisecond, SweepInterval: time.Hour})
	// The rebuild waits after its freeze, before its restore, until the test has tried to buy:
	// a test that polled for the frozen sale saw it only if a poll fell in the rebuild's grace.
	frozen := newStall(make(chan struct{}))
	compensator.SetSnapshots(comp, stallingSnapshots{Snapshotter: e.st, stall: frozen})
	done := make(chan struct{})
	go func() { defer close(done); comp.Run(ctx) }()
	defer func() { cancel(); <-done }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting until %s", what)
			}
		}
	}
	// Redis loses everything of the deployment.
	e.loseRedis(t)
	k := lua.KeysOf(e.campaign)
	buy := func() error {
		_, err := e.r.Reserve(e.ctx, e.campaign, events.NewOrderID(e.campaign), "late", 1, time.Hour)
		return err
	}
	select {
	case <-frozen.held:
	case <-time.After(time.Minute): // not a measurement: a hang guard
		t.Fatal("the guard never rebuilt the lost campaign")
	}
	if err := buy(); events.ErrorCode(err) != events.Unavailable {
		t.Errorf("a purchase while the campaign is frozen for its rebuild: %v, want unavailable", err)
	}
	close(frozen.resume)
	waitFor("the campaign is back on sale", func() bool { return buy() == nil })

	// Confirmed: orders 0, 1 (2 and 3 were refunded). The pending ones 8..11 were lost with
	// Redis and never reached the store, so their units are back.
	var confirmed int64
	for _, ev := range evs[:2] {
		confirmed += int64(ev.Quantity)
		if r, err := e.r.Reservation(e.ctx, ev.OrderID); err != nil || r.State != "confirmed" {
			t.Errorf("confirmed order %s after rebuild: %+v %v", ev.OrderID, r, err)
		}
	}
	remaining, _, _ := e.r.Remaining(e.ctx, e.campaign)
	if remaining != 50-confirmed-1 { // the "late" purchase took one
		t.Errorf("remaining after rebuild and one purchase: %d, want %d", remaining, 50-confirmed-1)
	}
	buyers, _ := e.r.Client().HGetAll(e.ctx, k.Buyers).Result()
	for _, ev := range evs[:2] {
		if buyers[ev.UserID] != fmt.Sprint(ev.Quantity) {
			t.Errorf("buyer %s after rebuild: %q, want %d", ev.UserID, buyers[ev.UserID], ev.Quantity)
		}
	}
	if len(buyers) != 3 { // two confirmed buyers and "late"
		t.Errorf("buyers after rebuild: %v", buyers)
	}
	// The orders that gave their units back within the retention keep their records, in the done
	// set for the trim, so a keyed retry of one finds it ended; the older one and the pending
	// ones have none.
	for i, want := range []string{2: "refunded", 3: "refunded", 4: "released", 5: "released", 6: "released", 11: ""} {
		if i < 2 {
			continue // confirmed: checked above
		}
		r, err := e.r.Reservation(e.ctx, evs[i].OrderID)
		if want == "" && !errors.Is(err, lua.ErrNoReservation) || want != "" && (err != nil || r.State != want) {
			t.Errorf("order %d after rebuild: %+v %v, want a record %q", i, r, err, want)
		}
	}
	if n := e.r.Client().ZCard(e.ctx, k.Done).Val(); n != 5 {
		t.Errorf("the done set holds %d after rebuild, want the 5 ended orders", n)
	}
	// A refund after the rebuild still gives stock back, once.
	if _, err := res.Compensate(e.ctx, evs[0].OrderID); err != nil {
		t.Fatal(err)
	}
	if after, _, _ := e.r.Remaining(e.ctx, e.campaign); after != remaining+int64(evs[0].Quantity) {
		t.Errorf("refund after rebuild: remaining %d, want %d", after, remaining+int64(evs[0].Quantity))
	}
}

// TestReconcile: a campaign the store has and Redis was never given (its creation stopped half
// way) goes on sale by the guard's next round, and one that has ended stays out of Redis. One
// that was on sale and is missing was lost with Redis's data: the rebuild puts it back.
func TestReconcile(t *testing.T) {
	e := newEnv(t, 10, 2)
	now := time.Now()
	live, ended, lost := storetest.Name("half"), storetest.Name("over"), storetest.Name("lost")
	for _, c := range []store.Campaign{
		{ID: lost, Name: "lost", Stock: 7, PerUserLimit: 2, StartsAtMs: now.Add(-time.Hour).UnixMilli(),
			CreatedAtMs: now.Add(-time.Hour).UnixMilli(), OnSale: true},
		{ID: live, Name: "half made", Stock: 7, PerUserLimit: 2, StartsAtMs: now.Add(-time.Hour).UnixMilli(), CreatedAtMs: now.UnixMilli()},
		{ID: ended, Name: "over", Stock: 7, PerUserLimit: 2, StartsAtMs: now.Add(-time.Hour).UnixMilli(), EndsAtMs: now.Add(-time.Minute).UnixMilli(),
			CreatedAtMs: now.Add(-time.Hour).UnixMilli()}, // first in the guard's round, so the check below follows it
	} {
		if err := e.st.CreateCampaign(e.ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	c := e.compensator(t, compensator.Config{GuardInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		remaining, ok, err := e.r.Remaining(e.ctx, live)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if remaining != 7 {
				t.Errorf("remaining %d, want 7", remaining)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the store's campaign never went on sale")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := e.r.Reserve(e.ctx, live, events.NewOrderID(live), "ann", 2, time.Minute); err != nil {
		t.Errorf("buy from the reconciled campaign: %v", err)
	}
	if _, ok, err := e.r.Remaining(e.ctx, ended); err != nil || ok {
		t.Errorf("the ended campaign was loaded (%v, %v)", ok, err)
	}
	for {
		remaining, ok, err := e.r.Remaining(e.ctx, lost)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if _, err := e.r.Reserve(e.ctx, lost, events.NewOrderID(lost), "ann", 1, time.Minute); err == nil {
				if remaining != 7 {
					t.Errorf("the lost campaign came back with %d remaining, want 7", remaining)
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the lost campaign was never rebuilt")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRetire: past the retention, the sweeper drops the records of released reservations and an
// ended campaign's keys; the audit still holds for both, and a late release changes nothing.
func TestRetire(t *testing.T) {
	e := newEnv(t, 1000, 10) // room for 50 reservations of up to 3 units
	ended := storetest.Name("over")
	now := time.Now()
	if err := e.st.CreateCampaign(e.ctx, store.Campaign{ID: ended, Name: "over", Stock: 5, PerUserLimit: 1,
		StartsAtMs: now.Add(-2 * time.Hour).UnixMilli(), EndsAtMs: now.Add(-time.Hour).UnixMilli(), CreatedAtMs: now.UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.LoadCampaign(e.ctx, lua.Campaign{ID: ended, Remaining: 5, Limit: 1, StartsAt: now.Add(-2 * time.Hour), EndsAt: now.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	evs := e.reserve(t, 50, time.Millisecond)
	c := e.compensator(t, compensator.Config{Retention: 10 * time.Millisecond})
	time.Sleep(20 * time.Millisecond) // past the deadlines
	if n, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil || n != len(evs) {
		t.Fatalf("swept %d (%v), want %d", n, err, len(evs))
	}
	time.Sleep(20 * time.Millisecond) // past the retention of what the sweep released
	if _, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil {
		t.Fatal(err)
	}
	if n := e.r.Client().HLen(e.ctx, lua.KeysOf(e.campaign).Res).Val(); n != 0 {
		t.Errorf("%d released records still in redis past the retention", n)
	}
	if n := e.r.Client().Exists(e.ctx, lua.KeysOf(ended).All()...).Val(); n != 0 {
		t.Errorf("%d keys of the ended campaign still in redis", n)
	}
	if out, err := e.r.Release(e.ctx, evs[0].OrderID); err != nil || out.Changed {
		t.Errorf("a release after the trim: %+v %v", out, err)
	}
	if rep, out := e.auditOf(t, ""); !rep.OK() {
		t.Errorf("audit after the retention:\n%s", out)
	}
	for _, ev := range evs {
		if o, err := e.st.Order(e.ctx, ev.OrderID); err != nil || o.Status != events.Failed {
			t.Errorf("order %s: %+v %v, want failed", ev.OrderID, o, err)
		}
	}
	if left, _, _ := e.r.Remaining(e.ctx, e.campaign); left != e.stock {
		t.Errorf("remaining %d, want the whole stock %d back", left, e.stock)
	}
}

// TestAuditWithoutKafka: a Kafka that cannot tell the lag is an error of the audit, not a
// violation: the campaigns' verdicts stand, and the error says what Kafka answered, whichever of
// the two lookups failed.
func TestAuditWithoutKafka(t *testing.T) {
	e := newEnv(t, 10, 2)
	for _, tc := range []struct {
		name    string
		brokers []string
		topics  events.Topics
	}{
		{"no broker listens", []string{"127.0.0.1:1"}, e.topics},
		// The consumer's lag is read, the compensator's is not.
		{"the dead-letter topic is missing", e.brokers, events.Topics{Requested: e.topics.Requested, DLQ: e.topics.DLQ + ".missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := events.NewClient(tc.brokers)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			a := &compensator.Auditor{Store: e.st, Redis: e.r, Admin: kadm.NewClient(cl), Topics: tc.topics}
			rep, err := a.Audit(e.ctx, e.campaign)
			var out strings.Builder
			rep.Print(&out)
			if !errors.Is(err, compensator.ErrNoKafka) || strings.Contains(err.Error(), "<nil>") {
				t.Errorf("audit: %v, want an error that wraps ErrNoKafka and says what failed", err)
			}
			if !rep.OK() || len(rep.Campaigns) != 1 || strings.Contains(out.String(), "FAIL") || strings.Contains(out.String(), "<nil>") {
				t.Errorf("report without kafka, want the campaign's checks, every one ok:\n%s", out.String())
			}
		})
	}
}

// TestSweeperLeaseFitsTheInterval: through a holder's kill -9 (its lease runs out, then a
// standby's next try takes it), a reservation past its deadline is still released within one
// sweep interval, as I5 promises, for every interval of a second or more.
func TestSweeperLeaseFitsTheInterval(t *testing.T) {
	for _, interval := range []time.Duration{2 * time.Second, 5 * time.Second, time.Minute} {
		lease, retry := compensator.SweeperLease(interval)
		if lease+retry >= interval || retry <= 0 || lease < time.Second {
			t.Errorf("sweep interval %v: lease %v + retry %v", interval, lease, retry)
		}
	}
}

// TestReservedAgainAfterTheRecordIsGone: an Idempotency-Key names its order for good, so when
// the key's record and the order's Redis record have both gone (24 h, or a Redis rebuild, which
// keeps only confirmed and paid records), the same key reserves again under the id of an order
// that has long ended. The consumer finds that order final and confirms nothing; the sweeper
// must still give the new reservation's units back at its deadline, whatever the order ended as.
func TestReservedAgainAfterTheRecordIsGone(t *testing.T) {
	e := newEnvPaying(t, 30, 3, time.Hour)
	c := e.compensator(t, compensator.Config{})
	// End an order in each state that gives its units back, the way each really ends.
	ends := map[events.Status]func(ev events.Event){
		events.Failed: func(ev events.Event) {
			if _, err := c.Fail(e.ctx, ev, events.ReasonExpired, "test"); err != nil {
				t.Fatal(err)
			}
		},
		events.Refunded: func(ev events.Event) {
			e.confirm(t, []events.Event{ev})
			if _, err := c.Compensate(e.ctx, ev.OrderID); err != nil {
				t.Fatal(err)
			}
		},
		events.Expired: func(ev events.Event) {
			e.confirm(t, []events.Event{ev})
			if _, err := c.Expire(e.ctx, ev.OrderID, time.Now().Add(2*time.Hour)); err != nil { // not paid in its window
				t.Fatal(err)
			}
		},
	}
	var again []events.Event
	evs := e.reserve(t, len(ends), time.Minute) // one buyer each
	for status, end := range ends {
		ev := evs[len(again)]
		end(ev)
		if o, err := e.st.Order(e.ctx, ev.OrderID); err != nil || o.Status != status {
			t.Fatalf("order %s: %+v %v, want %s", ev.OrderID, o, err, status)
		}
		again = append(again, ev)
	}
	if n, err := e.r.Trim(e.ctx, e.campaign, 0, 100); err != nil || n != len(ends) {
		t.Fatalf("trimmed %d records (%v), want %d", n, err, len(ends))
	}
	for _, ev := range again {
		res, err := e.r.Reserve(e.ctx, e.campaign, ev.OrderID, ev.UserID, ev.Quantity, time.Millisecond)
		if err != nil || res.State != "pending" {
			t.Fatalf("reserve %s again: %+v %v", ev.OrderID, res, err)
		}
	}
	results, err := e.st.ConfirmOrders(e.ctx, again) // what the consumer does with their events
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range results {
		if !r.Duplicate || r.Status == events.Confirmed {
			t.Fatalf("order %s: the consumer got %+v, want the ended order", again[i].OrderID, r)
		}
	}
	time.Sleep(5 * time.Millisecond) // past the deadlines
	if _, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range again {
		if res, err := e.r.Reservation(e.ctx, ev.OrderID); err != nil || res.State == "pending" {
			t.Errorf("order %s after the sweep: %+v %v, want its units given back", ev.OrderID, res, err)
		}
	}
	if overdue, err := e.r.Expired(e.ctx, e.campaign, 0, 10); err != nil || len(overdue) != 0 {
		t.Errorf("still overdue after the sweep: %v %v", overdue, err)
	}
	if left, _, err := e.r.Remaining(e.ctx, e.campaign); err != nil || left != e.stock {
		t.Errorf("remaining %d (%v), want the whole stock %d back", left, err, e.stock)
	}
	if n := e.r.Client().HLen(e.ctx, lua.KeysOf(e.campaign).Buyers).Val(); n != 0 {
		t.Errorf("redis still counts %d buyers' units", n)
	}
}

// racingStore is the store with another process's change of the campaign starting while a
// rebuild holds it: the change either waits for the rebuild's lock or, without one, commits at
// once, before the restore writes Redis from what the rebuild read.
type racingStore struct {
	*store.Store
	during func()
	wg     *sync.WaitGroup
}

func (s racingStore) WhileHeld(ctx context.Context, campaign string, endedSince time.Time, fn func(store.Held) error) error {
	return s.Store.WhileHeld(ctx, campaign, endedSince, func(h store.Held) error {
		done := make(chan struct{})
		s.wg.Go(func() { defer close(done); s.during() })
		select {
		case <-done: // no lock held it back
		case <-time.After(300 * time.Millisecond): // waiting for the lock, as it should
		}
		return fn(h)
	})
}

// TestRebuildHoldsTheCampaign: an expiry, a refund or a cancel that another process commits
// while a rebuild restores the campaign lands on the restored sale: its units come back once
// and stay back (they were given back in the store, then taken again by the restore, for good),
// and a cancelled campaign does not go back on sale.
func TestRebuildHoldsTheCampaign(t *testing.T) {
	for _, change := range []string{"expire", "refund", "cancel"} {
		t.Run(change, func(t *testing.T) {
			e := newEnvPaying(t, 10, 5, time.Hour)
			evs := e.reserve(t, 2, time.Hour)
			e.confirm(t, evs)
			c := e.compensator(t, compensator.Config{RebuildGrace: time.Millisecond})
			op := e.operator()
			var wg sync.WaitGroup
			compensator.SetSnapshots(c, racingStore{Store: e.st, wg: &wg, during: func() {
				var err error
				switch change {
				case "expire":
					_, err = c.Expire(e.ctx, evs[0].OrderID, time.Now().Add(2*time.Hour)) // unpaid past its window
				case "refund":
					_, err = c.Compensate(e.ctx, evs[0].OrderID)
				case "cancel":
					_, _, err = op.Cancel(e.ctx, e.campaign, nil)
				}
				if err != nil {
					t.Errorf("%s during the rebuild: %v", change, err)
				}
			}})
			if err := c.Rebuild(e.ctx, []string{e.campaign}); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			camp, err := e.st.Campaign(e.ctx, e.campaign)
			if err != nil {
				t.Fatal(err)
			}
			if left, _, err := e.r.Remaining(e.ctx, e.campaign); err != nil || left != camp.Stock-camp.Sold {
				t.Errorf("redis has %d left (%v), the store stock %d - sold %d: units stranded", left, err, camp.Stock, camp.Sold)
			}
			if res, err := e.r.Reservation(e.ctx, evs[0].OrderID); err != nil || res.State == "confirmed" {
				t.Errorf("order 0's record after the %s: %+v %v, want it given back", change, res, err)
			}
			if change == "cancel" {
				_, err := e.r.Reserve(e.ctx, e.campaign, events.NewOrderID(e.campaign), "late", 1, time.Hour)
				if events.ErrorCode(err) != events.Ended || camp.Sold != 0 {
					t.Errorf("after a cancel during the rebuild: a purchase got %v, sold %d; want ended and nothing sold", err, camp.Sold)
				}
			}
		})
	}
}

// TestCloseDeliversAnnouncements: a compensator announces outcomes without waiting for Kafka
// (the store holds them already), so a compensator stopped right after giving units back still
// holds the OrderFailed in its client. Close delivers it: the apis' order streams and sold-out
// flags learn of it from the results topic. Once each: an operator's compensation of a pending
// order announced it twice.
func TestCloseDeliversAnnouncements(t *testing.T) {
	e := newEnv(t, 100, 10)
	kafka, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kafka.Close()
	e.brokers = kafka.ListenAddrs()
	e.topics = kafkatest.Topics(t, e.brokers)
	c := e.compensator(t, compensator.Config{})
	// Kafka is slow: every produce is answered 200 ms late, so the announcements are in
	// flight when the compensator is told to stop.
	kafka.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		kafka.KeepControl()
		kafka.SleepControl(func() { time.Sleep(200 * time.Millisecond) })
		return nil, nil, false
	})
	evs := e.reserve(t, 20, time.Hour)
	for _, ev := range evs {
		if _, err := c.Compensate(e.ctx, ev.OrderID); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	announced := e.announced(t)
	for _, ev := range evs {
		if n := len(announced[ev.OrderID]); n != 1 {
			t.Errorf("order %s given back before Close was announced %d times, want once", ev.OrderID, n)
		}
	}
}

// announced reads the results topic: the types of the events announced, per order.
func (e *env) announced(t *testing.T) map[string][]events.Type {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	recs, err := events.ReadTopic(ctx, e.brokers, e.topics.Results)
	if err != nil {
		t.Fatal(err)
	}
	announced := map[string][]events.Type{}
	for _, r := range recs {
		ev, err := events.Decode(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		announced[ev.OrderID] = append(announced[ev.OrderID], ev.Type)
	}
	return announced
}

// TestRebuildOfACampaignLeftFrozen: a rebuild that froze a campaign and died before restoring it
// (killed, or paused past its lease after its successor had restored the campaign, then
// killed) left it frozen, and the guard never looked again: its run id was not the lost one,
// so buyers were answered "being restored" for good. A frozen campaign with the rebuild lock
// free is rebuilt like a lost one.
func TestRebuildOfACampaignLeftFrozen(t *testing.T) {
	e := newEnv(t, 10, 5)
	evs := e.reserve(t, 2, time.Hour)
	e.confirm(t, evs)
	if _, err := e.r.Freeze(e.ctx, e.campaign); err != nil { // and the rebuild that froze it is gone
		t.Fatal(err)
	}
	c := e.compensator(t, compensator.Config{RebuildGrace: time.Millisecond})
	if err := c.CheckRedis(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.checkRestored(t, evs, "a guard round")
}

// checkRestored asserts that the campaign, rebuilt after when, is on sale again with the units
// of the confirmed orders evs still sold, and takes a purchase.
func (e *env) checkRestored(t *testing.T, evs []events.Event, when string) {
	t.Helper()
	gens, err := e.r.Generations(e.ctx, []string{e.campaign})
	if err != nil {
		t.Fatal(err)
	}
	if g := gens[e.campaign]; g.Frozen || g.Lost() {
		t.Fatalf("after %s: %+v; want the campaign restored and on sale", when, g)
	}
	var sold int64
	for _, ev := range evs {
		sold += int64(ev.Quantity)
	}
	if left, _, err := e.r.Remaining(e.ctx, e.campaign); err != nil || left != e.stock-sold {
		t.Errorf("after %s: remaining %d, %v; want %d: the confirmed orders' units stay sold", when, left, err, e.stock-sold)
	}
	if _, err := e.r.Reserve(e.ctx, e.campaign, events.NewOrderID(e.campaign), "late", 1, time.Minute); err != nil {
		t.Errorf("a purchase after %s: %v, want it taken", when, err)
	}
}

// TestSweeperFinishesInterruptedRefunds: a refund that stopped between the store and Redis (an
// operator's control cut short, a compensator killed mid-cancel) held its units and the buyer's
// count until someone ran the control again. The sweeper gives them back, once.
func TestSweeperFinishesInterruptedRefunds(t *testing.T) {
	e := newEnv(t, 100, 10)
	evs := e.reserve(t, 3, time.Hour)
	e.confirm(t, evs)
	if _, _, err := e.st.RefundOrder(e.ctx, evs[0].OrderID); err != nil { // and Redis never heard of it
		t.Fatal(err)
	}
	c := e.compensator(t, compensator.Config{})
	for range 2 {
		if _, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil {
			t.Fatal(err)
		}
	}
	if states := e.check(t, evs); states[events.Refunded] != 1 || states[events.Confirmed] != 2 {
		t.Errorf("after two sweeps: %v; want the interrupted refund finished, the others confirmed", states)
	}
	if o, err := e.st.Order(e.ctx, evs[0].OrderID); err != nil || o.Reason != events.ReasonOperator {
		t.Errorf("the refunded order = %+v, %v; want its units marked back (reason %q)", o, err, events.ReasonOperator)
	}
}
