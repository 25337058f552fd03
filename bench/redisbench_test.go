package bench

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/lua"
)

func TestParseRedisBenchmarkCSV(t *testing.T) {
	out := []byte(`"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"EVALSHA e0e1 1 k:__rand_int__ __rand_int__","56179.77","0.485","0.144","0.455","0.671","1.127","5.487"
`)
	got, err := ParseRedisBenchmarkCSV(out)
	if err != nil {
		t.Fatal(err)
	}
	if got.Throughput != 56179.77 || got.Latency.P50 != 0.455 || got.Latency.P99 != 1.127 || got.Latency.Max != 5.487 || got.Latency.Mean != 0.485 {
		t.Fatalf("%+v", got)
	}
	for _, bad := range []string{"", "ERR\n", `"test","rps"` + "\n" + `"x","0"` + "\n"} {
		if _, err := ParseRedisBenchmarkCSV([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestReserveCommandIsTheAPIsEVALSHA(t *testing.T) {
	mr := miniredis.RunT(t)
	opt := &redis.Options{Addr: mr.Addr()}
	ctx := context.Background()
	if _, err := lua.New(redis.NewClient(opt)).LoadCampaign(ctx, lua.Campaign{ID: "ceil", Remaining: 100, Limit: 100, StartsAt: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	args, err := ReserveCommand(ctx, opt, "ceil", "ceil.order1", "buyer1")
	if err != nil {
		t.Fatal(err)
	}
	if len(args) < 4 || args[0] != "EVALSHA" && args[0] != "evalsha" || !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(args[1]) || args[2] != "5" {
		t.Fatalf("args %q: want EVALSHA <sha1> 5 keys… args…", args)
	}
	args = RandomizeArgs(args, []string{"ceil.order1", "buyer1"}, []string{"ceil.__rand_int__", "u__rand_int__"})
	// The command runs as it is (placeholders and all) and reserves.
	cmd := make([]any, len(args))
	for i, a := range args {
		cmd[i] = a
	}
	rdb := redis.NewClient(opt)
	v, err := rdb.Do(ctx, cmd...).Slice()
	if err != nil || v[0] != "ok" {
		t.Fatalf("the captured command: %v %v", v, err)
	}
	if left, _, _ := lua.New(rdb).Remaining(ctx, "ceil"); left != 98 {
		t.Errorf("remaining %d, want 98: the capture and the replay each reserve one", left)
	}
}
