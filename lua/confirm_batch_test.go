package lua_test

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
)

// TestConfirmAllMatchesOneByOne checks the batched ConfirmAll against the confirm script as it
// was, one call per order (testdata/confirm_one.lua): from the same state, a batch mixing
// pending, released, confirmed, refunded and missing reservations of several campaigns, with
// repeats and more orders than one call takes, must leave Redis exactly as the one-by-one path
// does, each order's outcome must be the old one (for the batch script and for Confirm), and a
// second ConfirmAll changes nothing.
func TestConfirmAllMatchesOneByOne(t *testing.T) {
	for _, be := range []struct {
		name string
		open func(*testing.T) *backend
	}{{"redis", openRedis}, {"miniredis", openMiniredis}} {
		t.Run(be.name, func(t *testing.T) {
			t.Run("mixed", func(t *testing.T) { testConfirmAllDifferential(t, be.open(t), false) })
			t.Run("with a malformed record", func(t *testing.T) { testConfirmAllDifferential(t, be.open(t), true) })
		})
	}
}

func testConfirmAllDifferential(t *testing.T, b *backend, malformed bool) {
	ctx := t.Context()
	bulk := lua.ConfirmBatch + 100 // pending orders of campaign a: two calls
	a := b.open(t, int64(bulk)+100, 10)
	other := b.open(t, 100, 10)
	unloaded := newCampaignID() // a campaign Redis does not know
	deleteCampaign(t, b.rdb, unloaded)
	campaigns := []string{a, other, unloaded}

	res := func(campaign, user string) string {
		return reserve(t, b.r, campaign, user, 1, time.Hour).OrderID
	}
	var batch []string
	for i := range bulk {
		batch = append(batch, res(a, fmt.Sprintf("bulk%d", i)))
	}
	released, confirmed, refunded := res(a, "released"), res(a, "confirmed"), res(a, "refunded")
	otherPending, otherReleased := res(other, "p"), res(other, "r")
	for _, id := range []string{released, otherReleased} {
		if _, err := b.r.Release(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{confirmed, refunded} {
		if _, err := b.r.Confirm(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.r.Refund(ctx, refunded); err != nil {
		t.Fatal(err)
	}
	// Campaigns interleaved, repeats (the second time finds the order confirmed), orders with no
	// reservation in a known and an unknown campaign.
	batch = slices.Insert(batch, 3, otherPending, released, confirmed, events.NewOrderID(a), batch[0],
		refunded, otherReleased, events.NewOrderID(unloaded), events.NewOrderID(other), otherPending)
	if malformed {
		bad := events.NewOrderID(a)
		if err := b.rdb.HSet(ctx, lua.KeysOf(a).Res, bad, "garbage").Err(); err != nil {
			t.Fatal(err)
		}
		batch = slices.Insert(batch, 10, bad)
	}

	before := readStates(t, b.rdb, campaigns)
	old := oldOutcomes(t, b.rdb, batch)
	want := readStates(t, b.rdb, campaigns)
	if reflect.DeepEqual(before, want) {
		t.Fatal("the one-by-one path changed nothing: the test confirms no pending order")
	}

	// The batch script, one call per campaign, answers for each order as the old one did.
	writeStates(t, b.rdb, campaigns, before)
	got := map[int]string{}
	for _, campaign := range campaigns {
		var idx []int
		var ids []string
		for i, id := range batch {
			if c, _ := events.CampaignOf(id); c == campaign {
				idx, ids = append(idx, i), append(ids, id)
			}
		}
		v, err := lua.ConfirmReplies(ctx, b.rdb, campaign, ids)
		if err != nil || len(v) != 2*len(ids) {
			t.Fatalf("confirm script over %d orders of %s = %d replies, %v", len(ids), campaign, len(v), err)
		}
		for j, i := range idx {
			got[i] = v[2*j] + " " + v[2*j+1]
			if v[2*j] == "malformed" {
				got[i] = "error " + v[2*j+1]
			}
		}
	}
	for i, id := range batch {
		if got[i] != old[i] {
			t.Errorf("order %d (%s): batch script %q, one by one %q", i, id, got[i], old[i])
		}
	}
	assertStates(t, b.rdb, campaigns, want, "the batch script")

	// Confirm, a batch of one, also answers as the old script did.
	writeStates(t, b.rdb, campaigns, before)
	for i, id := range batch {
		out, err := b.r.Confirm(ctx, id)
		g := map[bool]string{true: "done", false: "unchanged"}[out.Changed] + " " + out.State
		switch {
		case err != nil:
			g = "error " + err.Error()
		case out.State == "":
			g = "unknown "
		}
		if g != old[i] && !(strings.HasPrefix(old[i], "error ") && strings.HasSuffix(g, strings.TrimPrefix(old[i], "error "))) {
			t.Errorf("order %d (%s): Confirm %q, one by one %q", i, id, g, old[i])
		}
	}
	assertStates(t, b.rdb, campaigns, want, "Confirm one by one")

	// ConfirmAll: one call per campaign and per lua.ConfirmBatch orders, in one round trip.
	writeStates(t, b.rdb, campaigns, before)
	var calls, roundTrips atomic.Int64
	b.rdb.AddHook(countEvals{&calls, &roundTrips})
	// It returns the orders it left, with the state the one-by-one path answered them
	// (the last time, for a repeat).
	wantLeft := map[string]string{}
	for i, id := range batch {
		if outcome, state, _ := strings.Cut(old[i], " "); outcome == "unchanged" || outcome == "unknown" {
			wantLeft[id] = state
		}
	}
	for n := range 2 { // the second time changes nothing
		left, err := b.r.ConfirmAll(ctx, batch)
		if malformed != (err != nil) {
			t.Errorf("ConfirmAll #%d: %v, want an error %v", n+1, err, malformed)
		}
		assertStates(t, b.rdb, campaigns, want, fmt.Sprintf("ConfirmAll #%d", n+1))
		if n == 0 && !maps.Equal(left, wantLeft) {
			t.Errorf("ConfirmAll #1 left %v, want %v", left, wantLeft)
		}
	}
	if c, r := calls.Load(), roundTrips.Load(); c != 2*4 || r != 2 {
		t.Errorf("two ConfirmAll calls made %d script calls in %d round trips, want 8 in 2", c, r)
	}
}

// oldOutcomes confirms batch one order per call with the old script and returns each order's
// outcome: "outcome state", or "error message".
func oldOutcomes(t *testing.T, rdb *redis.Client, batch []string) []string {
	t.Helper()
	cmds, err := confirmOneByOne(t.Context(), rdb, batch)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(batch))
	for i, c := range cmds {
		v, err := c.StringSlice()
		switch {
		case err != nil:
			out[i] = "error " + err.Error()
		case len(v) != 2:
			t.Fatalf("old confirm of %s = %q", batch[i], v)
		default:
			out[i] = v[0] + " " + v[1]
		}
	}
	return out
}

func readStates(t *testing.T, rdb redis.Cmdable, campaigns []string) []state {
	t.Helper()
	s := make([]state, len(campaigns))
	for i, c := range campaigns {
		s[i] = readState(t, rdb, c)
	}
	return s
}

func assertStates(t *testing.T, rdb redis.Cmdable, campaigns []string, want []state, what string) {
	t.Helper()
	for i, c := range campaigns {
		if got := readState(t, rdb, c); !reflect.DeepEqual(got, want[i]) {
			t.Errorf("%s left campaign %s at\n%+v\nthe one-by-one path at\n%+v", what, c, got, want[i])
		}
	}
}

// writeStates puts the campaigns back as readStates read them.
func writeStates(t *testing.T, rdb redis.Cmdable, campaigns []string, states []state) {
	t.Helper()
	ctx := t.Context()
	pipe := rdb.TxPipeline()
	for i, c := range campaigns {
		k, s := lua.KeysOf(c), states[i]
		pipe.Del(ctx, k.Stock, k.Buyers, k.Res, k.Pending, k.Meta)
		if s.Stock != "" {
			pipe.Set(ctx, k.Stock, s.Stock, 0)
		}
		for key, h := range map[string]map[string]string{k.Meta: s.Meta, k.Buyers: s.Buyers, k.Res: s.Res} {
			if len(h) > 0 {
				pipe.HSet(ctx, key, h)
			}
		}
		if len(s.Pending) > 0 {
			pipe.ZAdd(ctx, k.Pending, s.Pending...)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readStates(t, rdb, campaigns); !reflect.DeepEqual(got, states) {
		t.Fatal("writeStates did not restore the campaigns")
	}
}

// countEvals counts the EVALSHA commands a client sends, and the pipelines that carry them.
type countEvals struct{ calls, roundTrips *atomic.Int64 }

func (countEvals) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countEvals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.ProcessPipelineHook(func(ctx context.Context, cmds []redis.Cmder) error {
			return next(ctx, cmd)
		})(ctx, []redis.Cmder{cmd})
	}
}

func (h countEvals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if c.Name() == "evalsha" {
				n++
			}
		}
		if n > 0 {
			h.calls.Add(int64(n))
			h.roundTrips.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestConfirmAllGoesOnPastAFailedCall: one call of the pipeline failing (a campaign's keys of the
// wrong type) is ConfirmAll's error, and the other calls' answers still reach the caller. The
// consumer moves on the orders ConfirmAll left (a refund or expiry that overtook the batch), and
// lost those of every call after the failed one.
func TestConfirmAllGoesOnPastAFailedCall(t *testing.T) {
	ctx := t.Context()
	b := openMiniredis(t)
	broken, good := b.open(t, 10, 10), b.open(t, 10, 10)
	if err := b.rdb.Del(ctx, lua.KeysOf(broken).Res).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.rdb.Set(ctx, lua.KeysOf(broken).Res, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pending := reserve(t, b.r, good, "p", 1, time.Hour).OrderID
	released := reserve(t, b.r, good, "r", 1, time.Hour).OrderID
	if _, err := b.r.Release(ctx, released); err != nil {
		t.Fatal(err)
	}
	// The broken campaign's call comes first.
	left, err := b.r.ConfirmAll(ctx, []string{events.NewOrderID(broken), pending, released})
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("ConfirmAll over a campaign whose keys are of the wrong type: %v; want its WRONGTYPE", err)
	}
	if want := map[string]string{released: lua.StateReleased}; !maps.Equal(left, want) {
		t.Errorf("ConfirmAll left %v; want %v, the call after the failed one's answer", left, want)
	}
	if out, err := b.r.Confirm(ctx, pending); err != nil || out.Changed || out.State != lua.StateConfirmed {
		t.Errorf("the good campaign's pending order after ConfirmAll: %+v, %v; want confirmed by it", out, err)
	}
}
