package compensator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

var errShardDown = errors.New("the shard does not answer")

// downShard is Redis with the shard of campaign down answering nothing.
type downShard struct {
	compensator.Rebuilder
	down string
}

func (d downShard) LoadCampaign(ctx context.Context, c lua.Campaign) (bool, error) {
	if c.ID == d.down {
		return false, errShardDown
	}
	return d.Rebuilder.LoadCampaign(ctx, c)
}

// TestReconcileGoesPastADownShard: two campaigns the store has and Redis was never given, the
// first on a shard that does not answer. The guard's round returned at the first, so the
// second, on a shard that answers, stayed off sale for as long as the other shard was down,
// where CheckRedis says a shard that does not answer is an error after the others are done.
func TestReconcileGoesPastADownShard(t *testing.T) {
	e := newEnv(t, 10, 2)
	now := time.Now()
	first, second := storetest.Name("down"), storetest.Name("up")
	for i, id := range []string{first, second} {
		if err := e.st.CreateCampaign(e.ctx, store.Campaign{ID: id, Name: id, Stock: 7, PerUserLimit: 2,
			StartsAtMs: now.Add(-time.Hour).UnixMilli(), CreatedAtMs: now.Add(time.Duration(i) * time.Millisecond).UnixMilli()}); err != nil {
			t.Fatal(err)
		}
	}
	c := e.compensator(t, compensator.Config{})
	compensator.SetRebuilder(c, downShard{Rebuilder: e.r, down: first})
	if err := c.CheckRedis(e.ctx); !errors.Is(err, errShardDown) {
		t.Errorf("a guard round with a shard down: %v, want its error", err)
	}
	if remaining, ok, err := e.r.Remaining(e.ctx, second); err != nil || !ok || remaining != 7 {
		t.Errorf("the campaign on the shard that answers: loaded %v, remaining %d, %v; want it on sale with 7", ok, remaining, err)
	}
	if camp, err := e.st.Campaign(e.ctx, second); err != nil || !camp.OnSale {
		t.Errorf("the campaign on the shard that answers: on sale in the store %v, %v; want it marked", camp.OnSale, err)
	}
}
