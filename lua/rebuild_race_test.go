package lua_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
)

// TestRestoreAfterAnotherRestore tells what two rebuilds of one campaign may do to each other.
// The guard rebuilds under a lease of 10 s: a compensator paused past it (a GC pause, a stalled
// VM) wakes up still rebuilding, while another took the lease, found the campaign still lost
// and froze it again. Whatever order their steps then land in, only the last to freeze writes
// the campaign, and only until it restores it: the other's Restore changes nothing and says so.
//
// Before the freeze carried the rebuild's mark, the paused rebuild's Restore deleted the stock,
// buyers and reservations of the sale its successor had put back, and only then found it not
// frozen: every purchase was sold out, the pending reservations and the buyers' counts were gone
// (I1, I3), and the guard saw nothing to repair (same server, not frozen).
func TestRestoreAfterAnotherRestore(t *testing.T) {
	for _, be := range []struct {
		name string
		open func(*testing.T) *backend
	}{{"redis", openRedis}, {"miniredis", openMiniredis}} {
		t.Run(be.name, func(t *testing.T) {
			t.Run("PausedRebuildWakesOnTheRestoredSale", func(t *testing.T) {
				b := be.open(t)
				c := lua.Campaign{Remaining: 10, Stock: 10, Limit: 5, StartsAt: b.now().Add(-time.Hour)}
				c.ID = load(t, b.r, c)
				paused := freeze(t, b.r, c.ID)
				successor := freeze(t, b.r, c.ID)
				restore(t, b.r, successor, c, nil)
				reserve(t, b.r, c.ID, "alice", 2, time.Minute)
				before := readState(t, b.rdb, c.ID)

				// The paused rebuild wakes up and restores the same store snapshot.
				err := b.r.Restore(t.Context(), paused, c, nil)
				wantNotFrozenByThis(t, err)
				assertUnchanged(t, b.rdb, c.ID, before, "the paused rebuild's Restore")
				wantRemaining(t, b.r, c.ID, 8)
				reserve(t, b.r, c.ID, "bob", 1, time.Minute)
			})

			t.Run("PausedRebuildWakesBeforeItsSuccessorRestores", func(t *testing.T) {
				b := be.open(t)
				c := lua.Campaign{Remaining: 10, Stock: 10, Limit: 5, StartsAt: b.now().Add(-time.Hour)}
				c.ID = load(t, b.r, c)
				held := reserve(t, b.r, c.ID, "alice", 2, time.Minute)
				paused := freeze(t, b.r, c.ID)
				successor := freeze(t, b.r, c.ID)
				before := readState(t, b.rdb, c.ID)

				// The store confirmed alice's order: both rebuilds read the same figures.
				rebuilt := c
				rebuilt.Remaining, rebuilt.Holdings = 8, map[string]int64{"alice": 2}
				confirmed := []lua.Reservation{{OrderID: held.OrderID, User: "alice", Quantity: 2, State: "confirmed"}}
				wantNotFrozenByThis(t, b.r.Restore(t.Context(), paused, rebuilt, confirmed))
				assertUnchanged(t, b.rdb, c.ID, before, "the paused rebuild's Restore of a campaign its successor froze")
				_, err := b.r.Reserve(t.Context(), c.ID, events.NewOrderID(c.ID), "bob", 1, time.Minute)
				wantCode(t, err, events.Unavailable, "a purchase while the successor still rebuilds")

				restore(t, b.r, successor, rebuilt, confirmed)
				wantRestored(t, b.rdb, rebuilt, confirmed)
			})

			t.Run("SameRebuildRestoresTwice", func(t *testing.T) {
				b := be.open(t)
				c := lua.Campaign{Remaining: 10, Stock: 10, Limit: 5, StartsAt: b.now().Add(-time.Hour)}
				c.ID = load(t, b.r, c)
				mark := freeze(t, b.r, c.ID)
				restore(t, b.r, mark, c, nil)
				reserve(t, b.r, c.ID, "alice", 2, time.Minute)
				before := readState(t, b.rdb, c.ID)

				wantNotFrozenByThis(t, b.r.Restore(t.Context(), mark, c, nil))
				assertUnchanged(t, b.rdb, c.ID, before, "a second Restore by the rebuild that restored")
			})

			// A Restore that fails after it cleared the sale and wrote the records leaves the
			// campaign frozen, so it sells nothing half rebuilt, and the same rebuild may retry.
			t.Run("RetryAfterAPartialFailure", func(t *testing.T) {
				b := be.open(t)
				c := lua.Campaign{Remaining: 10, Stock: 10, Limit: 5, StartsAt: b.now().Add(-time.Hour)}
				c.ID = load(t, b.r, c)
				held := reserve(t, b.r, c.ID, "alice", 2, time.Minute)
				reserve(t, b.r, c.ID, "bob", 1, time.Minute) // its event never reached Kafka
				mark := freeze(t, b.r, c.ID)
				rebuilt := c
				rebuilt.Remaining, rebuilt.Holdings = 8, map[string]int64{"alice": 2}
				confirmed := []lua.Reservation{{OrderID: held.OrderID, User: "alice", Quantity: 2, State: "confirmed"}}

				// The connection breaks on the last step, the one that puts the sale back.
				broken := redis.NewClient(b.rdb.Options())
				broken.AddHook(failScriptOn{key: lua.KeysOf(c.ID).Stock})
				r := lua.New(broken)
				t.Cleanup(func() { r.Close() })
				if err := r.Restore(t.Context(), mark, rebuilt, confirmed); err == nil || !strings.Contains(err.Error(), "injected") {
					t.Fatalf("Restore through a connection that breaks on its last step: %v", err)
				}
				_, err := b.r.Reserve(t.Context(), c.ID, events.NewOrderID(c.ID), "carol", 1, time.Minute)
				wantCode(t, err, events.Unavailable, "a purchase after a Restore that failed half way")

				restore(t, b.r, mark, rebuilt, confirmed)
				wantRestored(t, b.rdb, rebuilt, confirmed)
			})
		})
	}
}

func freeze(tb testing.TB, r *lua.Redis, campaign string) string {
	tb.Helper()
	mark, err := r.Freeze(context.Background(), campaign)
	if err != nil {
		tb.Fatal(err)
	}
	return mark
}

func restore(tb testing.TB, r *lua.Redis, mark string, c lua.Campaign, confirmed []lua.Reservation) {
	tb.Helper()
	if err := r.Restore(context.Background(), mark, c, confirmed); err != nil {
		tb.Fatalf("Restore by the rebuild that froze %s last: %v", c.ID, err)
	}
}

func wantNotFrozenByThis(tb testing.TB, err error) {
	tb.Helper()
	if !errors.Is(err, lua.ErrNotFrozenByThis) {
		tb.Errorf("Restore: %v, want %v", err, lua.ErrNotFrozenByThis)
	}
}

// wantRestored asserts that Redis holds exactly what Restore was given for c, and sells it.
func wantRestored(tb testing.TB, rdb redis.Cmdable, c lua.Campaign, confirmed []lua.Reservation) {
	tb.Helper()
	s := readState(tb, rdb, c.ID)
	if _, frozen := s.Meta["frozen"]; frozen || s.Stock != strconv.FormatInt(c.Remaining, 10) || len(s.Pending) != 0 {
		tb.Errorf("restored campaign: frozen %q, stock %q, pending %v; want not frozen, %d, none", s.Meta["frozen"], s.Stock, s.Pending, c.Remaining)
	}
	if len(s.Buyers) != len(c.Holdings) {
		tb.Errorf("restored buyers %v, want %v", s.Buyers, c.Holdings)
	}
	for u, n := range c.Holdings {
		if s.Buyers[u] != strconv.FormatInt(n, 10) {
			tb.Errorf("restored buyers %v, want %v", s.Buyers, c.Holdings)
		}
	}
	if len(s.Res) != len(confirmed) {
		tb.Errorf("restored records %v, want the %d confirmed", s.Res, len(confirmed))
	}
	for _, o := range confirmed {
		if want := "confirmed|" + strconv.Itoa(o.Quantity) + "|0|" + o.User; s.Res[o.OrderID] != want {
			tb.Errorf("restored record of %s = %q, want %q", o.OrderID, s.Res[o.OrderID], want)
		}
	}
}

// failScriptOn fails every script call whose first key is key, as a broken connection would,
// without sending it.
type failScriptOn struct{ key string }

func (h failScriptOn) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h failScriptOn) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(a) > 3 && a[3] == h.key {
			err := errors.New("connection reset (injected)")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h failScriptOn) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
