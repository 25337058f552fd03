package compensator_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// flakyShard is a Redis on which bad's shard answers the guard's first read of the
// generations and then no longer: a shard that answers now and then.
type flakyShard struct {
	compensator.Rebuilder
	bad   string
	reads *atomic.Int32
}

var errShardSilent = errors.New("campaign's shard does not answer")

func (f flakyShard) Generations(ctx context.Context, campaigns []string) (map[string]lua.Generation, error) {
	gens, err := f.Rebuilder.Generations(ctx, campaigns)
	if f.reads.Add(1) > 1 {
		if _, ok := gens[f.bad]; ok {
			delete(gens, f.bad)
			err = errors.Join(err, errShardSilent)
		}
	}
	return gens, err
}

// TestRebuildPastAShardThatStopsAnswering: two campaigns on sale were lost, on two shards. The
// guard read both, and the rebuild, reading them again under its lock, did not hear from one:
// it rebuilt neither, and the other shard's campaign sold on from the data Redis had lost (it
// is not frozen yet) until a round found both shards answering twice in a row.
func TestRebuildPastAShardThatStopsAnswering(t *testing.T) {
	e := newEnv(t, 10, 5)
	now := time.Now()
	other := storetest.Name("comp")
	if err := e.st.CreateCampaign(e.ctx, store.Campaign{ID: other, Name: "o", Stock: 10, PerUserLimit: 5,
		StartsAtMs: now.Add(-time.Hour).UnixMilli(), CreatedAtMs: now.UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	if err := e.st.MarkOnSale(e.ctx, other); err != nil {
		t.Fatal(err)
	}
	e.loseRedis(t) // both lost, and never loaded again but by a rebuild
	c := e.compensator(t, compensator.Config{RebuildGrace: time.Millisecond})
	compensator.SetRebuilder(c, flakyShard{Rebuilder: e.r, bad: e.campaign, reads: new(atomic.Int32)})
	t.Cleanup(func() { e.r.Client().Del(context.Background(), lua.KeysOf(other).All()...) })
	if err := c.CheckRedis(e.ctx); !errors.Is(err, errShardSilent) {
		t.Errorf("guard round: %v; want the shard's error", err)
	}
	gens, err := e.r.Generations(e.ctx, []string{other})
	if err != nil {
		t.Fatal(err)
	}
	if g := gens[other]; g.Frozen || g.Lost() {
		t.Errorf("the campaign of the shard that answered, after the round: %+v; want it rebuilt and on sale", g)
	}
}
