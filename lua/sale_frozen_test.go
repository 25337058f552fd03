package lua_test

import (
	"testing"
	"time"

	"github.com/seckill/seckill/lua"
)

// TestSaleOfACampaignLostAndFrozen: a rebuild freezes a campaign whose keys Redis lost (a wipe,
// a restart without persistence: what `seckill dev` meets at every restart), and its meta then
// holds the frozen mark alone, without a stock. Sale failed on the missing stock, so the
// campaign's page answered 503 and the console an error row for the whole rebuild, where a
// frozen campaign whose keys survived is shown "frozen".
func TestSaleOfACampaignLostAndFrozen(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(*testing.T) *backend
	}{{"redis", openRedis}, {"miniredis", openMiniredis}} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.open(t)
			ctx := t.Context()
			c := lua.Campaign{ID: newCampaignID(), Remaining: 10, Limit: 5, StartsAt: time.Now().Add(-time.Hour)}
			if _, err := b.r.LoadCampaign(ctx, c); err != nil {
				t.Fatal(err)
			}
			if err := b.rdb.Del(ctx, lua.KeysOf(c.ID).All()...).Err(); err != nil { // lost
				t.Fatal(err)
			}
			if _, err := b.r.Freeze(ctx, c.ID); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.rdb.Del(ctx, lua.KeysOf(c.ID).All()...) })
			sale, err := b.r.Sale(ctx, c.ID)
			if err != nil || !sale.Frozen || sale.Loaded {
				t.Errorf("Sale = %+v, %v; want frozen, not loaded (its remaining is the store's), and no error", sale, err)
			}
		})
	}
}
