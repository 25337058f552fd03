// Package luatest connects tests to the Redis server named by SECKILL_TEST_REDIS_URL.
package luatest

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// RedisEnv names the variable that points the tests at a Redis server.
const RedisEnv = "SECKILL_TEST_REDIS_URL"

// MustRedis returns a client of the test Redis server, closed when the test ends. A missing or
// unreachable server fails the test with the reason. Tests share the server, so each uses
// campaign ids of its own (storetest.Name) rather than flushing.
func MustRedis(tb testing.TB) *redis.Client {
	tb.Helper()
	u := os.Getenv(RedisEnv)
	if u == "" {
		tb.Fatalf("%s is not set: start the test services with `deploy/local/services.sh up` and `eval $(deploy/local/services.sh env)`, or run `make test`", RedisEnv)
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		tb.Fatalf("parse %s: %v", RedisEnv, err)
	}
	opt.PoolSize = 256
	rdb := redis.NewClient(opt)
	tb.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		tb.Fatalf("redis at %s=%s is unreachable: %v", RedisEnv, u, err)
	}
	return rdb
}
