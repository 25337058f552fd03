package lua_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
)

// TestPingWithAShardDown: the api's readiness asks Redis whether it answers. On a Cluster with
// one shard down the api still sells every other shard's campaigns (the down shard's buyers get
// 503), so it is ready; a PING without a key went to a primary picked at random, and readiness
// failed as often as it picked the down one, taking each api out of its load balancer now and
// then. With every shard down it is not ready. The "cluster" is two slot ranges, one on the
// test Redis and one on a port nobody listens on.
func TestPingWithAShardDown(t *testing.T) {
	up := luatest.MustRedis(t).Options().Addr
	const down = "127.0.0.1:1"
	cluster := func(addrs ...string) *lua.Redis {
		cc := redis.NewClusterClient(&redis.ClusterOptions{
			ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
				return []redis.ClusterSlot{
					{Start: 0, End: 8191, Nodes: []redis.ClusterNode{{Addr: addrs[0]}}},
					{Start: 8192, End: 16383, Nodes: []redis.ClusterNode{{Addr: addrs[1]}}},
				}, nil
			},
			MaxRedirects:  -1,
			MaxRetries:    -1,
			DialerRetries: 1,
		})
		r := lua.New(cc)
		t.Cleanup(func() { r.Close() })
		return r
	}
	ctx := context.Background()
	oneDown := cluster(up, down)
	failed := 0
	for range 40 {
		if err := oneDown.Ping(ctx); err != nil {
			failed++
		}
	}
	if failed > 0 {
		t.Errorf("with one of two shards down, %d of 40 pings failed; want none: the other shard sells", failed)
	}
	if err := cluster(down, down).Ping(ctx); err == nil {
		t.Error("with every shard down, ping answered; want an error")
	}
}
