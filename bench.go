package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/seckill/seckill/bench"
	"github.com/seckill/seckill/lua/redisurl"
	"github.com/seckill/seckill/store"
)

func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "role": // hidden: a role (or a baseline server) with pprof beside it
			return runBenchRole(ctx, args[1:], stdout)
		case "report": // hidden: rewrite the report and the README from a result
			return runBenchReport(args[1:], stdout)
		}
	}
	const summary = `Measure seckill against its baselines in one run on this machine: api, consumer and
compensator as separate processes on real Redis, PostgreSQL and Kafka (make bench points
at the test services). Prints a table; writes <out>/<date>.json and <out>/<date>.html.`
	f := newFlags("bench", summary, stdout)
	redisURL := f.String("redis-url", "redis://127.0.0.1:6379/0", "Redis URL")
	pgURL := f.String("postgres-url", "postgres://seckill:seckill@127.0.0.1:5432/seckill?sslmode=disable", "PostgreSQL URL (the run makes a schema of its own)")
	brokers := f.String("kafka-brokers", "127.0.0.1:9092", "Kafka seed brokers")
	f.checkServers(redisURL, pgURL, brokers, nil)
	quick := f.Bool("quick", false, "small sizes, a minute or two: any size flag given still wins")
	scenarios := f.String("scenarios", "", "comma-separated subset of: "+strings.Join(bench.AllScenarios, ","))
	sz := bench.FullSizes()
	f.IntVar(&sz.Concurrency, "concurrency", sz.Concurrency, "keep-alive connections of every HTTP scenario (and redis-benchmark clients)")
	f.Float64Var(&sz.Rate, "rate", 0, "open loop at this many requests/s (latency from each request's due time); 0: closed loop")
	f.Int64Var(&sz.FlashStock, "flash-stock", sz.FlashStock, "flash-crowd stock (limit 1 per buyer)")
	f.Int64Var(&sz.FlashRequests, "flash-requests", sz.FlashRequests, "flash-crowd purchases")
	f.Int64Var(&sz.FlashUsers, "flash-users", sz.FlashUsers, "buyers of every HTTP scenario")
	f.Int64Var(&sz.SyncDBRequests, "syncdb-requests", sz.SyncDBRequests, "purchases of sync-db (the flash crowd's workload)")
	f.Int64Var(&sz.Requests, "requests", sz.Requests, "purchases of all-accept, sold-out, bare-reserve and constant")
	f.Int64Var(&sz.Warmup, "warmup", sz.Warmup, "unmeasured purchases before each HTTP scenario")
	f.IntVar(&sz.RedisRequests, "redis-requests", sz.RedisRequests, "EVALSHA calls of the redis-benchmark ceiling")
	f.Int64Var(&sz.DrainEvents, "drain-events", sz.DrainEvents, "events pre-produced for drain")
	f.Int64Var(&sz.RowEvents, "row-events", sz.RowEvents, "events pre-produced for row-at-a-time")
	f.IntVar(&sz.BatchSize, "batch-size", 0, "the drain consumer's --batch-size (0: its default)")
	f.DurationVar(&sz.DrainTimeout, "drain-timeout", sz.DrainTimeout, "longest a drain may run (then its rate so far counts)")
	f.IntVar(&sz.IdleConns, "idle-conns", sz.IdleConns, "idle keep-alive connections for the api's memory")
	auth := f.String("auth", "", "buyers' identity: jwt or header (default: jwt when the api has --jwt-secret)")
	secret := f.String("token-secret", "", "HS256 secret to mint buyers' JWTs with (default: a random one, given to the api)")
	issuer := f.String("token-issuer", "", "iss claim of the minted JWTs (also given to the api)")
	var apiFlags multiFlag
	f.Var(&apiFlags, "api-flag", "extra flag for every api, repeatable: --api-flag=--user-rate=0")
	consumerRate := f.Int("consumer-rate", bench.DefaultConsumerRate, "pace (orders/s) of the consumer beside the api in the HTTP scenarios, as its --max-rate; 0: unpaced")
	binary := f.String("binary", "", "seckill binary to measure (default: go build of this module into the work dir)")
	commitFlag := f.String("commit", "", "what --binary was built from, for the report (default: the module's git commit)")
	out := f.String("out", "bench/results", "where the JSON result and the HTML report go")
	readme := f.String("readme", "", "README whose Performance section gets the latest table")
	profile := f.Bool("profile", true, "capture pprof CPU and allocation profiles of the api and the consumer")
	workDir := f.String("work-dir", "", "processes' logs and raw profiles (default: a new temporary directory)")
	keep := f.Bool("keep", false, "keep the run's schema, topics and Redis keys")
	rounds := f.atLeast("rounds", 3, 1, "rounds of every scenario; each target is judged on the median of its rounds, with their spread shown")
	// What a run measures is what its command line says: SECKILL_RATE set for seckill demo, or
	// SECKILL_BATCH_SIZE for the consumers, must not turn the bench open-loop or change its
	// drain. Only the servers come from the environment, as every command's do.
	f.VisitAll(func(fl *flag.Flag) {
		if fl.Name != "redis-url" && fl.Name != "postgres-url" && fl.Name != "kafka-brokers" {
			f.pick(fl.Name)
		}
	})
	if err := f.parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if *quick {
		q := bench.QuickSizes()
		for name, pair := range map[string][2]any{
			"flash-stock": {&sz.FlashStock, q.FlashStock}, "flash-requests": {&sz.FlashRequests, q.FlashRequests},
			"flash-users": {&sz.FlashUsers, q.FlashUsers}, "syncdb-requests": {&sz.SyncDBRequests, q.SyncDBRequests},
			"requests": {&sz.Requests, q.Requests}, "warmup": {&sz.Warmup, q.Warmup},
			"drain-events": {&sz.DrainEvents, q.DrainEvents}, "row-events": {&sz.RowEvents, q.RowEvents},
		} {
			if !set[name] {
				*pair[0].(*int64) = pair[1].(int64)
			}
		}
		if !set["redis-requests"] {
			sz.RedisRequests = q.RedisRequests
		}
		if !set["drain-timeout"] {
			sz.DrainTimeout = q.DrainTimeout
		}
	}
	cfg := bench.Config{
		RedisURL: *redisURL, PostgresURL: *pgURL, Brokers: strings.Split(*brokers, ","),
		Sizes: sz, Auth: *auth, APIFlags: apiFlags, ConsumerRate: *consumerRate,
		Identity: bench.Identity{Secret: []byte(*secret), Issuer: *issuer},
		Profile:  *profile, Keep: *keep, Rounds: *rounds, Command: benchCommand(f, set),
	}
	if *scenarios != "" {
		cfg.Scenarios = strings.Split(*scenarios, ",")
	}
	if err := cfg.Validate(); err != nil { // before the build: a typo costs no wait
		return usagef("bench: %v", err)
	}
	if *workDir == "" {
		dir, err := os.MkdirTemp("", "seckill-bench-")
		if err != nil {
			return err
		}
		*workDir = dir
	} else if err := os.MkdirAll(*workDir, 0o755); err != nil {
		return err
	}
	commit := *commitFlag
	if *binary == "" {
		if dir := bench.ModuleDir(); dir != "" {
			commit = bench.Commit(dir)
			fmt.Fprintf(os.Stderr, "bench: building the seckill binary into %s\n", *workDir)
			bin, err := bench.Build(ctx, dir, *workDir)
			if err != nil {
				return err
			}
			*binary = bin
		} else if exe, err := os.Executable(); err == nil {
			*binary = exe
		} else {
			return fmt.Errorf("no seckill binary: %w", err)
		}
	}
	cfg.Binary, cfg.WorkDir, cfg.Commit = *binary, *workDir, commit
	res, err := bench.Run(ctx, cfg, os.Stderr)
	if res == nil {
		return err
	}
	return errors.Join(err, writeBenchReports(res, *out, res.Started.Local().Format("2006-01-02-150405"), *readme, stdout))
}

// writeBenchReports prints the table and writes the JSON, the HTML and the README's table. A
// scenario that failed, or a flash crowd that sold wrong, fails the command.
func writeBenchReports(res *bench.Result, out, stamp, readme string, stdout io.Writer) error {
	// The files first: a closed stdout must not lose the run.
	jsonPath, err := res.Save(out, stamp)
	if err != nil {
		return err
	}
	htmlPath, err := res.WriteHTML(out, stamp)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	res.WriteTable(stdout)
	fmt.Fprintf(stdout, "\nresult: %s\nreport: %s\n", jsonPath, htmlPath)
	if readme != "" {
		rel := func(p string) string {
			if r, err := filepath.Rel(filepath.Dir(readme), p); err == nil {
				return filepath.ToSlash(r)
			}
			return p
		}
		if err := bench.UpdateReadme(readme, res.Markdown(rel(jsonPath), rel(htmlPath))); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "README: %s updated\n", readme)
	}
	var errs []error
	for _, s := range res.Scenarios {
		if s.Error != "" {
			errs = append(errs, fmt.Errorf("scenario %s failed", s.Name))
		}
		if s.Flash != nil && !s.Flash.OK {
			errs = append(errs, fmt.Errorf("flash-crowd sold wrong: %s", s.Flash.Line()))
		}
	}
	return errors.Join(errs...)
}

// benchCommand is the command line for the result, without addresses and secrets.
func benchCommand(f *flags, set map[string]bool) string {
	parts := []string{"seckill bench"}
	f.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "redis-url", "postgres-url", "kafka-brokers", "token-secret", "work-dir":
			return
		case "binary": // a temporary path: what matters is what it was built from
			parts = append(parts, "--binary=…")
			return
		case "api-flag": // one each, a secret's value left out (--x=S, or --x then S)
			vals := *fl.Value.(*multiFlag)
			for i, v := range vals {
				if name, _, joined := strings.Cut(v, "="); joined && bench.SecretFlag(name) {
					v = name + "=…"
				} else if i > 0 && bench.SecretFlag(vals[i-1]) {
					v = "…"
				}
				parts = append(parts, "--api-flag="+v)
			}
			return
		}
		if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() && fl.Value.String() == "true" {
			parts = append(parts, "--"+fl.Name)
			return
		}
		parts = append(parts, "--"+fl.Name+"="+fl.Value.String())
	})
	return strings.Join(parts, " ")
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// runBenchRole runs a role (api, consumer, compensator) exactly as its own command does, or a
// baseline server, with net/http/pprof served on --pprof beside it for the bench's profiles.
func runBenchRole(ctx context.Context, args []string, stdout io.Writer) error {
	f := newFlags("bench role", "Run a role or a baseline server with pprof beside it (used by seckill bench).", stdout)
	addr := f.String("pprof", "", "address to serve /debug/pprof/ on (none: no pprof)")
	f.after = append(f.after, func() error {
		if *addr != "" && !validHostPort(*addr, true) {
			return usagef("--pprof %q: want host:port to listen on, such as 127.0.0.1:6060", *addr)
		}
		return nil
	})
	f.positional = "api|consumer|compensator|baseline [its flags]"
	if err := f.parse(args); err != nil {
		return err
	}
	roles := map[string]func(context.Context, []string, io.Writer) error{
		"api": runAPI, "consumer": runConsumer, "compensator": runCompensator, "baseline": runBenchBaseline,
	}
	rest := f.Args()
	if len(rest) == 0 || roles[rest[0]] == nil {
		return usagef("bench role: name one of api, consumer, compensator, baseline")
	}
	if *addr != "" {
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			return fmt.Errorf("pprof: %w", err)
		}
		srv := &http.Server{Handler: bench.PprofHandler(), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
	}
	return roles[rest[0]](ctx, rest[1:], stdout)
}

// runBenchBaseline serves one of the baselines until SIGTERM.
func runBenchBaseline(ctx context.Context, args []string, stdout io.Writer) error {
	f := newFlags("bench role baseline", "Serve a baseline: "+strings.Join(bench.BaselineKinds, ", ")+".", stdout)
	kind := f.String("kind", bench.Constant, "which baseline")
	addr := f.listenAddr("addr", "127.0.0.1:8081", "listen address")
	redisURL := f.String("redis-url", "redis://127.0.0.1:6379/0", "Redis URL (bare-reserve)")
	pgURL := f.String("postgres-url", "postgres://seckill:seckill@127.0.0.1:5432/seckill?sslmode=disable", "database URL (sync-db)")
	c := conn{redisURL: redisURL, redis: new(redisurl.Options)}
	f.checkServers(c.redisURL, pgURL, nil, c.redis)
	if err := f.parse(args); err != nil {
		return err
	}
	b := bench.Baseline{Kind: *kind}
	switch *kind {
	case bench.BareReserve:
		r, err := c.openRedis(ctx)
		if err != nil {
			return err
		}
		defer r.Client().Close()
		b.Redis = r
	case bench.SyncDB:
		st, err := store.Open(ctx, *pgURL)
		if err != nil {
			return err
		}
		defer st.Close()
		b.Store = st
	}
	h, err := b.Handler()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	slog.New(slog.NewJSONHandler(os.Stderr, nil)).Info("baseline listening", "kind", *kind, "addr", ln.Addr().String())
	return bench.Serve(ctx, ln, h)
}

// runBenchReport rewrites the HTML report and the README table from a saved result.
func runBenchReport(args []string, stdout io.Writer) error {
	f := newFlags("bench report", "Rewrite the HTML report (and the README's table) from a JSON result.", stdout)
	result := f.String("result", "", "the JSON result (required)")
	readme := f.String("readme", "", "README whose Performance section gets the table")
	if err := f.parse(args); err != nil {
		return err
	}
	if *result == "" {
		return usagef("bench report: --result is required")
	}
	res, err := bench.LoadResultFile(*result)
	if err != nil {
		return err
	}
	res.ComputeTargets()
	return writeBenchReports(res, filepath.Dir(*result), strings.TrimSuffix(filepath.Base(*result), ".json"), *readme, stdout)
}
