package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/lua"
)

// RedisCeiling is what redis-benchmark measured: the reserve script alone, through EVALSHA from
// a C client, with no HTTP and no Go in the way.
type RedisCeiling struct {
	Command    string  `json:"command"`
	Clients    int     `json:"clients"`
	Requests   int     `json:"requests"`
	Throughput float64 `json:"throughput"`
	Latency    Latency `json:"latency"`
}

// ReserveCommand returns the arguments of an EVALSHA that runs what lua.Redis.Reserve runs for
// one purchase of campaign by user under orderID, captured from the client itself (a go-redis
// hook), so the ceiling runs exactly the script, keys and arguments the api runs. The purchase
// is made. When the client fell back to EVAL (its EVALSHA met NOSCRIPT), the script is loaded
// and its SHA1 used.
func ReserveCommand(ctx context.Context, opt *redis.Options, campaign, orderID, user string) ([]string, error) {
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	var mu sync.Mutex
	var evalsha, eval []string
	rdb.AddHook(captureHook{fn: func(args []any) {
		if len(args) < 2 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		out := make([]string, len(args))
		for i, a := range args {
			out[i] = fmt.Sprint(a)
		}
		switch strings.ToLower(out[0]) {
		case "evalsha":
			evalsha = out
		case "eval":
			eval = out
		}
	}})
	r := lua.New(rdb)
	if err := r.Load(ctx); err != nil {
		return nil, err
	}
	if _, err := r.Reserve(ctx, campaign, orderID, user, 1, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("capture the reserve command: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	switch {
	case eval != nil:
		sha, err := rdb.ScriptLoad(ctx, eval[1]).Result()
		if err != nil {
			return nil, fmt.Errorf("load the reserve script: %w", err)
		}
		return append([]string{"EVALSHA", sha}, eval[2:]...), nil
	case evalsha != nil && evalsha[1] != "":
		return evalsha, nil
	}
	return nil, fmt.Errorf("capture the reserve command: no EVALSHA or EVAL was sent")
}

// ReserveFallsBack reports whether lua.Redis.Reserve, on a client whose scripts were loaded with
// lua.Redis.Load, sends an EVALSHA that Redis refuses (NOSCRIPT) before its EVAL: two round
// trips per purchase instead of one.
func ReserveFallsBack(ctx context.Context, opt *redis.Options, campaign, orderID, user string) (bool, error) {
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	var mu sync.Mutex
	var evals int
	r := lua.New(rdb)
	if err := r.Load(ctx); err != nil {
		return false, err
	}
	rdb.AddHook(captureHook{fn: func(args []any) {
		if len(args) > 0 {
			if name := strings.ToLower(fmt.Sprint(args[0])); name == "evalsha" || name == "eval" {
				mu.Lock()
				evals++
				mu.Unlock()
			}
		}
	}})
	if _, err := r.Reserve(ctx, campaign, orderID, user, 1, 2*time.Minute); err != nil {
		return false, err
	}
	mu.Lock()
	defer mu.Unlock()
	return evals > 1, nil
}

type captureHook struct{ fn func([]any) }

func (h captureHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h captureHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.fn(cmd.Args())
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook sees the commands of pipelines too: lua.Redis may coalesce calls into them.
func (h captureHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.fn(c.Args())
		}
		return next(ctx, cmds)
	}
}

// RandomizeArgs replaces each argument equal to one of olds by its counterpart in news (which
// may hold redis-benchmark's __rand_int__ placeholder).
func RandomizeArgs(args []string, olds, news []string) []string {
	out := append([]string(nil), args...)
	for i, a := range out {
		for j, o := range olds {
			if a == o {
				out[i] = news[j]
			}
		}
	}
	return out
}

// RunRedisBenchmark runs redis-benchmark against the Redis at opt with clients connections,
// sending requests copies of args (with __rand_int__ randomized), and parses its CSV summary.
func RunRedisBenchmark(ctx context.Context, bin string, opt *redis.Options, clients, requests int, args []string) (RedisCeiling, error) {
	host, port, err := net.SplitHostPort(opt.Addr)
	if err != nil {
		return RedisCeiling{}, fmt.Errorf("redis address %q: %w", opt.Addr, err)
	}
	cmdArgs := []string{"-h", host, "-p", port, "-n", strconv.Itoa(requests), "-c", strconv.Itoa(clients),
		"-r", "1000000000", "--dbnum", strconv.Itoa(opt.DB), "--csv"}
	if opt.Username != "" {
		cmdArgs = append(cmdArgs, "--user", opt.Username)
	}
	if opt.Password != "" {
		cmdArgs = append(cmdArgs, "-a", opt.Password)
	}
	cmd := exec.CommandContext(ctx, bin, append(cmdArgs, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return RedisCeiling{}, fmt.Errorf("%s %s: %w: %s", bin, strings.Join(cmdArgs, " ")+" "+strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	res, err := ParseRedisBenchmarkCSV(out)
	if err != nil {
		return RedisCeiling{}, err
	}
	res.Clients, res.Requests = clients, requests
	return res, nil
}

// ParseRedisBenchmarkCSV reads the first result line of `redis-benchmark --csv`.
func ParseRedisBenchmarkCSV(out []byte) (RedisCeiling, error) {
	recs, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
	if err != nil {
		return RedisCeiling{}, fmt.Errorf("redis-benchmark output: %w", err)
	}
	if len(recs) < 2 || len(recs[0]) < 2 || recs[0][1] != "rps" {
		return RedisCeiling{}, fmt.Errorf("redis-benchmark output: no result in %q", out)
	}
	col := map[string]int{}
	for i, name := range recs[0] {
		col[name] = i
	}
	row := recs[1]
	num := func(name string) float64 {
		i, ok := col[name]
		if !ok || i >= len(row) {
			return 0
		}
		v, _ := strconv.ParseFloat(row[i], 64)
		return v
	}
	res := RedisCeiling{
		Command:    row[0],
		Throughput: num("rps"),
		Latency:    Latency{Mean: num("avg_latency_ms"), P50: num("p50_latency_ms"), P99: num("p99_latency_ms"), Max: num("max_latency_ms")},
	}
	if res.Throughput <= 0 {
		return RedisCeiling{}, fmt.Errorf("redis-benchmark output: no throughput in %q", out)
	}
	return res, nil
}
