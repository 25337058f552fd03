package luatest

import (
	"context"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/lua/redisurl"
)

// ClusterEnv names the variable that points the tests at a Redis Cluster.
const ClusterEnv = "SECKILL_TEST_REDIS_CLUSTER_URL"

// MustCluster returns a client of the test Redis Cluster, closed when the test ends. A missing
// or unreachable cluster fails the test with the reason.
func MustCluster(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	u := os.Getenv(ClusterEnv)
	if u == "" {
		tb.Fatalf("%s is not set: start the cluster with `deploy/local/services.sh start redis-cluster` and `eval $(deploy/local/services.sh env)`", ClusterEnv)
	}
	o, err := redisurl.Parse(u)
	if err != nil || o.Topology != redisurl.Cluster {
		tb.Fatalf("%s does not name a Redis Cluster: %v", ClusterEnv, err)
	}
	cc := redis.NewClusterClient(o.Cluster)
	tb.Cleanup(func() { cc.Close() })
	if err := cc.Ping(context.Background()).Err(); err != nil {
		// `services.sh up` starts the single servers only; the root package's topology tests
		// start the cluster when `make test` runs them first.
		tb.Fatalf("redis cluster at %s=%s is unreachable (start it with `deploy/local/services.sh start redis-cluster`): %v", ClusterEnv, u, err)
	}
	return cc
}

// MoveSlot reshards the hash slot of key, its keys with it, from its primary to another one,
// as `redis-cli --cluster reshard` moves a slot: the target imports it, the source migrates it,
// the keys go over by MIGRATE, and every primary is told the new owner. It returns both
// primaries' addresses once every node of the cluster routes the slot to the target. When the
// test ends the slot goes back to from, wherever a later step put it.
func MoveSlot(tb testing.TB, cc *redis.ClusterClient, key string) (from, to string) {
	tb.Helper()
	ctx := context.Background()
	slot, err := cc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		tb.Fatal(err)
	}
	from, masters := slotOwner(tb, cc, slot)
	for _, m := range masters {
		if m != from {
			to = m
			break
		}
	}
	if to == "" {
		tb.Fatalf("no primary but %s to move slot %d to: %v", from, slot, masters)
	}
	tb.Cleanup(func() {
		if now, _ := slotOwner(tb, cc, slot); now != from {
			moveSlot(tb, cc, slot, now, from)
		}
	})
	moveSlot(tb, cc, slot, from, to)
	return from, to
}

func moveSlot(tb testing.TB, cc *redis.ClusterClient, slot int64, from, to string) {
	tb.Helper()
	ctx := context.Background()
	src, dst := node(tb, cc, from), node(tb, cc, to)
	srcID, dstID := nodeID(tb, src), nodeID(tb, dst)
	must(tb, dst.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err())
	must(tb, src.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err())
	host, port, err := net.SplitHostPort(to)
	if err != nil {
		tb.Fatal(err)
	}
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
		if err != nil {
			tb.Fatal(err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", host, port, "", 0, 10000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(tb, src.Do(ctx, args...).Err())
	}
	// The target first, as redis-cli does: once the source gives the slot up it redirects
	// there, and the target must by then serve it rather than redirect back.
	_, masters := slotOwner(tb, cc, slot)
	for _, m := range slices.Concat([]string{to, from}, masters) {
		must(tb, node(tb, cc, m).Do(ctx, "cluster", "setslot", slot, "node", dstID).Err())
	}
	agree(tb, cc, slot, to)
}

// Failover promotes a replica of the primary at addr with CLUSTER FAILOVER, which a replica
// runs only once it has every write of its primary, and returns the replica's address once
// every node of the cluster routes the primary's slots to it.
func Failover(tb testing.TB, cc *redis.ClusterClient, addr string) string {
	tb.Helper()
	ctx := context.Background()
	primary := node(tb, cc, addr)
	// A primary that a failover just promoted gets its old primary as a replica only once the
	// cluster's gossip has told that one: wait for a live replica rather than fail at once.
	var replica string
	var lines []string
	for deadline := time.Now().Add(30 * time.Second); replica == ""; time.Sleep(50 * time.Millisecond) {
		var err error
		if lines, err = primary.Do(ctx, "cluster", "replicas", nodeID(tb, primary)).StringSlice(); err != nil {
			tb.Fatal(err)
		}
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 2 && !strings.Contains(f[2], "fail") {
				replica, _, _ = strings.Cut(f[1], "@")
				break
			}
		}
		if replica == "" && time.Now().After(deadline) {
			tb.Fatalf("primary %s has no live replica to fail over to after 30s: %q", addr, lines)
		}
	}
	must(tb, node(tb, cc, replica).Do(ctx, "cluster", "failover").Err())
	slots, err := primary.ClusterSlots(ctx).Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, s := range slots {
		if s.Nodes[0].Addr == addr {
			agree(tb, cc, int64(s.Start), replica)
		}
	}
	return replica
}

// slotOwner returns the address of the primary that serves slot and those of every primary
// that serves one, as the cluster's map says.
func slotOwner(tb testing.TB, cc *redis.ClusterClient, slot int64) (owner string, masters []string) {
	tb.Helper()
	slots, err := cc.ClusterSlots(context.Background()).Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, s := range slots {
		if a := s.Nodes[0].Addr; !slices.Contains(masters, a) {
			masters = append(masters, a)
		}
		if int64(s.Start) <= slot && slot <= int64(s.End) {
			owner = s.Nodes[0].Addr
		}
	}
	slices.Sort(masters)
	return owner, masters
}

// agree waits until every node of the cluster routes slot to the primary at addr, so that no
// step after it meets a node that still redirects elsewhere.
func agree(tb testing.TB, cc *redis.ClusterClient, slot int64, addr string) {
	tb.Helper()
	ctx := context.Background()
	nodes, err := cc.ClusterNodes(ctx).Result()
	if err != nil {
		tb.Fatal(err)
	}
	var all []string
	for _, l := range strings.Split(strings.TrimSpace(nodes), "\n") {
		if f := strings.Fields(l); len(f) > 2 && !strings.Contains(f[2], "fail") {
			a, _, _ := strings.Cut(f[1], "@")
			all = append(all, a)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range all {
		for {
			slots, err := node(tb, cc, a).ClusterSlots(ctx).Result()
			if err == nil && slices.ContainsFunc(slots, func(s redis.ClusterSlot) bool {
				return int64(s.Start) <= slot && slot <= int64(s.End) && s.Nodes[0].Addr == addr
			}) {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("node %s does not route slot %d to %s after 30s: %v", a, slot, addr, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// node returns a client of the one cluster node at addr, with the cluster client's credentials.
func node(tb testing.TB, cc *redis.ClusterClient, addr string) *redis.Client {
	o := cc.Options()
	c := redis.NewClient(&redis.Options{Addr: addr, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig})
	tb.Cleanup(func() { c.Close() })
	return c
}

func nodeID(tb testing.TB, c *redis.Client) string {
	tb.Helper()
	id, err := c.Do(context.Background(), "cluster", "myid").Text()
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
