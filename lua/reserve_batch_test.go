package lua_test

import (
	"context"
	_ "embed"
	"fmt"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
)

// reserveOneSrc is the reserve script as it was before it took many purchases per call: the
// oracle the batched script is checked against.
//
//go:embed testdata/reserve_one.lua
var reserveOneSrc string

var reserveOne = redis.NewScript(reserveOneSrc)

// TestReserveBatchMatchesOneByOne checks the reserve script, which takes many purchases per
// call, against the script as it was, one call per purchase (testdata/reserve_one.lua): from the
// same state, random purchases by a few buyers of a small stock (repeated order ids, within a
// call and across calls, quantities from 0 to past the limit, a malformed reservation and a
// malformed holding), cut into calls of random sizes, must get the old answers one by one and
// leave Redis exactly as the old script did. Whole-call refusals (not started, ended, frozen,
// unknown campaign) are checked the same way.
func TestReserveBatchMatchesOneByOne(t *testing.T) {
	for _, be := range []struct {
		name string
		open func(*testing.T) *backend
	}{{"redis", openRedis}, {"miniredis", openMiniredis}} {
		t.Run(be.name, func(t *testing.T) {
			for seed := range uint64(20) {
				t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { testReserveDifferential(t, be.open(t), seed, "") })
			}
			for _, whole := range []string{"not started", "ended", "frozen", "unknown"} {
				t.Run(whole, func(t *testing.T) { testReserveDifferential(t, be.open(t), 99, whole) })
			}
		})
	}
}

func testReserveDifferential(t *testing.T, b *backend, seed uint64, whole string) {
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(seed, 1))
	const ttl = time.Minute
	c := lua.Campaign{ID: newCampaignID(), Remaining: 20 + rng.Int64N(40), Limit: 1 + rng.Int64N(4), StartsAt: b.now().Add(-time.Hour)}
	load(t, b.r, c)
	k := lua.KeysOf(c.ID)
	prior := reserve(t, b.r, c.ID, "u0", 1, ttl).OrderID // a reservation made before
	var change error
	switch whole {
	case "not started":
		change = b.rdb.HSet(ctx, k.Meta, "starts_ms", b.now().Add(time.Hour).UnixMilli()).Err()
	case "ended":
		change = b.rdb.HSet(ctx, k.Meta, "ends_ms", b.now().Add(-time.Minute).UnixMilli()).Err()
	case "frozen":
		change = b.rdb.HSet(ctx, k.Meta, "frozen", "1").Err()
	case "unknown":
		change = b.rdb.Del(ctx, k.Meta).Err()
	}
	if change != nil {
		t.Fatal(change)
	}
	// What the scripts cannot parse.
	badRecord := events.NewOrderID(c.ID)
	if err := b.rdb.HSet(ctx, k.Res, badRecord, "garbage").Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.rdb.HSet(ctx, k.Buyers, "u-bad", "lots").Err(); err != nil {
		t.Fatal(err)
	}
	ids := []string{prior, badRecord}
	for range 40 {
		ids = append(ids, events.NewOrderID(c.ID))
	}
	purchases := make([]lua.Purchase, 300)
	for i := range purchases {
		user := fmt.Sprintf("u%d", rng.IntN(12))
		if rng.IntN(40) == 0 {
			user = "u-bad"
		}
		purchases[i] = lua.Purchase{OrderID: ids[rng.IntN(len(ids))], User: user, Qty: rng.IntN(int(c.Limit) + 2)}
	}

	before := readState(t, b.rdb, c.ID)
	start := b.now()
	old := make([]string, len(purchases))
	for i, p := range purchases {
		old[i] = oldReserve(ctx, b.rdb, k, p, ttl)
	}
	want := readState(t, b.rdb, c.ID)
	writeStates(t, b.rdb, []string{c.ID}, []state{before})
	var got []string
	for rest := purchases; len(rest) > 0; {
		n := min(len(rest), 1+rng.IntN(40))
		v, err := lua.ReserveReplies(ctx, b.rdb, c.ID, ttl, rest[:n])
		if err != nil {
			t.Fatalf("reserve script over %d purchases: %v", n, err)
		}
		got, rest = append(got, v...), rest[n:]
	}
	end := b.now()

	// Redis's clock moved between the two runs: deadlines are checked to be the time of the call
	// plus the ttl, and then compared no further.
	if whole == "" && !strings.Contains(strings.Join(old, ","), "ok ") {
		t.Fatal("the old script reserved nothing: the test exercises no purchase")
	}
	var due []int64
	for i := range purchases {
		o, g := maskDeadlines(old[i], &due), maskDeadlines(got[i], &due)
		if o != g {
			t.Errorf("purchase %d %+v: batched %q, one by one %q", i, purchases[i], got[i], old[i])
		}
	}
	after := readState(t, b.rdb, c.ID)
	for _, s := range []*state{&want, &after} {
		for id, rec := range s.Res {
			s.Res[id] = maskDeadlines(rec, &due)
		}
		for i := range s.Pending {
			due = append(due, int64(s.Pending[i].Score))
			s.Pending[i].Score = 0
		}
		slices.SortFunc(s.Pending, func(a, b redis.Z) int { return strings.Compare(a.Member.(string), b.Member.(string)) })
	}
	if !reflect.DeepEqual(after, want) {
		t.Errorf("batched calls left\n%+v\none by one left\n%+v", after, want)
	}
	lo, hi := start.Add(-time.Hour).Add(ttl).UnixMilli(), end.Add(ttl).UnixMilli()+1
	for _, d := range due {
		if d != 0 && (d < lo || d > hi) {
			t.Errorf("deadline %d is not a call's time plus the ttl (%d to %d)", d, lo, hi)
		}
	}
}

// oldReserve runs the old one-purchase script and returns its reply as ReserveReplies does,
// "malformed" where it failed on data it could not parse.
func oldReserve(ctx context.Context, rdb *redis.Client, k lua.Keys, p lua.Purchase, ttl time.Duration) string {
	v, err := reserveOne.Run(ctx, rdb, []string{k.Stock, k.Buyers, k.Res, k.Pending, k.Meta}, p.OrderID, p.User, p.Qty, ttl.Milliseconds()).Slice()
	if err != nil {
		return "malformed " + err.Error()
	}
	record := ""
	if len(v) > 3 {
		record = v[3].(string)
	}
	return fmt.Sprintf("%s %d %d %s", v[0], v[1], v[2], record)
}

// deadlineRE finds the deadlines in a reply or a record: 13-digit milliseconds.
var deadlineRE = regexp.MustCompile(`\b1\d{12}\b`)

// maskDeadlines replaces the deadlines in s by D, collecting them in due; a malformed reply keeps
// only its status, as the old script's error and the new script's record differ in wording.
func maskDeadlines(s string, due *[]int64) string {
	if strings.HasPrefix(s, "malformed ") {
		return "malformed"
	}
	return deadlineRE.ReplaceAllStringFunc(s, func(d string) string {
		var n int64
		fmt.Sscan(d, &n)
		*due = append(*due, n)
		return "D"
	})
}
