package lua_test

import (
	"context"
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

// TestFreezeReturnsItsMarkPastAFailedWrite: Freeze writes every campaign's mark in one
// pipeline, and one write may fail while the others go through (on a Cluster, a shard that
// refuses writes). Those hold the mark, which only a Restore with it lifts: Freeze returns it
// with the error, and Restore tells the campaign that did not take it.
func TestFreezeReturnsItsMarkPastAFailedWrite(t *testing.T) {
	b := openRedis(t)
	ctx := t.Context()
	good, bad := newCampaignID(), newCampaignID()
	for _, id := range []string{good, bad} {
		if _, err := b.r.LoadCampaign(ctx, lua.Campaign{ID: id, Remaining: 10, Limit: 5, StartsAt: time.Now().Add(-time.Hour)}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.rdb.Del(context.Background(), lua.KeysOf(id).All()...) })
	}
	if err := b.rdb.Set(ctx, lua.KeysOf(bad).Meta, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	mark, err := b.r.Freeze(ctx, bad, good)
	if err == nil || mark == "" {
		t.Fatalf("Freeze = %q, %v; want the mark and the failed write's error", mark, err)
	}
	c := lua.Campaign{ID: good, Remaining: 10, Limit: 5, StartsAt: time.Now().Add(-time.Hour)}
	if err := b.r.Restore(ctx, mark, c, nil); err != nil {
		t.Errorf("Restore with the mark of the campaign that took it: %v", err)
	}
	if s, err := b.r.Sale(ctx, good); err != nil || s.Frozen || !s.Loaded {
		t.Errorf("after its restore: %+v, %v; want it on sale", s, err)
	}

	if err := b.rdb.Set(ctx, lua.KeysOf(good).Meta, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if mark, err := b.r.Freeze(ctx, bad, good); err == nil || mark != "" {
		t.Errorf("Freeze where every write failed = %q, %v; want no mark and the error", mark, err)
	}
}
