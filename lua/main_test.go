package lua_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine they started is still running at the end.
// go-redis redials a server that refused it once a second, and its loop sees a closed pool only
// when it wakes (TestPingWithAShardDown dials a port nobody listens on).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
