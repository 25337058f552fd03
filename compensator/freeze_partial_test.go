package compensator_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/lua"
)

// refusingFreeze is a Redis on which the write of bad's frozen mark fails, as on a shard that
// refuses writes (OOM, NOREPLICAS, a failover under way) while the other shards take theirs:
// bad's meta becomes a string, so its HSET fails with WRONGTYPE in the same pipeline.
type refusingFreeze struct {
	compensator.Rebuilder
	r   *lua.Redis
	bad string
}

func (f refusingFreeze) Freeze(ctx context.Context, campaigns ...string) (string, error) {
	meta := lua.KeysOf(f.bad).Meta
	if err := f.r.Client().Set(ctx, meta, "not a hash", 0).Err(); err != nil {
		return "", err
	}
	return f.Rebuilder.Freeze(ctx, campaigns...)
}

// TestRebuildRestoresWhatItFroze: a rebuild froze two campaigns in one pipeline, and the write
// of one failed. The other had taken the rebuild's mark, which only this rebuild may lift; the
// rebuild returned at the error, so that campaign stayed frozen, its buyers refused, and every
// later round froze it again and failed again as long as the first one's write failed.
func TestRebuildRestoresWhatItFroze(t *testing.T) {
	e := newEnv(t, 10, 5)
	other := e.addCampaign(t, 10, 5, 0)
	c := e.compensator(t, compensator.Config{RebuildGrace: time.Millisecond})
	compensator.SetRebuilder(c, refusingFreeze{Rebuilder: e.r, r: e.r, bad: e.campaign})
	t.Cleanup(func() { e.r.Client().Del(context.Background(), lua.KeysOf(e.campaign).All()...) })
	if err := c.Rebuild(e.ctx, []string{e.campaign, other}); err == nil {
		t.Errorf("rebuild: no error; want the failed freeze")
	}
	gens, err := e.r.Generations(e.ctx, []string{other})
	if err != nil {
		t.Fatal(err)
	}
	if g := gens[other]; g.Frozen || g.Lost() {
		t.Errorf("the campaign whose freeze went through, after the rebuild: %+v; want it restored and on sale", g)
	}
}
