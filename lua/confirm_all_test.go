package lua_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
)

func TestConfirmAll(t *testing.T) {
	t.Run("redis", func(t *testing.T) { testConfirmAll(t, luatest.MustRedis(t), false) })
	// Flushing scripts would break every other test on the shared server: miniredis is ours.
	t.Run("miniredis after a script flush", func(t *testing.T) {
		testConfirmAll(t, redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}), true)
	})
}

func testConfirmAll(t *testing.T, rdb *redis.Client, flush bool) {
	ctx := context.Background()
	r := lua.New(rdb)
	defer r.Close()
	campaign := "ca-" + events.NewID()[14:]
	if _, err := r.LoadCampaign(ctx, lua.Campaign{ID: campaign, Remaining: 10, Limit: 5, StartsAt: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, user := range []string{"a", "b", "c"} {
		id := events.NewOrderID(campaign)
		if _, err := r.Reserve(ctx, campaign, id, user, 2, time.Hour); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := r.Release(ctx, ids[2]); err != nil {
		t.Fatal(err)
	}
	if flush { // Redis forgot its scripts (as after a restart): ConfirmAll loads them and goes on.
		if err := r.Client().ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// It answers which orders it left, and their states: the second time, every one.
	unknown := events.NewOrderID(campaign)
	for i, want := range []map[string]string{
		{ids[2]: "released", unknown: ""},
		{ids[0]: "confirmed", ids[1]: "confirmed", ids[2]: "released", unknown: ""},
	} {
		left, err := r.ConfirmAll(ctx, append(ids, unknown))
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(left, want) {
			t.Errorf("ConfirmAll #%d left %v, want %v", i+1, left, want)
		}
	}
	for i, want := range []string{"confirmed", "confirmed", "released"} {
		res, err := r.Reservation(ctx, ids[i])
		if err != nil || res.State != want {
			t.Errorf("order %d: %+v %v, want %s", i, res, err, want)
		}
	}
	if n, _ := r.Client().ZCard(ctx, lua.KeysOf(campaign).Pending).Result(); n != 0 {
		t.Errorf("%d reservations still pending", n)
	}
	if remaining, _, _ := r.Remaining(ctx, campaign); remaining != 6 {
		t.Errorf("remaining %d, want 6", remaining)
	}
}

// TestReserveAfterScriptFlush: when Redis has forgotten its scripts (as after a restart), a
// purchase still reserves, through the coalescer's pipeline and alone. miniredis, since
// flushing the shared server's scripts would break every other test.
func TestReserveAfterScriptFlush(t *testing.T) {
	ctx := context.Background()
	r := lua.New(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	defer r.Close()
	campaign := "rf-" + events.NewID()[14:]
	if _, err := r.LoadCampaign(ctx, lua.Campaign{ID: campaign, Remaining: 10, Limit: 5, StartsAt: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	for i, rr := range []*lua.Redis{r, r.Alone()} {
		if err := r.Client().ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		id := events.NewOrderID(campaign)
		res, err := rr.Reserve(ctx, campaign, id, "u", 1, time.Hour)
		if err != nil || res.OrderID != id || res.State != "pending" {
			t.Fatalf("reserve #%d after a script flush: %+v, %v", i+1, res, err)
		}
	}
	if remaining, _, _ := r.Remaining(ctx, campaign); remaining != 8 {
		t.Errorf("remaining %d, want 8", remaining)
	}
}
