package compensator_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
)

// TestTopologyReshard: a reshard moves a campaign's hash slot, its keys with it, to another
// primary of a Redis Cluster, whose run id is not the one the campaign's meta records. The
// guard took that for a restart or a failover that may have lost writes: it froze the campaign
// and rebuilt it from the store, an outage of its sale for nothing, which also dropped the
// reservations still pending in Redis. A failover of the new primary may lose writes, and must
// still be rebuilt, also when it comes before the guard has seen the reshard.
//
// Named TestTopology*: it reshapes the shared test cluster (each slot goes back at the end; the
// failed-over primaries stay replicas), so it runs alone, as the other topology tests do.
func TestTopologyReshard(t *testing.T) {
	t.Run("moved whole, then failed over", func(t *testing.T) {
		s := newReshardStory(t)
		from, to := luatest.MoveSlot(t, s.cc, lua.KeysOf(s.e.campaign).Meta)
		// The guard reads the meta where it is, and knows every primary it saw last round: the
		// first round after the reshard moves the campaign on.
		g, pending, left := s.round(t)
		if len(pending) != len(s.evs) || left != s.e.stock-s.held || g.Frozen {
			t.Fatalf("slot moved from %s to %s: %d reservations pending, remaining %d, frozen %v; want %d, %d, false: the guard froze and rebuilt a campaign the reshard moved whole",
				from, to, len(pending), left, g.Frozen, len(s.evs), s.e.stock-s.held)
		}
		if g.Server == s.before.Server || g.Recorded != g.Server {
			t.Fatalf("slot moved from %s to %s: the meta records run id %s, the campaign is on %s (before the reshard: %s); want the new primary's recorded",
				from, to, g.Recorded, g.Server, s.before.Server)
		}
		replica := luatest.Failover(t, s.cc, to) // the replica may lack the last writes
		s.rebuilt(t, fmt.Sprintf("%s failed over to %s", to, replica))
	})

	t.Run("moved, then failed over before the guard's next round", func(t *testing.T) {
		s := newReshardStory(t)
		from, to := luatest.MoveSlot(t, s.cc, lua.KeysOf(s.e.campaign).Meta)
		replica := luatest.Failover(t, s.cc, to)
		s.rebuilt(t, fmt.Sprintf("slot moved from %s to %s, which failed over to %s", from, to, replica))
	})
}

// reshardStory is a campaign on the cluster with reservations that only Redis holds (a rebuild
// from the store drops them), and a compensator whose guard has seen the cluster once.
type reshardStory struct {
	cc     *redis.ClusterClient // the test's, which reshards and fails over
	e      *env                 // on the guard's client
	c      *compensator.Compensator
	evs    []events.Event
	held   int64          // units the reservations hold
	before lua.Generation // the campaign as the guard's first round left it
}

func newReshardStory(t *testing.T) *reshardStory {
	t.Helper()
	s := &reshardStory{cc: luatest.MustCluster(t)}
	// A client's slot map is up to a reload interval behind the cluster (a second, redisurl
	// sets). The guard's here reloads only when its own calls make it (a redirection, its
	// round's look at the primaries), so that its map is surely behind what the test changes
	// between two rounds, whenever go-redis would have reloaded it.
	o := *s.cc.Options()
	o.ClusterStateReloadInterval = time.Hour
	guard := redis.NewClusterClient(&o)
	t.Cleanup(func() { guard.Close() })
	s.e = newEnvOn(t, guard, 10, 5, 0)
	s.evs = s.e.reserve(t, 2, time.Hour)
	for _, ev := range s.evs {
		s.held += int64(ev.Quantity)
	}
	s.c = s.e.compensator(t, compensator.Config{RebuildGrace: time.Millisecond})
	s.before, _, _ = s.round(t)
	return s
}

// round runs one round of the guard and returns what it left in Redis.
func (s *reshardStory) round(t *testing.T) (lua.Generation, []string, int64) {
	t.Helper()
	e := s.e
	if err := s.c.CheckRedis(e.ctx); err != nil {
		t.Fatal(err)
	}
	gens, err := e.r.Generations(e.ctx, []string{e.campaign})
	if err != nil {
		t.Fatal(err)
	}
	pending, err := e.r.Pending(e.ctx, e.campaign, 10)
	if err != nil {
		t.Fatal(err)
	}
	left, _, err := e.r.Remaining(e.ctx, e.campaign)
	if err != nil {
		t.Fatal(err)
	}
	return gens[e.campaign], pending, left
}

// rebuilt checks that the guard rebuilds the campaign from the store after what happened, in
// the first round that sees the campaign's new primary: on sale again, without the reservations
// only Redis held, and their units back.
func (s *reshardStory) rebuilt(t *testing.T, what string) {
	t.Helper()
	var g lua.Generation
	var pending []string
	var left int64
	// Until the guard records the new primary: a guard whose map is behind may read the
	// campaign through the old one for a round.
	for i := 0; i == 0 || g.Recorded != g.Server; i++ {
		if i == 3 {
			t.Fatalf("%s: %d guard rounds on, the meta records run id %s, the campaign is on %s", what, i, g.Recorded, g.Server)
		}
		g, pending, left = s.round(t)
	}
	if g.Frozen || len(pending) != 0 || left != s.e.stock {
		t.Errorf("%s: frozen %v, %d reservations pending, remaining %d; want it rebuilt from the store: on sale, none pending, remaining %d",
			what, g.Frozen, len(pending), left, s.e.stock)
	}
}

// TestResharded: the stories in which a campaign's keys are on another run id than the one
// that wrote them, and which of them the guard may take for a reshard. Every other one may have
// lost writes.
func TestResharded(t *testing.T) {
	moved := lua.Generation{Exists: true, Recorded: "r", Server: "x"}
	both := map[string]bool{"r": true, "x": true}
	for _, tc := range []struct {
		name        string
		g           lua.Generation
		before, now map[string]bool
		want        bool
	}{
		{"a reshard between two rounds", moved, both, both, true},
		{"the writer restarted before its keys moved", moved, both, map[string]bool{"r2": true, "x": true}, false},
		{"the writer failed over and its keys moved on", moved, both, map[string]bool{"x": true}, false},
		{"the holder restarted", moved, map[string]bool{"r": true, "x0": true}, both, false},
		{"the holder is a replica promoted since", moved, map[string]bool{"r": true}, both, false},
		{"the guard's first round", moved, nil, both, false},
		{"frozen by a rebuild", lua.Generation{Exists: true, Recorded: "r", Server: "x", Frozen: true}, both, both, false},
		{"gone", lua.Generation{Server: "x"}, both, both, false},
		{"where it was written", lua.Generation{Exists: true, Recorded: "x", Server: "x"}, both, both, false},
	} {
		if got := compensator.Resharded(tc.g, tc.before, tc.now); got != tc.want {
			t.Errorf("%s: resharded = %v, want %v", tc.name, got, tc.want)
		}
	}
}
