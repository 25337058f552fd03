package lua_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
)

// backend is one Redis the suite runs on. The scripts read Redis's TIME: a real server takes it
// from the wall clock, miniredis from SetTime, so tests move time through advance and until.
type backend struct {
	rdb *redis.Client
	r   *lua.Redis
	mr  *miniredis.Miniredis // nil on a real server
	mu  sync.Mutex
	at  time.Time // miniredis's clock
}

func openRedis(t *testing.T) *backend {
	t.Helper()
	rdb := luatest.MustRedis(t)
	b := &backend{rdb: rdb, r: lua.New(rdb)}
	t.Cleanup(func() { b.r.Close() })
	if err := b.r.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	return b
}

func openMiniredis(t *testing.T) *backend {
	t.Helper()
	mr := miniredis.RunT(t)
	at := time.Now().Truncate(time.Millisecond)
	mr.SetTime(at)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	b := &backend{rdb: rdb, r: lua.New(rdb), mr: mr, at: at}
	t.Cleanup(func() { b.r.Close() })
	if err := b.r.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	return b
}

// now is the time Redis's TIME reports.
func (b *backend) now() time.Time {
	if b.mr == nil {
		return time.Now()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.at
}

// until moves Redis's clock to t: miniredis jumps, a real server is waited for.
func (b *backend) until(t time.Time) {
	if b.mr == nil {
		time.Sleep(time.Until(t))
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.After(b.at) {
		b.at = t
		b.mr.SetTime(t)
	}
}

func (b *backend) advance(d time.Duration) { b.until(b.now().Add(d)) }

// newCampaignID returns a campaign id no other test run uses, so tests can share a server.
func newCampaignID() string { return "c-" + events.NewID()[14:] }

// deleteCampaign removes the campaign's keys when the test ends; the server is shared.
func deleteCampaign(tb testing.TB, rdb redis.Cmdable, id string) {
	tb.Cleanup(func() {
		k := lua.KeysOf(id)
		// The test's context is cancelled before cleanups run.
		if err := rdb.Del(context.Background(), k.All()...).Err(); err != nil {
			tb.Errorf("delete campaign %s: %v", id, err)
		}
	})
}

// load loads c (giving it a fresh id when it has none) and returns its id.
func load(tb testing.TB, r *lua.Redis, c lua.Campaign) string {
	tb.Helper()
	if c.ID == "" {
		c.ID = newCampaignID()
	}
	deleteCampaign(tb, r.Client(), c.ID)
	loaded, err := r.LoadCampaign(context.Background(), c)
	if err != nil {
		tb.Fatal(err)
	}
	if !loaded {
		tb.Fatalf("LoadCampaign(%s) = false for a new campaign", c.ID)
	}
	return c.ID
}

// open loads a campaign that is on sale now, with no end.
func (b *backend) open(t *testing.T, remaining, limit int64) string {
	t.Helper()
	return load(t, b.r, lua.Campaign{Remaining: remaining, Limit: limit, StartsAt: b.now().Add(-time.Hour)})
}

// state is everything Redis holds about one campaign, raw, to tell whether a call changed any of it.
type state struct {
	Stock   string // "" when there is no stock key
	Meta    map[string]string
	Buyers  map[string]string
	Res     map[string]string
	Pending []redis.Z
}

func readState(tb testing.TB, rdb redis.Cmdable, campaign string) state {
	tb.Helper()
	ctx := context.Background()
	k := lua.KeysOf(campaign)
	stock, err := rdb.Get(ctx, k.Stock).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		tb.Fatal(err)
	}
	s := state{Stock: stock}
	for _, h := range []struct {
		key string
		to  *map[string]string
	}{{k.Meta, &s.Meta}, {k.Buyers, &s.Buyers}, {k.Res, &s.Res}} {
		if *h.to, err = rdb.HGetAll(ctx, h.key).Result(); err != nil {
			tb.Fatal(err)
		}
	}
	if s.Pending, err = rdb.ZRangeWithScores(ctx, k.Pending, 0, -1).Result(); err != nil {
		tb.Fatal(err)
	}
	return s
}

func assertUnchanged(tb testing.TB, rdb redis.Cmdable, campaign string, before state, what string) {
	tb.Helper()
	if after := readState(tb, rdb, campaign); !reflect.DeepEqual(before, after) {
		tb.Errorf("%s changed Redis:\nbefore %+v\nafter  %+v", what, before, after)
	}
}

// record is a reservation as the res hash holds it, parsed independently of the package.
type record struct {
	State    string
	Qty      int64
	Deadline int64
	User     string
}

func parseRecord(tb testing.TB, raw string) record {
	tb.Helper()
	p := strings.SplitN(raw, "|", 4)
	if len(p) != 4 {
		tb.Fatalf("malformed reservation record %q", raw)
	}
	qty, err1 := strconv.ParseInt(p[1], 10, 64)
	deadline, err2 := strconv.ParseInt(p[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		tb.Fatalf("malformed reservation record %q: %v", raw, err)
	}
	return record{State: p[0], Qty: qty, Deadline: deadline, User: p[3]}
}

// checkInvariants asserts the design's invariants on what Redis holds for a campaign that was
// loaded with stock units and limit per user, and returns its reservations by order id:
// I4 remaining >= 0; I1 stock = remaining + pending + confirmed; I3 each buyer's pending +
// confirmed <= limit and equal to the buyers hash; and the pending set is exactly the pending
// reservations, scored by their deadlines.
func checkInvariants(tb testing.TB, rdb redis.Cmdable, campaign string, stock, limit int64) map[string]record {
	tb.Helper()
	return checkRebuilt(tb, rdb, campaign, stock, limit, nil)
}

// checkRebuilt is checkInvariants for a campaign loaded with stock remaining units and holdings:
// units its buyers held before, which count towards their limits but have no record in Redis.
func checkRebuilt(tb testing.TB, rdb redis.Cmdable, campaign string, stock, limit int64, holdings map[string]int64) map[string]record {
	tb.Helper()
	s := readState(tb, rdb, campaign)
	remaining, err := strconv.ParseInt(s.Stock, 10, 64)
	if err != nil {
		tb.Fatalf("stock of %s: %q: %v", campaign, s.Stock, err)
	}
	if remaining < 0 {
		tb.Errorf("I4: remaining = %d < 0", remaining)
	}
	recs := make(map[string]record, len(s.Res))
	held := maps.Clone(holdings)
	if held == nil {
		held = map[string]int64{}
	}
	deadlines := map[string]float64{}
	var taken int64
	for id, raw := range s.Res {
		r := parseRecord(tb, raw)
		recs[id] = r
		if c, ok := events.CampaignOf(id); !ok || c != campaign {
			tb.Errorf("order %q in the res hash of campaign %s", id, campaign)
		}
		if r.Qty < 1 || r.Qty > limit {
			tb.Errorf("order %s holds quantity %d, outside 1..%d", id, r.Qty, limit)
		}
		switch r.State {
		case "pending":
			deadlines[id] = float64(r.Deadline)
			fallthrough
		case "confirmed":
			taken += r.Qty
			held[r.User] += r.Qty
		case "released", "refunded", "expired":
		default:
			tb.Errorf("order %s has unknown state %q", id, r.State)
		}
	}
	if stock != remaining+taken {
		tb.Errorf("I1: stock %d != remaining %d + pending and confirmed %d", stock, remaining, taken)
	}
	buyers := map[string]int64{}
	for u, v := range s.Buyers {
		if buyers[u], err = strconv.ParseInt(v, 10, 64); err != nil {
			tb.Errorf("buyers[%q] = %q: %v", u, v, err)
		}
	}
	for u, n := range held {
		if n > limit {
			tb.Errorf("I3: user %q holds %d > limit %d", u, n, limit)
		}
	}
	if !maps.Equal(held, buyers) {
		tb.Errorf("buyers hash %v, but the reservations hold %v", buyers, held)
	}
	zset := map[string]float64{}
	for _, z := range s.Pending {
		zset[z.Member.(string)] = z.Score
	}
	if !maps.Equal(zset, deadlines) {
		tb.Errorf("pending set %v, but the pending reservations' deadlines are %v", zset, deadlines)
	}
	return recs
}

func wantCode(tb testing.TB, err error, code events.Code, what string) {
	tb.Helper()
	if got := events.ErrorCode(err); got != code {
		tb.Errorf("%s: error %v (code %q), want code %q", what, err, got, code)
	}
}

func wantOutcome(tb testing.TB, got lua.Outcome, err error, want lua.Outcome, what string) {
	tb.Helper()
	if err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
	if got != want {
		tb.Errorf("%s = %+v, want %+v", what, got, want)
	}
}

func wantRemaining(tb testing.TB, r *lua.Redis, campaign string, want int64) {
	tb.Helper()
	n, ok, err := r.Remaining(context.Background(), campaign)
	if err != nil {
		tb.Fatal(err)
	}
	if !ok || n != want {
		tb.Errorf("Remaining(%s) = %d, %v; want %d, true", campaign, n, ok, want)
	}
}

func reserve(tb testing.TB, r *lua.Redis, campaign, user string, qty int, ttl time.Duration) lua.Reservation {
	tb.Helper()
	res, err := r.Reserve(context.Background(), campaign, events.NewOrderID(campaign), user, qty, ttl)
	if err != nil {
		tb.Fatalf("Reserve(%s, %q, %d): %v", campaign, user, qty, err)
	}
	return res
}

func sameReservation(a, b lua.Reservation) bool {
	return a.OrderID == b.OrderID && a.Campaign == b.Campaign && a.User == b.User &&
		a.Quantity == b.Quantity && a.State == b.State && a.Deadline.Equal(b.Deadline)
}

// TestScripts runs every story on a real Redis and on miniredis, which `seckill dev` uses.
func TestScripts(t *testing.T) {
	stories := []struct {
		name string
		run  func(*testing.T, *backend)
	}{
		{"LoadCampaignOnce", testLoadCampaignOnce},
		{"RemainingReportsExistence", testRemainingReportsExistence},
		{"ReserveRecordsPending", testReserveRecordsPending},
		{"DuplicateOrderID", testDuplicateOrderID},
		{"Refusals", testRefusals},
		{"SoldOut", testSoldOut},
		{"LimitIsCumulative", testLimitIsCumulative},
		{"SaleWindow", testSaleWindow},
		{"UserIDsRoundTrip", testUserIDsRoundTrip},
		{"ReleaseOnce", testReleaseOnce},
		{"ReleaseOfConfirmedDoesNothing", testReleaseOfConfirmed},
		{"ConfirmLeavesPendingSet", testConfirm},
		{"RefundOnce", testRefundOnce},
		{"ExpiredListsPastDeadline", testExpired},
		{"MalformedRecord", testMalformedRecord},
		{"MalformedCountGivesNothingBack", testMalformedCount},
		{"TrimKeepsRedisBounded", testTrim},
		{"RestoreKeepsEndedRecordsForTheRetention", testRestoreEnded},
		{"DropEndedCampaign", testDrop},
		{"SyncAppliesEachVersionOnce", testSync},
	}
	for _, be := range []struct {
		name string
		open func(*testing.T) *backend
	}{{"redis", openRedis}, {"miniredis", openMiniredis}} {
		t.Run(be.name, func(t *testing.T) {
			for _, s := range stories {
				t.Run(s.name, func(t *testing.T) {
					t.Parallel()
					s.run(t, be.open(t))
				})
			}
		})
	}
}

func testLoadCampaignOnce(t *testing.T, b *backend) {
	ctx := t.Context()
	id := load(t, b.r, lua.Campaign{Remaining: 10, Limit: 3, StartsAt: b.now().Add(-time.Hour)})
	reserve(t, b.r, id, "alice", 2, time.Minute)
	before := readState(t, b.rdb, id)

	// A second load (say, another api host starting) must not reset what was sold.
	loaded, err := b.r.LoadCampaign(ctx, lua.Campaign{ID: id, Remaining: 100, Limit: 50, StartsAt: b.now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if loaded {
		t.Error("second LoadCampaign = true, want false")
	}
	assertUnchanged(t, b.rdb, id, before, "second LoadCampaign")
	wantRemaining(t, b.r, id, 8)

	// The first limit and window still rule.
	_, err = b.r.Reserve(ctx, id, events.NewOrderID(id), "bob", 4, time.Minute)
	wantCode(t, err, events.Invalid, "quantity 4 over the first limit 3")
	reserve(t, b.r, id, "bob", 3, time.Minute)
	wantRemaining(t, b.r, id, 5)
	checkInvariants(t, b.rdb, id, 10, 3)
}

func testRemainingReportsExistence(t *testing.T, b *backend) {
	ctx := t.Context()
	n, ok, err := b.r.Remaining(ctx, newCampaignID())
	if err != nil || ok || n != 0 {
		t.Errorf("Remaining(unknown) = %d, %v, %v; want 0, false, nil", n, ok, err)
	}
	// A campaign with nothing left exists: sold out is not "not found".
	empty := load(t, b.r, lua.Campaign{Remaining: 0, Limit: 1, StartsAt: b.now().Add(-time.Hour)})
	wantRemaining(t, b.r, empty, 0)
	_, err = b.r.Reserve(ctx, empty, events.NewOrderID(empty), "alice", 1, time.Minute)
	wantCode(t, err, events.SoldOut, "reserve from an empty campaign")

	id := b.open(t, 7, 2)
	wantRemaining(t, b.r, id, 7)
	reserve(t, b.r, id, "alice", 2, time.Minute)
	wantRemaining(t, b.r, id, 5)
}

func testReserveRecordsPending(t *testing.T, b *backend) {
	ctx := t.Context()
	id := b.open(t, 10, 3)
	const ttl = 30 * time.Second
	order := events.NewOrderID(id)
	before := b.now().Truncate(time.Millisecond)
	res, err := b.r.Reserve(ctx, id, order, "alice", 2, ttl)
	after := b.now()
	if err != nil {
		t.Fatal(err)
	}
	if res.OrderID != order || res.Campaign != id || res.User != "alice" || res.Quantity != 2 || res.State != "pending" {
		t.Errorf("Reserve = %+v", res)
	}
	if res.Deadline.Before(before.Add(ttl)) || res.Deadline.After(after.Add(ttl)) {
		t.Errorf("deadline %v, want between %v and %v (now + ttl by Redis's clock)", res.Deadline, before.Add(ttl), after.Add(ttl))
	}
	got, err := b.r.Reservation(ctx, order)
	if err != nil {
		t.Fatal(err)
	}
	if !sameReservation(got, res) {
		t.Errorf("Reservation = %+v, want what Reserve returned: %+v", got, res)
	}
	wantRemaining(t, b.r, id, 8)
	recs := checkInvariants(t, b.rdb, id, 10, 3)
	if len(recs) != 1 || recs[order].State != "pending" {
		t.Errorf("reservations %v, want one pending", recs)
	}
	if _, err := b.r.Reservation(ctx, events.NewOrderID(id)); !errors.Is(err, lua.ErrNoReservation) {
		t.Errorf("Reservation(unknown order) error %v, want ErrNoReservation", err)
	}
	if _, err := b.r.Reservation(ctx, "not an order id"); !errors.Is(err, lua.ErrNoReservation) {
		t.Errorf("Reservation(malformed id) error %v, want ErrNoReservation", err)
	}
}

func testDuplicateOrderID(t *testing.T, b *backend) {
	ctx := t.Context()
	id := b.open(t, 10, 3)
	order := events.NewOrderID(id)
	first, err := b.r.Reserve(ctx, id, order, "alice", 2, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	before := readState(t, b.rdb, id)
	b.advance(5 * time.Millisecond) // a new deadline would differ from the first

	// A retry, even one that disagrees with the first request, gets the first reservation back.
	again, err := b.r.Reserve(ctx, id, order, "bob", 1, time.Hour)
	if err != nil {
		t.Fatalf("duplicate Reserve: %v", err)
	}
	if !sameReservation(again, first) {
		t.Errorf("duplicate Reserve = %+v, want the first reservation %+v", again, first)
	}
	assertUnchanged(t, b.rdb, id, before, "duplicate Reserve")

	// A duplicate of a settled reservation reports its state and changes nothing either.
	out, err := b.r.Release(ctx, order)
	wantOutcome(t, out, err, lua.Outcome{Changed: true, State: "released"}, "Release")
	before = readState(t, b.rdb, id)
	again, err = b.r.Reserve(ctx, id, order, "alice", 2, 30*time.Second)
	if err != nil {
		t.Fatalf("duplicate Reserve after release: %v", err)
	}
	want := first
	want.State = "released"
	if !sameReservation(again, want) {
		t.Errorf("duplicate Reserve after release = %+v, want %+v", again, want)
	}
	assertUnchanged(t, b.rdb, id, before, "duplicate Reserve after release")
	checkInvariants(t, b.rdb, id, 10, 3)
}

func testRefusals(t *testing.T, b *backend) {
	now := b.now()
	cases := []struct {
		name     string
		campaign *lua.Campaign // nil: never loaded
		qty      int
		code     events.Code
	}{
		{"campaign_not_found", nil, 1, events.CampaignNotFound},
		{"not_started", &lua.Campaign{Remaining: 10, Limit: 3, StartsAt: now.Add(time.Hour)}, 1, events.NotStarted},
		{"ended", &lua.Campaign{Remaining: 10, Limit: 3, StartsAt: now.Add(-2 * time.Hour), EndsAt: now.Add(-time.Hour)}, 1, events.Ended},
		{"quantity_above_limit", &lua.Campaign{Remaining: 10, Limit: 3, StartsAt: now.Add(-time.Hour)}, 4, events.Invalid},
		{"quantity_zero", &lua.Campaign{Remaining: 10, Limit: 3, StartsAt: now.Add(-time.Hour)}, 0, events.Invalid},
		{"quantity_negative", &lua.Campaign{Remaining: 10, Limit: 3, StartsAt: now.Add(-time.Hour)}, -2, events.Invalid},
		{"sold_out", &lua.Campaign{Remaining: 2, Limit: 3, StartsAt: now.Add(-time.Hour)}, 3, events.SoldOut},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			id := newCampaignID()
			if c.campaign != nil {
				c.campaign.ID = id
				load(t, b.r, *c.campaign)
			} else {
				deleteCampaign(t, b.rdb, id)
			}
			before := readState(t, b.rdb, id)
			order := events.NewOrderID(id)
			_, err := b.r.Reserve(ctx, id, order, "alice", c.qty, time.Minute)
			wantCode(t, err, c.code, "Reserve")
			assertUnchanged(t, b.rdb, id, before, "refused Reserve")
			if _, err := b.r.Reservation(ctx, order); !errors.Is(err, lua.ErrNoReservation) {
				t.Errorf("Reservation after a refusal: %v, want ErrNoReservation", err)
			}
			if c.campaign == nil {
				if n, err := b.rdb.Exists(ctx, lua.KeysOf(id).Stock, lua.KeysOf(id).Buyers, lua.KeysOf(id).Res, lua.KeysOf(id).Pending, lua.KeysOf(id).Meta).Result(); err != nil || n != 0 {
					t.Errorf("reserving from an unknown campaign left %d keys (%v)", n, err)
				}
			}
		})
	}
}

func testSoldOut(t *testing.T, b *backend) {
	ctx := t.Context()
	id := b.open(t, 5, 3)
	a := reserve(t, b.r, id, "alice", 3, time.Minute)
	_, err := b.r.Reserve(ctx, id, events.NewOrderID(id), "bob", 3, time.Minute)
	wantCode(t, err, events.SoldOut, "3 of 2 left")
	reserve(t, b.r, id, "bob", 2, time.Minute)
	wantRemaining(t, b.r, id, 0)
	_, err = b.r.Reserve(ctx, id, events.NewOrderID(id), "carol", 1, time.Minute)
	wantCode(t, err, events.SoldOut, "1 of 0 left")

	// Released units are sellable again.
	out, err := b.r.Release(ctx, a.OrderID)
	wantOutcome(t, out, err, lua.Outcome{Changed: true, State: "released"}, "Release")
	reserve(t, b.r, id, "carol", 3, time.Minute)
	wantRemaining(t, b.r, id, 0)
	checkInvariants(t, b.rdb, id, 5, 3)
}

func testLimitIsCumulative(t *testing.T, b *backend) {
	ctx := t.Context()
	id := b.open(t, 100, 3)
	two := reserve(t, b.r, id, "alice", 2, time.Minute)
	_, err := b.r.Reserve(ctx, id, events.NewOrderID(id), "alice", 2, time.Minute)
	wantCode(t, err, events.LimitExceeded, "2 + 2 > 3")
	one := reserve(t, b.r, id, "alice", 1, time.Minute)
	_, err = b.r.Reserve(ctx, id, events.NewOrderID(id), "alice", 1, time.Minute)
	wantCode(t, err, events.LimitExceeded, "3 + 1 > 3")
	reserve(t, b.r, id, "bob", 3, time.Minute) // the limit is per user

	// Confirmed units still count; released ones do not.
	out, err := b.r.Confirm(ctx, one.OrderID)
	wantOutcome(t, out, err, lua.Outcome{Changed: true, State: "confirmed"}, "Confirm")
	out, err = b.r.Release(ctx, two.OrderID)
	wantOutcome(t, out, err, lua.Outcome{Changed: true, State: "released"}, "Release")
	_, err = b.r.Reserve(ctx, id, events.NewOrderID(id), "alice", 3, time.Minute)
	wantCode(t, err, events.LimitExceeded, "1 confirmed + 3 > 3")
	reserve(t, b.r, id, "alice", 2, time.Minute)
	wantRemaining(t, b.r, id, 100-1-3-2)
	checkInvariants(t, b.rdb, id, 100, 3)
}

func testSaleWindow(t *testing.T, b *backend) {
	ctx := t.Context()
	// Windows relative to Redis's clock; wide enough for a loaded machine on a real server.
	starts := b.now().Add(300 * time.Millisecond).Truncate(time.Millisecond)
	ends := starts.Add(time.Second)
	id := load(t, b.r, lua.Campaign{Remaining: 10, Limit: 3, StartsAt: starts, EndsAt: ends})
	try := func(what string, code events.Code) lua.Reservation {
		t.Helper()
		res, err := b.r.Reserve(ctx, id, events.NewOrderID(id), "alice", 1, time.Minute)
		wantCode(t, err, code, what)
		return res
	}
	try("before the start", events.NotStarted)
	if b.mr != nil { // only miniredis's clock can stand on the boundaries
		b.until(starts.Add(-time.Millisecond))
		try("a millisecond before the start", events.NotStarted)
		b.until(starts)
		try("at the start", "")
		b.until(ends.Add(-time.Millisecond))
		try("a millisecond before the end", "")
	}
	b.until(starts.Add(50 * time.Millisecond))
	first := try("during the sale", "")
	b.until(ends)
	try("at the end", events.Ended)
	b.advance(50 * time.Millisecond)
	try("after the end", events.Ended)

	// A retry of an order accepted during the sale still gets its reservation.
	again, err := b.r.Reserve(ctx, id, first.OrderID, "alice", 1, time.Minute)
	if err != nil || !sameReservation(again, first) {
		t.Errorf("retry after the end = %+v, %v; want %+v, nil", again, err, first)
	}
	checkInvariants(t, b.rdb, id, 10, 3)
}

func testUserIDsRoundTrip(t *testing.T, b *backend) {
	ctx := t.Context()
	users := []string{"a|b", "x:y:z", "|", "||", "pending|1|2|", "ünï|cødé:用户", "🛒:|:🛒", "tab\tand\nnewline", " spaced "}
	id := b.open(t, 100, 2)
	for _, u := range users {
		kept := reserve(t, b.r, id, u, 1, time.Minute)
		dropped := reserve(t, b.r, id, u, 1, time.Minute)
		_, err := b.r.Reserve(ctx, id, events.NewOrderID(id), u, 1, time.Minute)
		wantCode(t, err, events.LimitExceeded, "user "+strconv.Quote(u)+" over the limit")
		for _, o := range []string{kept.OrderID, dropped.OrderID} {
			got, err := b.r.Reservation(ctx, o)
			if err != nil || got.User != u || got.Quantity != 1 || got.State != "pending" {
				t.Errorf("Reservation of %q's order = %+v, %v", u, got, err)
			}
		}
		if n, err := b.rdb.HGet(ctx, lua.KeysOf(id).Buyers, u).Int(); err != nil || n != 2 {
			t.Errorf("buyers[%q] = %d, %v; want 2", u, n, err)
		}
		out, err := b.r.Release(ctx, dropped.OrderID)
		wantOutcome(t, out, err, lua.Outcome{Changed: true, State: "released"}, "Release")
		out, err = b.r.Confirm(ctx, kept.OrderID)
		wantOutcome(t, out, err, lua.Outcome{Changed: true, State: "confirmed"}, "Confirm")
		if got, err := b.r.Reservation(ctx, kept.OrderID); err != nil || got.User != u || got.State != "confirmed" {
			t.Errorf("Reservation of %q's confirmed order = %+v, %v", u, got, err)
		}
		checkInvariants(t, b.rdb, id, 100, 2)
		out, err = b.r.Refund(ctx, kept.OrderID)
		wantOutcome(t, out, err, lua.Outcome{Changed: true, State: "refunded"}, "Refund")
		if got, err := b.r.Reservation(ctx, kept.OrderID); err != nil || got.User != u || got.State != "refunded" {
			t.Errorf("Reservation of %q's refunded order = %+v, %v", u, got, err)
		}
	}
	// Every unit went back to the right buyer: nobody holds anything, nothing is missing.
	if s := readState(t, b.rdb, id); len(s.Buyers) != 0 {
		t.Errorf("buyers hash %q after every order was released or refunded, want empty", s.Buyers)
	}
	wantRemaining(t, b.r, id, 100)
	checkInvariants(t, b.rdb, id, 100, 2)
}

func testReleaseOnce(t *testing.T, b *backend) {
	ctx := t.Context()
	id := b.open(t, 10, 3)
	two := reserve(t, b.r, id, "alice", 2, time.Minute)
	one := reserve(t, b.r, id, "alice", 1, time.Minute)
	reserve(t, b.r, id, "bob", 3, time.Minute)

	out, err := b.r.Release(ctx, two.OrderID)
	wantOutcome(t, out, err, lua.Outcome{Changed: true, State: "released"}, "Release")
	wantRemaining(t, b.r, id, 10-1-3)
	if n, err := b.rdb.HGet(ctx, lua.KeysOf(id).Buyers, "alice").Int(); err != nil || n != 1 {
		t.Errorf("buyers[alice] = %d, %v; want 1", n, err)
	}
	got, err := b.r.Reservation(ctx, two.OrderID)
	want := two
	want.State = "released"
	if err != nil || !sameReservation(got, want) {
		t.Errorf("Reservation after release = %+v, %v; want %+v", got, err, want)
	}

	before := readState(t, b.rdb, id)
	out, err = b.r.Release(ctx, two.OrderID)
	wantOutcome(t, out, err, lua.Outcome{State: "released"}, "second Release")
	out, err = b.r.Confirm(ctx, two.OrderID)
	wantOutcome(t, out, err, lua.Outcome{State: "released"}, "Confirm after release")
	out, err = b.r.Refund(ctx, two.OrderID)
	wantOutcome(t, out, err, lua.Outcome{State: "released"}, "Refund after release")
	assertUnchanged(t, b.rdb, id, before, "second Release, Confirm and Refund of a released order")

	out, err = b.r.Release(ctx, one.OrderID)
	wantOutcome(t, out, err, lua.Outcome{Changed: true, State: "released"}, "Release of the last unit")
	if ok, err := b.rdb.HExists(ctx, lua.KeysOf(id).Buyers, "alice").Result(); err != nil || ok {
		t.Errorf("buyers[alice] exists (%v) after all of alice's units went back", err)
	}
	wantRemaining(t, b.r, id, 7)

	before = readState(t, b.rdb, id)
	out, err = b.r.Release(ctx, events.NewOrderID(id))
	wantOutcome(t, out, err, lua.Outcome{}, "Release of an unknown order")
	assertUnchanged(t, b.rdb, id, before, "Release of an unknown order")
	_, err = b.r.Release(ctx, "no-campaign-here")
	wantCode(t, err, events.Invalid, "Release of a malformed order id")
	checkInvariants(t, b.rdb, id, 10, 3)
}

func testReleaseOfConfirmed(t *testing.T, b *backend) {
	ctx := t.Context()
	id := b.open(t, 10, 3)
	res := reserve(t, b.r, id, "alice", 2, time.Minute)
	out, err := b.r.Confirm(ctx, res.OrderID)
	wantOutcome(t, out, err, lua.Outcome{Changed: true, State: "confirmed"}, "Confirm")
	before := readState(t, b.rdb, id)
	out, err = b.r.Release(ctx, res.OrderID)
	wantOutcome(t, out, err, lua.Outcome{State: "confirmed"}, "Release of a confirmed order")
	assertUnchanged(t, b.rdb, id, before, "Release of a confirmed order")
	wantRemaining(t, b.r, id, 8)
	checkInvariants(t, b.rdb, id, 10, 3)
}

func testConfirm(t *testing.T, b *backend) {
	ctx := t.Context()
	id := b.open(t, 10, 3)
	const ttl = 100 * time.Millisecond
	confirmed := reserve(t, b.r, id, "alice", 2, ttl)
	stale := reserve(t, b.r, id, "bob", 1, ttl)

	out, err := b.r.Confirm(ctx, confirmed.OrderID)
	wantOutcome(t, out, err, lua.Outcome{Changed: true, State: "confirmed"}, "Confirm")
	got, err := b.r.Reservation(ctx, confirmed.OrderID)
	want := confirmed
	want.State = "confirmed"
	if err != nil || !sameReservation(got, want) {
		t.Errorf("Reservation after confirm = %+v, %v; want %+v", got, err, want)
	}
	wantRemaining(t, b.r, id, 7) // confirmed units stay taken
	before := readState(t, b.rdb, id)
	out, err = b.r.Confirm(ctx, confirmed.OrderID)
	wantOutcome(t, out, err, lua.Outcome{State: "confirmed"}, "second Confirm")
	out, err = b.r.Confirm(ctx, events.NewOrderID(id))
	wantOutcome(t, out, err, lua.Outcome{}, "Confirm of an unknown order")
	_, err = b.r.Confirm(ctx, "no-campaign-here")
	wantCode(t, err, events.Invalid, "Confirm of a malformed order id")
	assertUnchanged(t, b.rdb, id, before, "second Confirm")

	b.until(confirmed.Deadline.Add(50 * time.Millisecond))
	ids, err := b.r.Expired(ctx, id, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []string{stale.OrderID}) {
		t.Errorf("Expired = %v, want only the unconfirmed %s", ids, stale.OrderID)
	}
	checkInvariants(t, b.rdb, id, 10, 3)
}

func testRefundOnce(t *testing.T, b *backend) {
	ctx := t.Context()
	id := b.open(t, 10, 3)
	res := reserve(t, b.r, id, "alice", 2, time.Minute)
	reserve(t, b.r, id, "alice", 1, time.Minute)

	before := readState(t, b.rdb, id)
	out, err := b.r.Refund(ctx, res.OrderID)
	wantOutcome(t, out, err, lua.Outcome{State: "pending"}, "Refund of a pending order")
	assertUnchanged(t, b.rdb, id, before, "Refund of a pending order")

	out, err = b.r.Confirm(ctx, res.OrderID)
	wantOutcome(t, out, err, lua.Outcome{Changed: true, State: "confirmed"}, "Confirm")
	out, err = b.r.Refund(ctx, res.OrderID)
	wantOutcome(t, out, err, lua.Outcome{Changed: true, State: "refunded"}, "Refund")
	wantRemaining(t, b.r, id, 9)
	if n, err := b.rdb.HGet(ctx, lua.KeysOf(id).Buyers, "alice").Int(); err != nil || n != 1 {
		t.Errorf("buyers[alice] = %d, %v; want 1", n, err)
	}

	before = readState(t, b.rdb, id)
	out, err = b.r.Refund(ctx, res.OrderID)
	wantOutcome(t, out, err, lua.Outcome{State: "refunded"}, "second Refund")
	out, err = b.r.Release(ctx, res.OrderID)
	wantOutcome(t, out, err, lua.Outcome{State: "refunded"}, "Release after refund")
	out, err = b.r.Confirm(ctx, res.OrderID)
	wantOutcome(t, out, err, lua.Outcome{State: "refunded"}, "Confirm after refund")
	assertUnchanged(t, b.rdb, id, before, "second Refund")
	checkInvariants(t, b.rdb, id, 10, 3)
}

func testExpired(t *testing.T, b *backend) {
	ctx := t.Context()
	id := b.open(t, 10, 3)
	const short = 200 * time.Millisecond
	o1 := reserve(t, b.r, id, "alice", 1, short)
	reserve(t, b.r, id, "bob", 1, time.Hour)
	o3 := reserve(t, b.r, id, "carol", 1, short)
	o4 := reserve(t, b.r, id, "dave", 1, short)
	o5 := reserve(t, b.r, id, "erin", 1, short)
	if _, err := b.r.Release(ctx, o4.OrderID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.r.Confirm(ctx, o5.OrderID); err != nil {
		t.Fatal(err)
	}

	if ids, err := b.r.Expired(ctx, id, 0, 100); err != nil || len(ids) != 0 {
		t.Errorf("Expired before any deadline = %v, %v; want none", ids, err)
	}
	b.until(o3.Deadline.Add(50 * time.Millisecond))
	ids, err := b.r.Expired(ctx, id, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{o1.OrderID, o3.OrderID}
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("Expired = %v, want %v", ids, want)
	}
	first, err := b.r.Expired(ctx, id, 0, 1)
	if err != nil || len(first) != 1 || !slices.Contains(want, first[0]) {
		t.Fatalf("Expired(limit 1) = %v, %v; want one of %v", first, err, want)
	}
	if next, err := b.r.Expired(ctx, id, 1, 100); err != nil || len(next) != 1 || next[0] == first[0] || !slices.Contains(want, next[0]) {
		t.Errorf("Expired(skip 1) = %v, %v; want the one of %v that is not %s", next, err, want, first[0])
	}
	if _, err := b.r.Release(ctx, o1.OrderID); err != nil {
		t.Fatal(err)
	}
	if ids, err := b.r.Expired(ctx, id, 0, 100); err != nil || !slices.Equal(ids, []string{o3.OrderID}) {
		t.Errorf("Expired after releasing %s = %v, %v; want [%s]", o1.OrderID, ids, err, o3.OrderID)
	}
	if ids, err := b.r.Expired(ctx, newCampaignID(), 0, 100); err != nil || len(ids) != 0 {
		t.Errorf("Expired(unknown campaign) = %v, %v; want none", ids, err)
	}
	checkInvariants(t, b.rdb, id, 10, 3)
}

// testMalformedRecord: a record the scripts cannot parse is an error, never a panic or a guess,
// and Go reads it as the scripts do: Reservation took "pending|-1|5|u" for a reservation, and a
// dead letter's release of it then failed on the script's error for ever.
func testMalformedRecord(t *testing.T, b *backend) {
	ctx := t.Context()
	id := b.open(t, 10, 3)
	for _, rec := range []string{"garbage", "pending|-1|5|u", "pend1ng|1|5|u", "|1|5|u", "pending|1|+5|u", "pending|1||u"} {
		order := events.NewOrderID(id)
		if err := b.rdb.HSet(ctx, lua.KeysOf(id).Res, order, rec).Err(); err != nil {
			t.Fatal(err)
		}
		before := readState(t, b.rdb, id)
		if out, err := b.r.Release(ctx, order); !errors.Is(err, lua.ErrMalformed) {
			t.Errorf("Release of %q = %+v, %v; want ErrMalformed", rec, out, err)
		}
		if out, err := b.r.Refund(ctx, order); !errors.Is(err, lua.ErrMalformed) {
			t.Errorf("Refund of %q = %+v, %v; want ErrMalformed", rec, out, err)
		}
		if res, err := b.r.Reserve(ctx, id, order, "alice", 1, time.Minute); err == nil {
			t.Errorf("Reserve over %q = %+v, want an error", rec, res)
		}
		if res, err := b.r.Reservation(ctx, order); !errors.Is(err, lua.ErrMalformed) {
			t.Errorf("Reservation of %q = %+v, %v; want ErrMalformed", rec, res, err)
		}
		// confirm.lua read the state alone, and confirmed "pending|-1|5|u": the consumer was
		// told it was done, and the refund or expiry through it then failed for ever.
		if out, err := b.r.Confirm(ctx, order); !errors.Is(err, lua.ErrMalformed) {
			t.Errorf("Confirm of %q = %+v, %v; want ErrMalformed", rec, out, err)
		}
		if left, err := b.r.ConfirmAll(ctx, []string{order}); !errors.Is(err, lua.ErrMalformed) {
			t.Errorf("ConfirmAll of %q = %v, %v; want ErrMalformed", rec, left, err)
		}
		assertUnchanged(t, b.rdb, id, before, "calls on the malformed record "+rec)
	}
}

// testMalformedCount: a release whose buyer's count or stock Redis cannot add to fails before
// it writes anything. A script is not rolled back: release.lua gave the units back to the
// stock, then failed on the buyer's count, and the sweeper's retry of the still pending
// reservation gave them back again at every sweep.
func testMalformedCount(t *testing.T, b *backend) {
	ctx := t.Context()
	for _, bad := range []struct{ key, field, value string }{
		{"buyers", "ann", "x"},
		{"buyers", "ann", "1.5"},
		{"stock", "", "x"},
	} {
		id := b.open(t, 10, 3)
		k := lua.KeysOf(id)
		pending := reserve(t, b.r, id, "ann", 2, time.Minute)
		confirmed := reserve(t, b.r, id, "ann", 1, time.Minute)
		if _, err := b.r.Confirm(ctx, confirmed.OrderID); err != nil {
			t.Fatal(err)
		}
		if bad.key == "buyers" {
			b.rdb.HSet(ctx, k.Buyers, bad.field, bad.value)
		} else {
			b.rdb.Set(ctx, k.Stock, bad.value, 0)
		}
		before := readState(t, b.rdb, id)
		for range 2 { // the sweeper retries
			if out, err := b.r.Release(ctx, pending.OrderID); !errors.Is(err, lua.ErrMalformed) {
				t.Errorf("Release with %s %q = %+v, %v; want ErrMalformed", bad.key, bad.value, out, err)
			}
			if out, err := b.r.Refund(ctx, confirmed.OrderID); !errors.Is(err, lua.ErrMalformed) {
				t.Errorf("Refund with %s %q = %+v, %v; want ErrMalformed", bad.key, bad.value, out, err)
			}
		}
		assertUnchanged(t, b.rdb, id, before, "releases with "+bad.key+" "+bad.value)
	}
}

// TestReserveRace has thousands of buyers race for a small stock on a real Redis, then releases
// half of the reservations twice each, concurrently, and races Release against Confirm on the
// rest, as the sweeper and the consumer do.
func TestReserveRace(t *testing.T) {
	const (
		stock      = 1000
		limit      = 3
		purchases  = 4000
		buyers     = 64
		users      = 1500
		reserveTTL = time.Minute
	)
	rdb := luatest.MustRedis(t)
	r := lua.New(rdb)
	t.Cleanup(func() { r.Close() })
	ctx := t.Context()
	id := load(t, r, lua.Campaign{Remaining: stock, Limit: limit, StartsAt: time.Now().Add(-time.Hour)})

	type sale struct {
		order, user string
		qty         int64
	}
	var (
		mu      sync.Mutex
		sold    []sale
		refused = map[events.Code]int{}
		next    atomic.Int64
		wg      sync.WaitGroup
	)
	for range buyers {
		wg.Go(func() {
			for next.Add(1) <= purchases {
				user := "u" + strconv.Itoa(rand.IntN(users)) + "|ü:" // exercise the separator too
				qty := 1 + rand.IntN(limit)
				order := events.NewOrderID(id)
				_, err := r.Reserve(ctx, id, order, user, qty, reserveTTL)
				mu.Lock()
				if err == nil {
					sold = append(sold, sale{order, user, int64(qty)})
				} else {
					refused[events.ErrorCode(err)]++
					if c := events.ErrorCode(err); c != events.SoldOut && c != events.LimitExceeded {
						t.Errorf("Reserve: %v", err)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	remaining, ok, err := r.Remaining(ctx, id)
	if err != nil || !ok {
		t.Fatalf("Remaining = %d, %v, %v", remaining, ok, err)
	}
	var total int64
	perUser := map[string]int64{}
	for _, s := range sold {
		total += s.qty
		perUser[s.user] += s.qty
	}
	t.Logf("%d purchases: %d reservations of %d units, %d left, refusals %v", purchases, len(sold), total, remaining, refused)
	if remaining < 0 || total != stock-remaining {
		t.Errorf("oversell: sold %d units, remaining %d, stock %d", total, remaining, stock)
	}
	if remaining >= limit {
		t.Errorf("remaining %d: with %d requests for 1..%d units the sale should have sold out", remaining, purchases, limit)
	}
	if refused[events.SoldOut] == 0 {
		t.Error("no purchase was refused as sold out")
	}
	recs := checkInvariants(t, rdb, id, stock, limit)
	if len(recs) != len(sold) {
		t.Errorf("res hash holds %d reservations, %d purchases succeeded", len(recs), len(sold))
	}
	for _, s := range sold {
		if rec := recs[s.order]; rec != (record{State: "pending", Qty: s.qty, Deadline: rec.Deadline, User: s.user}) {
			t.Errorf("order %s: record %+v, sold %+v", s.order, rec, s)
		}
	}
	held := map[string]int64{}
	for _, rec := range recs {
		held[rec.User] += rec.Qty
	}
	if !maps.Equal(held, perUser) {
		t.Errorf("reservations per user %v differ from the successful purchases %v", held, perUser)
	}

	// Release a random half, each twice at once: each reservation must come back exactly once.
	rand.Shuffle(len(sold), func(i, j int) { sold[i], sold[j] = sold[j], sold[i] })
	released, rest := sold[:len(sold)/2], sold[len(sold)/2:]
	var changes sync.Map
	start := make(chan struct{})
	for _, s := range released {
		for range 2 {
			wg.Go(func() {
				<-start
				out, err := r.Release(ctx, s.order)
				if err != nil {
					t.Errorf("Release(%s): %v", s.order, err)
					return
				}
				if out.State != "released" {
					t.Errorf("Release(%s) = %+v", s.order, out)
				}
				if out.Changed {
					n, _ := changes.LoadOrStore(s.order, new(atomic.Int32))
					n.(*atomic.Int32).Add(1)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	var pendingQty int64
	for _, s := range rest {
		pendingQty += s.qty
	}
	for _, s := range released {
		n, ok := changes.Load(s.order)
		if !ok || n.(*atomic.Int32).Load() != 1 {
			t.Errorf("order %s released %v times, want once", s.order, n)
		}
	}
	wantRemaining(t, r, id, stock-pendingQty)
	checkInvariants(t, rdb, id, stock, limit)

	// Race the sweeper's Release against the consumer's Confirm on the rest: one wins each.
	var confirmedQty atomic.Int64
	start = make(chan struct{})
	for _, s := range rest {
		var rel, conf lua.Outcome
		var inner sync.WaitGroup
		inner.Add(2)
		wg.Go(func() {
			defer inner.Done()
			<-start
			var err error
			if rel, err = r.Release(ctx, s.order); err != nil {
				t.Errorf("Release(%s): %v", s.order, err)
			}
		})
		wg.Go(func() {
			defer inner.Done()
			<-start
			var err error
			if conf, err = r.Confirm(ctx, s.order); err != nil {
				t.Errorf("Confirm(%s): %v", s.order, err)
			}
		})
		wg.Go(func() {
			inner.Wait()
			switch {
			case rel.Changed == conf.Changed:
				t.Errorf("order %s: Release %+v and Confirm %+v, want exactly one to win", s.order, rel, conf)
			case conf.Changed:
				confirmedQty.Add(s.qty)
				if rel.State != "confirmed" {
					t.Errorf("order %s: losing Release saw %+v", s.order, rel)
				}
			case conf.State != "released":
				t.Errorf("order %s: losing Confirm saw %+v", s.order, conf)
			}
		})
	}
	close(start)
	wg.Wait()
	wantRemaining(t, r, id, stock-confirmedQty.Load())
	recs = checkInvariants(t, rdb, id, stock, limit)
	for o, rec := range recs {
		if rec.State == "pending" {
			t.Errorf("order %s still pending after the race", o)
		}
	}
	if ids, err := r.Expired(ctx, id, 0, 10); err != nil || len(ids) != 0 {
		t.Errorf("Expired = %v, %v; want none", ids, err)
	}
}

// TestLoadCampaignRace loads one campaign from many api hosts at once while buyers already buy
// from the first copy loaded: a late loader must not reset what they took.
func TestLoadCampaignRace(t *testing.T) {
	const (
		loaders = 16
		buyers  = 16
		rounds  = 20
	)
	rdb := luatest.MustRedis(t)
	r := lua.New(rdb)
	t.Cleanup(func() { r.Close() })
	ctx := t.Context()
	for range rounds {
		id := newCampaignID()
		deleteCampaign(t, rdb, id)
		c := lua.Campaign{ID: id, Remaining: 1000, Limit: 3, StartsAt: time.Now().Add(-time.Hour)}
		var (
			wg     sync.WaitGroup
			loaded atomic.Int32
			done   atomic.Bool
			start  = make(chan struct{})
		)
		for range loaders {
			wg.Go(func() {
				<-start
				ok, err := r.LoadCampaign(ctx, c)
				if err != nil {
					t.Error(err)
				}
				if ok {
					loaded.Add(1)
				}
			})
		}
		var buying sync.WaitGroup
		for i := range buyers {
			buying.Go(func() {
				<-start
				user := "buyer-" + strconv.Itoa(i)
				for n := 0; n < 3 && !done.Load(); {
					_, err := r.Reserve(ctx, id, events.NewOrderID(id), user, 1, time.Minute)
					switch events.ErrorCode(err) {
					case "":
						n++
					case events.CampaignNotFound:
					default:
						t.Errorf("Reserve: %v", err)
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		done.Store(true)
		buying.Wait()
		if n := loaded.Load(); n != 1 {
			t.Errorf("%d of %d concurrent loads loaded, want 1", n, loaders)
		}
		checkRebuilt(t, rdb, id, 1000, 3, nil)
		if t.Failed() {
			return
		}
	}
}

// model is what the fuzz test expects Redis to hold.
type model struct {
	remaining, limit int64
	held             map[string]int64
	orders           []string
	res              map[string]*record
}

// give puts a live reservation's units back: released, refunded or expired.
func (m *model) give(rec *record) {
	m.remaining += rec.Qty
	m.held[rec.User] -= rec.Qty
	if m.held[rec.User] == 0 {
		delete(m.held, rec.User)
	}
}

// transition moves order from one state to another in the model, as the script would, and
// returns the outcome the script should answer: the state the record holds, changed only when
// it was in from.
func (m *model) transition(order, from, to string) lua.Outcome {
	rec, ok := m.res[order]
	switch {
	case !ok:
		return lua.Outcome{}
	case rec.State != from:
		return lua.Outcome{State: rec.State}
	}
	rec.State = to
	if to != "confirmed" {
		m.give(rec)
	}
	return lua.Outcome{Changed: true, State: to}
}

// expect returns the code Reserve should answer, in the script's order of checks.
func (m *model) expect(user string, qty int64) events.Code {
	switch {
	case qty < 1 || qty > m.limit:
		return events.Invalid
	case m.remaining < qty:
		return events.SoldOut
	case m.held[user]+qty > m.limit:
		return events.LimitExceeded
	}
	return ""
}

// FuzzReserveRelease decodes its input into a sequence of reserve, duplicate reserve, release,
// confirm and refund calls over a few users on a real Redis, checks each answer against a model
// and the invariants after every step.
func FuzzReserveRelease(f *testing.F) {
	for _, seed := range [][]byte{
		{5, 1, 0, 3, 0, 4, 0, 5, 3, 0, 3, 0, 4, 1, 5, 1},
		{3, 2, 0, 9, 0, 10, 0, 4, 2, 0, 3, 1, 4, 2, 5, 0, 5, 2, 3, 0, 0, 9},
		{0, 0, 0, 3, 1, 4, 3, 9, 4, 9, 5, 9},
		{11, 3, 0, 12, 1, 13, 0, 14, 4, 0, 5, 0, 5, 0, 3, 1, 4, 1, 3, 2, 2, 0, 2, 1, 0, 12, 0, 13, 0, 14},
		{7, 0, 0, 0, 0, 15, 0, 1, 1, 2, 3, 0, 3, 0, 0, 1, 0, 1, 0, 1},
		{200, 255, 254, 253, 252, 251, 250, 249, 248, 247, 246, 245, 244, 243, 242, 241, 240, 239, 238},
		{9, 3, 0, 3, 0, 6, 0, 9, 0, 12, 4, 0, 4, 1, 4, 2, 5, 0, 5, 1, 5, 2, 0, 12, 0, 3, 3, 3, 4, 3, 5, 3},
	} {
		f.Add(seed)
	}
	rdb := luatest.MustRedis(f)
	r := lua.New(rdb)
	f.Cleanup(func() { r.Close() })
	users := []string{"ann", "b|o:b", "ĉé|"}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		ctx := context.Background()
		stock, limit := int64(data[0]%12), int64(data[1]%4)+1
		ops := data[2:]
		ops = ops[:min(len(ops), 2*40)]
		id := load(t, r, lua.Campaign{Remaining: stock, Limit: limit, StartsAt: time.Now().Add(-time.Hour)})
		m := &model{remaining: stock, limit: limit, held: map[string]int64{}, res: map[string]*record{}}
		// pick returns an existing order, or one Redis never saw when the byte says so.
		pick := func(b byte) string {
			if i := int(b) % (len(m.orders) + 1); i < len(m.orders) {
				return m.orders[i]
			}
			return events.NewOrderID(id)
		}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%6, ops[i+1]
			switch op {
			case 0, 1: // a new order; quantities 0..limit+1 include invalid ones
				user, qty := users[int(arg)%len(users)], int64(arg)/3%(limit+2)
				order := events.NewOrderID(id)
				res, err := r.Reserve(ctx, id, order, user, int(qty), time.Minute)
				want := m.expect(user, qty)
				if got := events.ErrorCode(err); got != want {
					t.Fatalf("step %d: Reserve(%q, %d) error %v, want code %q (model %+v)", i/2, user, qty, err, want, m)
				}
				if want == "" {
					m.remaining -= qty
					m.held[user] += qty
					m.orders = append(m.orders, order)
					m.res[order] = &record{State: "pending", Qty: qty, User: user, Deadline: res.Deadline.UnixMilli()}
				}
			case 2: // a retry of an order: nothing changes, the first reservation comes back
				order := pick(arg)
				rec, ok := m.res[order]
				if !ok {
					continue
				}
				res, err := r.Reserve(ctx, id, order, users[int(arg)%len(users)], 1, time.Hour)
				if err != nil || res.User != rec.User || int64(res.Quantity) != rec.Qty || res.State != rec.State || res.Deadline.UnixMilli() != rec.Deadline {
					t.Fatalf("step %d: duplicate Reserve(%s) = %+v, %v; want %+v", i/2, order, res, err, rec)
				}
			case 3, 4, 5:
				order := pick(arg)
				from, to, call := map[byte]string{3: "pending", 4: "pending", 5: "confirmed"}[op],
					map[byte]string{3: "released", 4: "confirmed", 5: "refunded"}[op],
					map[byte]func(context.Context, string) (lua.Outcome, error){3: r.Release, 4: r.Confirm, 5: r.Refund}[op]
				out, err := call(ctx, order)
				wantOutcome(t, out, err, m.transition(order, from, to), "step "+strconv.Itoa(i/2)+": "+to+" "+order)
			}
			recs := checkInvariants(t, rdb, id, stock, limit)
			wantRemaining(t, r, id, m.remaining)
			if len(recs) != len(m.res) {
				t.Errorf("step %d: Redis holds %d reservations, the model %d", i/2, len(recs), len(m.res))
			}
			for o, rec := range m.res {
				if recs[o] != *rec {
					t.Errorf("step %d: order %s is %+v in Redis, %+v in the model", i/2, o, recs[o], *rec)
				}
			}
			if t.Failed() {
				t.FailNow()
			}
		}
	})
}

// BenchmarkReserve measures the reserve script on a real Redis under concurrent buyers, and
// checks afterwards that every reservation took exactly its unit.
func BenchmarkReserve(b *testing.B) {
	rdb := luatest.MustRedis(b)
	r := lua.New(rdb)
	b.Cleanup(func() { r.Close() })
	if err := r.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	const stock = 1 << 40
	id := load(b, r, lua.Campaign{Remaining: stock, Limit: stock, StartsAt: time.Now().Add(-time.Hour)})
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		user := "bench-" + events.NewID()
		for pb.Next() {
			if _, err := r.Reserve(context.Background(), id, events.NewOrderID(id), user, 1, time.Minute); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	wantRemaining(b, r, id, stock-int64(b.N))
}

// TestCoalescerMixesCampaigns has buyers of three campaigns, with two reservation ttls, reserve
// at once on a real Redis, so that the coalescer's pipelines mix them: each campaign must end
// with its invariants whole, and each reservation must hold its own ttl.
func TestCoalescerMixesCampaigns(t *testing.T) {
	const (
		stock     = 300
		limit     = 2
		purchases = 1500
	)
	rdb := luatest.MustRedis(t)
	var calls, roundTrips atomic.Int64
	rdb.AddHook(countEvals{&calls, &roundTrips})
	r := lua.New(rdb)
	t.Cleanup(func() { r.Close() })
	ctx := t.Context()
	var ids []string
	for range 3 {
		ids = append(ids, load(t, r, lua.Campaign{Remaining: stock, Limit: limit, StartsAt: time.Now().Add(-time.Hour)}))
	}
	ttls := []time.Duration{time.Minute, 2 * time.Minute}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range 64 {
		wg.Go(func() {
			for i := next.Add(1); i <= purchases; i = next.Add(1) {
				id, ttl := ids[i%3], ttls[i%2]
				before := time.Now()
				res, err := r.Reserve(ctx, id, events.NewOrderID(id), "u"+strconv.Itoa(rand.IntN(400)), 1, ttl)
				switch code := events.ErrorCode(err); {
				case err == nil:
					if d := res.Deadline; d.Before(before.Add(ttl).Add(-time.Second)) || d.After(time.Now().Add(ttl).Add(time.Second)) {
						t.Errorf("a reservation with ttl %v has deadline %v, %v after its purchase began", ttl, d, d.Sub(before))
					}
				case code != events.SoldOut && code != events.LimitExceeded:
					t.Errorf("Reserve: %v", err)
				}
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		recs := checkInvariants(t, rdb, id, stock, limit)
		if len(recs) == 0 {
			t.Errorf("campaign %s sold nothing", id)
		}
	}
	t.Logf("%d purchases in %d script calls, %d round trips", purchases, calls.Load(), roundTrips.Load())
}

// testTrim: rounds of aborted purchases (the 5 rounds of 100) leave the reservation hash
// holding only what still sells, once the retention has passed; a trimmed order's record is gone
// but released twice still restores once, and confirmed records stay.
func testTrim(t *testing.T, b *backend) {
	ctx := context.Background()
	id := load(t, b.r, lua.Campaign{Remaining: 1000, Limit: 1000, StartsAt: b.now().Add(-time.Hour)})
	k := lua.KeysOf(id)
	kept, err := b.r.Reserve(ctx, id, events.NewOrderID(id), "keeper", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.r.Confirm(ctx, kept.OrderID); err != nil {
		t.Fatal(err)
	}
	const retention = 50 * time.Millisecond
	var last []string
	for round := range 5 {
		last = last[:0]
		for i := range 100 {
			res, err := b.r.Reserve(ctx, id, events.NewOrderID(id), fmt.Sprintf("u%d-%d", round, i), 1, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if out, err := b.r.Release(ctx, res.OrderID); err != nil || !out.Changed {
				t.Fatalf("release: %+v %v", out, err)
			}
			last = append(last, res.OrderID)
		}
		b.advance(2 * retention)
		if _, err := b.r.Trim(ctx, id, retention, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.rdb.HLen(ctx, k.Res).Val(); n != 1 {
		t.Errorf("after 5 rounds of 100 aborted purchases the reservation hash holds %d records, want 1 (the confirmed one)", n)
	}
	if n := b.rdb.ZCard(ctx, k.Done).Val(); n != 0 {
		t.Errorf("the done set holds %d after the trim", n)
	}
	// Released again after its record left: nothing to restore twice.
	if out, err := b.r.Release(ctx, last[0]); err != nil || out.Changed {
		t.Errorf("a second release after the trim: %+v %v", out, err)
	}
	if left, _, _ := b.r.Remaining(ctx, id); left != 999 {
		t.Errorf("remaining %d, want 999", left)
	}
	// Inside the retention nothing leaves.
	// Checked: a reservation that failed, or a release that did nothing, leaves nothing for the
	// trim to drop, and the check below passes whatever the retention does.
	res, err := b.r.Reserve(ctx, id, events.NewOrderID(id), "late", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := b.r.Release(ctx, res.OrderID); err != nil || !out.Changed {
		t.Fatalf("release inside the retention: %+v %v", out, err)
	}
	if n, err := b.r.Trim(ctx, id, time.Hour, 1000); err != nil || n != 0 {
		t.Errorf("trim inside the retention dropped %d (%v)", n, err)
	}
}

// testRestoreEnded: a rebuild restores the records of orders that gave their units back as
// release.lua leaves them (a retry of one finds it ended, and takes nothing), each in the done
// set by when it ended, so the trim drops it once the retention has passed, as it would have
// without the loss. They hold nothing: remaining and the buyers are the store's figures.
func testRestoreEnded(t *testing.T, b *backend) {
	ctx := context.Background()
	c := lua.Campaign{Remaining: 10, Stock: 10, Limit: 5, StartsAt: b.now().Add(-time.Hour)}
	c.ID = load(t, b.r, c)
	k := lua.KeysOf(c.ID)
	now := b.now()
	order := func(user string, qty int, state string, ago time.Duration) lua.Reservation {
		res := lua.Reservation{OrderID: events.NewOrderID(c.ID), User: user, Quantity: qty, State: state}
		if state != "confirmed" {
			res.Ended = now.Add(-ago)
		}
		return res
	}
	kept := order("alice", 2, "confirmed", 0)
	released := order("bob", 1, "released", 2*time.Hour)
	refunded := order("carol", 1, "refunded", 10*time.Minute)
	expired := order("dave", 2, "expired", time.Minute)
	records := []lua.Reservation{kept, released, refunded, expired}

	mark := freeze(t, b.r, c.ID)
	if err := b.r.Restore(ctx, mark, c, []lua.Reservation{{OrderID: events.NewOrderID(c.ID), User: "erin", Quantity: 1, State: "pending"}}); err == nil {
		t.Error("Restore of a pending record: no error")
	}
	rebuilt := c
	rebuilt.Remaining, rebuilt.Holdings = 8, map[string]int64{"alice": 2}
	restore(t, b.r, mark, rebuilt, records)
	recs := checkRebuilt(t, b.rdb, c.ID, 10, 5, nil)
	for _, res := range records {
		if want := (record{State: res.State, Qty: int64(res.Quantity), User: res.User}); recs[res.OrderID] != want {
			t.Errorf("restored record of %s = %+v, want %+v", res.OrderID, recs[res.OrderID], want)
		}
		score, err := b.rdb.ZScore(ctx, k.Done, res.OrderID).Result()
		switch {
		case res.State == "confirmed" && !errors.Is(err, redis.Nil):
			t.Errorf("the confirmed order is in the done set (%v, %v)", score, err)
		case res.State != "confirmed" && (err != nil || int64(score) != res.Ended.UnixMilli()):
			t.Errorf("%s order's done score %v (%v), want when it ended, %d", res.State, score, err, res.Ended.UnixMilli())
		}
	}
	again, err := b.r.Reserve(ctx, c.ID, released.OrderID, "bob", 1, time.Minute)
	if err != nil || again.State != "released" {
		t.Errorf("a retry of the released order: %+v %v, want its released record", again, err)
	}
	wantRemaining(t, b.r, c.ID, 8)

	// Each trim drops the records that ended longer ago than its retention; the confirmed stays.
	for _, step := range []struct {
		retention time.Duration
		gone      lua.Reservation
	}{{time.Hour, released}, {5 * time.Minute, refunded}, {30 * time.Second, expired}} {
		if n, err := b.r.Trim(ctx, c.ID, step.retention, 1000); err != nil || n != 1 {
			t.Errorf("trim with a retention of %v dropped %d (%v), want the %s record", step.retention, n, err, step.gone.State)
		}
		if b.rdb.HExists(ctx, k.Res, step.gone.OrderID).Val() {
			t.Errorf("the %s record outlived a trim with a retention of %v", step.gone.State, step.retention)
		}
	}
	if s := readState(t, b.rdb, c.ID); len(s.Res) != 1 || s.Res[kept.OrderID] == "" {
		t.Errorf("after the trims the records are %v, want the confirmed one only", s.Res)
	}
}

// testDrop: an ended campaign's keys leave Redis, but not while a reservation is pending, nor
// once an operator's later change (an extend that reopened the sale) has reached them: the
// sweeper decides to drop on the campaign as it read it at the sweep's start.
func testDrop(t *testing.T, b *backend) {
	ctx := context.Background()
	id := load(t, b.r, lua.Campaign{Remaining: 10, Limit: 10, StartsAt: b.now().Add(-time.Hour), Version: 3})
	res, err := b.r.Reserve(ctx, id, events.NewOrderID(id), "ann", 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if dropped, err := b.r.Drop(ctx, id, 3); err != nil || dropped {
		t.Fatalf("dropped with a reservation pending (%v)", err)
	}
	b.r.Release(ctx, res.OrderID)
	if dropped, err := b.r.Drop(ctx, id, 2); err != nil || dropped {
		t.Fatalf("dropped at version 2 a campaign Redis holds at version 3 (%v)", err)
	}
	if dropped, err := b.r.Drop(ctx, id, 3); err != nil || !dropped {
		t.Fatalf("not dropped once nothing was pending (%v)", err)
	}
	if n := b.rdb.Exists(ctx, lua.KeysOf(id).All()...).Val(); n != 0 {
		t.Errorf("%d of the campaign's keys are still there", n)
	}
}

func testSync(t *testing.T, b *backend) {
	ctx := t.Context()
	c := lua.Campaign{Remaining: 10, Stock: 10, Limit: 5, StartsAt: b.now().Add(-time.Hour)}
	c.ID = load(t, b.r, c)
	held := reserve(t, b.r, c.ID, "alice", 3, time.Minute)
	sync := func(c lua.Campaign, want lua.Synced) {
		t.Helper()
		got, err := b.r.Sync(ctx, c)
		if err != nil || got != want {
			t.Fatalf("Sync(version %d, stock %d) = %v, %v; want %v", c.Version, c.Stock, got, err, want)
		}
	}

	// Five units added: on sale at once, what alice holds stays hers.
	added := c
	added.Stock, added.Version = 15, 1
	sync(added, lua.SyncApplied)
	wantRemaining(t, b.r, c.ID, 12)
	sync(added, lua.SyncHad) // again: once only
	older := c
	older.Version = 0
	sync(older, lua.SyncHad)
	wantRemaining(t, b.r, c.ID, 12)
	if pending, err := b.r.Pending(ctx, c.ID, 10); err != nil || len(pending) != 1 || pending[0] != held.OrderID {
		t.Fatalf("Pending = %v, %v; want alice's order", pending, err)
	}
	checkInvariants(t, b.rdb, c.ID, 15, 5)

	// Closed now: the end moves, reserve refuses.
	closed := added
	closed.Version, closed.EndsAt = 2, b.now().Add(-time.Second)
	sync(closed, lua.SyncApplied)
	_, err := b.r.Reserve(ctx, c.ID, events.NewOrderID(c.ID), "bob", 1, time.Minute)
	wantCode(t, err, events.Ended, "reserve after the campaign was closed")

	shrunk := closed
	shrunk.Version, shrunk.Stock = 3, 14
	if _, err := b.r.Sync(ctx, shrunk); err == nil {
		t.Error("Sync took a smaller stock")
	}
	sync(lua.Campaign{ID: newCampaignID(), Version: 1}, lua.SyncNotFound)
	if _, err := b.r.Freeze(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	shrunk.Stock = 20
	sync(shrunk, lua.SyncFrozen)
	if sale, err := b.r.Sale(ctx, c.ID); err != nil || !sale.Frozen || !sale.Loaded || sale.Remaining != 12 {
		t.Fatalf("Sale of a frozen campaign = %+v, %v", sale, err)
	}
}
