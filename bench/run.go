package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
)

// runner carries a run's state between its scenarios.
type runner struct {
	cfg      Config
	env      *Env
	prog     *Progress
	res      *Result
	id       Identity
	apiFlags []string // identity and limit flags for every api
	mu       sync.Mutex
	procs    []*Proc // every process started, for their logs' warnings
	// flashAPI is the flash crowd's pipeline, kept running for idle-conns, which measures its api.
	flashAPI *pipeline
}

// steps returns how to run each scenario of AllScenarios, by name.
func (r *runner) steps() map[string]func(context.Context) (ScenarioResult, error) {
	baseline := func(kind string) func(context.Context) (ScenarioResult, error) {
		return func(ctx context.Context) (ScenarioResult, error) { return r.baseline(ctx, kind) }
	}
	return map[string]func(context.Context) (ScenarioResult, error){
		ScSoldOut:     r.soldOut,
		ScConstant:    baseline(Constant),
		ScSyncDB:      baseline(SyncDB),
		ScBareReserve: baseline(BareReserve),
		ScFlashCrowd: func(ctx context.Context) (ScenarioResult, error) {
			res, p, err := r.flashCrowd(ctx, r.cfg.wants(ScIdleConns))
			r.flashAPI = p
			return res, err
		},
		ScIdleConns: func(ctx context.Context) (ScenarioResult, error) {
			if r.flashAPI == nil {
				return ScenarioResult{}, errors.New("idle-conns measures the flash crowd's api: run flash-crowd too")
			}
			defer r.stopFlashAPI()
			return r.idleConns(ctx, r.flashAPI)
		},
		ScAllAccept: func(ctx context.Context) (ScenarioResult, error) {
			return r.allAccept(ctx, ScAllAccept, r.cfg.ConsumerRate)
		},
		ScAllAcceptUnpaced: func(ctx context.Context) (ScenarioResult, error) { return r.allAccept(ctx, ScAllAcceptUnpaced, 0) },
		ScRedisCeiling:     r.redisCeiling,
		ScDrain: func(ctx context.Context) (ScenarioResult, error) {
			return r.drain(ctx, ScDrain, r.cfg.Sizes.DrainEvents, r.cfg.Sizes.BatchSize)
		},
		ScRowAtATime: func(ctx context.Context) (ScenarioResult, error) {
			return r.drain(ctx, ScRowAtATime, r.cfg.Sizes.RowEvents, 1)
		},
	}
}

// stopFlashAPI stops the flash crowd's pipeline, if one is kept.
func (r *runner) stopFlashAPI() {
	if r.flashAPI == nil {
		return
	}
	if err := r.flashAPI.stop(); err != nil {
		r.prog.Logf("bench: %v", err)
	}
	r.flashAPI = nil
}

// Run runs the configured scenarios on the real services and returns the result; a scenario
// that fails is recorded as failed and the run goes on. progress gets the progress bars and
// the processes' failures.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Result, error) {
	if cfg.ProfileSeconds <= 0 {
		cfg.ProfileSeconds = 20
	}
	if cfg.RedisBenchmark == "" {
		cfg.RedisBenchmark = "redis-benchmark"
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 3
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Binary == "" || cfg.WorkDir == "" {
		return nil, errors.New("bench: no seckill binary or no work dir")
	}
	raiseFileLimit()
	r := &runner{cfg: cfg, prog: NewProgress(progress)}
	r.res = &Result{Started: time.Now().UTC(), Command: cfg.Command, Host: hostInfo(), Sizes: cfg.Sizes}
	r.res.Host.Commit = cfg.Commit
	if err := r.identity(); err != nil {
		return nil, err
	}
	r.res.Identity = r.id.Mode()
	env, err := NewEnv(ctx, cfg.RedisURL, cfg.PostgresURL, cfg.Brokers)
	if err != nil {
		return nil, err
	}
	r.env = env
	defer func() {
		if err := env.Close(ctx, cfg.Keep); err != nil {
			r.prog.Logf("bench: %v", err)
		}
	}()
	r.prog.Logf("bench: run %s, schema %s, logs and profiles in %s", env.RunID, env.Schema, cfg.WorkDir)

	steps := r.steps()
	// Round after round: every target's two scenarios alternate, so that a busy spell of the
	// machine lands on both sides of a ratio rather than flipping its verdict.
	for round := 1; round <= cfg.Rounds && ctx.Err() == nil; round++ {
		r.prog.Logf("bench: round %d of %d", round, cfg.Rounds)
		r.env.round = round
		for _, name := range AllScenarios {
			if !cfg.wants(name) {
				continue
			}
			if ctx.Err() != nil {
				break
			}
			load := loadAvg()
			res, err := steps[name](ctx)
			res.Name, res.Round, res.LoadAvg, res.Baseline = name, round, load, slices.Contains(Baselines, name)
			if err != nil {
				res.Error = err.Error()
				r.prog.Logf("bench: %s failed: %v", name, err)
			}
			r.res.Scenarios = append(r.res.Scenarios, res)
		}
		r.stopFlashAPI() // still kept if idle-conns did not run: the run was cancelled
	}
	r.res.Finished = time.Now().UTC()
	r.noteLogProblems()
	r.res.ComputeTargets()
	return r.res, ctx.Err()
}

// identity decides how buyers are named, from the api's flags: a JWT secret of the run's own
// by default, as production does; X-User-ID when asked for, or when the api knows no tokens.
func (r *runner) identity() error {
	flags := FlagsOf(r.cfg.Binary, "api")
	r.id = r.cfg.Identity
	auth := r.cfg.Auth
	if auth == "" {
		auth = "header"
		if flags["jwt-secret"] || len(r.id.Secret) > 0 {
			auth = "jwt"
		}
	}
	switch auth {
	case "jwt":
		if len(r.id.Secret) == 0 {
			b := make([]byte, 32)
			rand.Read(b)
			r.id.Secret = []byte(hex.EncodeToString(b))
		}
		if !flags["jwt-secret"] {
			return errors.New("--auth jwt: the api has no --jwt-secret flag")
		}
		r.apiFlags = append(r.apiFlags, "--jwt-secret", string(r.id.Secret))
		if r.id.Issuer != "" {
			r.apiFlags = append(r.apiFlags, "--jwt-issuer", r.id.Issuer)
		}
	case "header":
		r.id.Secret = nil
		if flags["insecure-user-header"] {
			r.apiFlags = append(r.apiFlags, "--insecure-user-header")
		}
	}
	// Every request comes from one address here; behind a real crowd each buyer has their own.
	if flags["ip-rate"] {
		r.apiFlags = append(r.apiFlags, "--ip-rate", "0")
		r.res.Notes = append(r.res.Notes, "api started with --ip-rate 0: the load generator is one client address, a real crowd is many; the per-buyer limit stays at its default.")
	}
	r.apiFlags = append(r.apiFlags, r.cfg.APIFlags...)
	return nil
}

// connArgs are the connection flags of a role on the run's services.
func (r *runner) connArgs(prefix string) []string {
	return append(r.serverArgs(prefix), "--log-format", "json")
}

// serverArgs are the flags that point a command at the run's services: seckill audit's, which
// logs nothing and has no --log-format.
func (r *runner) serverArgs(prefix string) []string {
	return []string{
		"--redis-url", r.env.RedisURL, "--postgres-url", r.env.PGURL,
		"--kafka-brokers", strings.Join(r.env.Brokers, ","), "--topic-prefix", prefix,
	}
}

// pipeline is the three roles of one scenario, as separate processes.
type pipeline struct {
	r                    *runner
	prefix               string
	api, cons, comp      *Proc
	apiAddr, apiPprof    string
	apiAdmin             string // the api's /metrics
	consPprof, consAdmin string
	admin                string
	cpuStart             map[*Proc]time.Duration
	campaigns            []string // created through the api, retired by stop
}

// role starts one role behind `seckill bench role --pprof`, which serves pprof beside it.
func (r *runner) role(name string, pprofAddr string, args ...string) (*Proc, error) {
	args, env := hideSecrets(args)
	all := append([]string{"bench", "role", "--pprof", pprofAddr}, args...)
	p, err := Start(r.cfg.Binary, name, r.cfg.WorkDir, env, all...)
	if err == nil {
		r.mu.Lock()
		r.procs = append(r.procs, p)
		r.mu.Unlock()
	}
	return p, err
}

// secretFlags are the flags of a child process whose values ps would show anyone on the machine:
// URLs with their passwords, tokens, secrets.
var secretFlags = map[string]bool{"--redis-url": true, "--postgres-url": true, "--jwt-secret": true, "--admin-token": true,
	"--payment-token": true, "--order-id-secret": true}

// SecretFlag reports whether name (--flag, or -flag, which Go's flag package takes alike) is
// one of a role's flags whose value is a secret.
func SecretFlag(name string) bool {
	return strings.HasPrefix(name, "-") && secretFlags["--"+strings.TrimLeft(name, "-")]
}

// hideSecrets moves the secretFlags of args, each a flag and its value or a --flag=value (as
// --api-flag gives them), into the variables (SECKILL_<FLAG>) that every seckill command reads
// for a flag it is not given.
func hideSecrets(args []string) (rest, env []string) {
	for i := 0; i < len(args); i++ {
		name, value, joined := strings.Cut(args[i], "=")
		if SecretFlag(name) && (joined || i+1 < len(args)) {
			if !joined {
				i++
				value = args[i]
			}
			env = append(env, "SECKILL_"+strings.ToUpper(strings.ReplaceAll(strings.TrimLeft(name, "-"), "-", "_"))+"="+value)
			continue
		}
		rest = append(rest, args[i])
	}
	return rest, env
}

// noteLogProblems adds a note for every process that logged warnings or errors.
func (r *runner) noteLogProblems() {
	for _, p := range r.procs {
		if w, e, first := p.LogProblems(); w+e > 0 {
			r.res.Notes = append(r.res.Notes, fmt.Sprintf("%s logged %d warnings and %d errors; the first: %s (log: %s)", p.Name, w, e, first, p.Log))
		}
	}
}

// startPipeline starts api, consumer and compensator on fresh topics and waits until each is
// ready; the consumer persists at most pace orders/s (0: unpaced).
func (r *runner) startPipeline(ctx context.Context, name string, pace int) (*pipeline, error) {
	p := &pipeline{r: r, prefix: r.env.Prefix(name), admin: "admin-" + events.NewID()}
	addrs := make([]string, 7)
	for i := range addrs {
		a, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	p.apiAddr, p.apiPprof, p.consPprof, p.consAdmin = addrs[0], addrs[1], addrs[2], addrs[3]
	compAdmin, compPprof := addrs[4], addrs[5]
	p.apiAdmin = addrs[6]
	conn := r.connArgs(p.prefix)
	var err error
	apiArgs := append([]string{"api", "--addr", p.apiAddr, "--metrics-addr", p.apiAdmin, "--admin-token", p.admin,
		"--partitions", fmt.Sprint(r.cfg.Sizes.Partitions), "--replication", "1",
		"--max-conns-per-addr", "0"}, r.apiFlags...) // the load comes from one address
	if p.api, err = r.role(name+"-api", p.apiPprof, append(apiArgs, conn...)...); err != nil {
		return nil, err
	}
	if err := WaitHTTP(ctx, "http://"+p.apiAddr+"/readyz", p.api, time.Minute); err != nil {
		p.stop()
		return nil, err
	}
	consArgs := []string{"consumer", "--metrics-addr", p.consAdmin, "--max-rate", strconv.Itoa(pace)}
	if p.cons, err = r.role(name+"-consumer", p.consPprof, append(consArgs, conn...)...); err != nil {
		p.stop()
		return nil, err
	}
	if p.comp, err = r.role(name+"-compensator", compPprof, append([]string{"compensator", "--metrics-addr", compAdmin}, conn...)...); err != nil {
		p.stop()
		return nil, err
	}
	for _, w := range []struct {
		url string
		p   *Proc
	}{{"http://" + p.consAdmin + "/readyz", p.cons}, {"http://" + compAdmin + "/readyz", p.comp}} {
		if err := WaitHTTP(ctx, w.url, w.p, time.Minute); err != nil {
			p.stop()
			return nil, err
		}
	}
	return p, nil
}

// caughtUp waits until the consumer has persisted every order produced so far (its group's lag
// is zero), so that a load starts on a quiet pipeline. Without it, the consumer persisted the
// warm-up's orders inside the measured window, at its pace: flash-crowd's crowd was charged
// with some 5,000 orders of another campaign, and its first second (the sale itself) shared
// the CPU with them.
func (p *pipeline) caughtUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	topics := events.NewTopics(p.prefix)
	for {
		lag, err := p.r.lag(ctx, topics.Requested, topics.ConsumerGroup())
		if err == nil && lag == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the consumer did not catch up (lag %d, %v): %w", lag, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *pipeline) procs() []*Proc {
	var out []*Proc
	for _, q := range []*Proc{p.api, p.cons, p.comp} {
		if q != nil {
			out = append(out, q)
		}
	}
	return out
}

// stop sends SIGTERM to every role and waits for their drains.
func (p *pipeline) stop() error {
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, q := range p.procs() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := q.Stop(30 * time.Second); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	p.api, p.cons, p.comp = nil, nil, nil
	errs = append(errs, p.r.retire(p.campaigns))
	p.campaigns = nil
	return errors.Join(errs...)
}

// retire ends a finished scenario's campaigns long ago and deletes their Redis keys, so that
// the compensators of later scenarios leave them alone: a paced all-accept leaves most of its
// reservations pending, and two minutes later another scenario's measurement would carry the
// sweeper failing them by the thousand.
func (r *runner) retire(campaigns []string) error {
	if len(campaigns) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	long := time.Now().Add(-30 * 24 * time.Hour).UnixMilli() // past any compensator's retention
	db := r.env.Store.DB()
	q, args, err := sqlx.In(`UPDATE campaigns SET ends_at_ms = ?, starts_at_ms = LEAST(starts_at_ms, ?) WHERE id IN (?)`, long, long-1, campaigns)
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, db.Rebind(q), args...); err != nil {
		return fmt.Errorf("retire the campaigns of a finished scenario: %w", err)
	}
	for _, c := range campaigns {
		if err := r.env.Lua.Client().Del(ctx, lua.KeysOf(c).All()...).Err(); err != nil {
			return fmt.Errorf("retire campaign %s: %w", c, err)
		}
	}
	return nil
}

// createCampaign creates a campaign through the api's admin endpoint.
func (p *pipeline) createCampaign(ctx context.Context, id string, stock, limit int64) error {
	body, _ := json.Marshal(map[string]any{"id": id, "name": "bench " + id, "stock": stock, "per_user_limit": limit})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.apiAddr+"/v1/campaigns", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+p.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("create campaign %s: %w", id, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("create campaign %s: %s: %s", id, resp.Status, bytes.TrimSpace(b))
	}
	p.campaigns = append(p.campaigns, id)
	return nil
}

// cpuMeter measures the CPU time processes use between start and stop.
type cpuMeter struct {
	procs    map[string]int
	start    map[string]time.Duration
	services map[int]ProcCPU
}

func startCPU(procs map[string]int) *cpuMeter {
	m := &cpuMeter{procs: procs, start: map[string]time.Duration{}, services: ServiceCPU()}
	m.start["bench"] = selfCPU()
	for name, pid := range procs {
		m.start[name], _ = CPUTime(pid)
	}
	return m
}

func (m *cpuMeter) stop() map[string]float64 {
	out := map[string]float64{"bench": (selfCPU() - m.start["bench"]).Seconds()}
	for name, t := range ServiceCPUSince(m.services) {
		out[name] = t.Seconds()
	}
	for name, pid := range m.procs {
		if t, err := CPUTime(pid); err == nil {
			out[name] = (t - m.start[name]).Seconds()
		}
	}
	return out
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measured is a load and what was observed around it.
type measured struct {
	load     *LoadResult
	cpu      map[string]float64
	profiles []Profile
}

// measure warms up, waits for settle (if set) to say the warm-up's work is done, then runs the
// load, measuring the CPU of procs and, when profile names a process with a pprof address,
// capturing its profiles in the middle of the load.
func (r *runner) measure(ctx context.Context, name string, warm, load Load, settle func(context.Context) error, procs map[string]int, profileProc, pprofAddr string) (measured, error) {
	var m measured
	if warm.Requests > 0 {
		warm.Name, warm.Concurrency, warm.Rate = name+" warm-up", r.cfg.Sizes.Concurrency, 0
		warm.Progress = nil
		if _, err := warm.Run(ctx); err != nil {
			return m, fmt.Errorf("warm-up: %w", err)
		}
	}
	if settle != nil {
		if err := settle(ctx); err != nil {
			return m, fmt.Errorf("after the warm-up: %w", err)
		}
	}
	load.Name, load.Concurrency, load.Rate, load.Progress = name, r.cfg.Sizes.Concurrency, r.cfg.Sizes.Rate, r.prog
	var wg sync.WaitGroup
	var mu sync.Mutex
	if r.cfg.Profile && pprofAddr != "" {
		inner := load.Observe
		load.Observe = func(done func() int64, start time.Time) {
			if inner != nil {
				inner(done, start)
			}
			secs, ok := profileWindow(ctx, load.Requests, done, start, r.cfg.ProfileSeconds)
			if !ok {
				return
			}
			for _, kind := range []string{"cpu", "allocs"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ps, err := r.profile(ctx, name, profileProc, pprofAddr, kind, secs)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						r.res.Notes = append(r.res.Notes, fmt.Sprintf("%s: %s profile of %s: %v", name, kind, profileProc, err))
						return
					}
					m.profiles = append(m.profiles, ps...)
				}()
			}
		}
	}
	cpu := startCPU(procs)
	res, err := load.Run(ctx)
	m.cpu = cpu.stop()
	wg.Wait()
	m.load = res
	if err != nil {
		return m, err
	}
	if res.Errors > 0 {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("%s: %d requests failed without an answer (first: %s)", name, res.Errors, res.FirstError))
	}
	if n := res.Count("429"); n > 0 {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("%s: %s answers were 429 (rate limited)", name, count(n)))
	}
	return m, nil
}

// profileWindow waits until a tenth of the load is done and returns a window that should end
// before the load does: four fifths of the estimated remaining time, within 1s and max.
func profileWindow(ctx context.Context, total int64, done func() int64, start time.Time, maxSecs int) (int, bool) {
	for {
		n := done()
		if n >= total/10 && n > 0 {
			el := time.Since(start).Seconds()
			remaining := float64(total-n) / (float64(n) / el)
			return min(max(int(0.8*remaining), 1), maxSecs), true
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// profile captures one profile and returns its tops: CPU, or allocated space and objects.
func (r *runner) profile(ctx context.Context, scenario, proc, addr, kind string, secs int) ([]Profile, error) {
	raw, err := FetchProfile(ctx, "http://"+addr, kind, secs)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(r.cfg.WorkDir, fmt.Sprintf("%s-%s-%s.pb.gz", scenario, proc, kind))
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		return nil, err
	}
	types := []string{"cpu"}
	if kind == "allocs" {
		types = []string{"alloc_space", "alloc_objects"}
	}
	var out []Profile
	for _, t := range types {
		p, err := Top(raw, t, 10)
		if err != nil {
			return nil, err
		}
		p.Scenario, p.Process, p.Seconds, p.File = scenario, proc, float64(secs), file
		out = append(out, p)
	}
	return out, nil
}

func (r *runner) addProfiles(ps []Profile) { r.res.Profiles = append(r.res.Profiles, ps...) }

// scenario builds the common part of an HTTP scenario's result.
func httpResult(what string, baseline bool, m measured) ScenarioResult {
	s := ScenarioResult{What: what, Baseline: baseline, Unit: "req/s", CPU: m.cpu, Load: m.load}
	if m.load != nil {
		s.Throughput, s.Latency = m.load.Throughput, m.load.Latency
		s.setCPUPerOp(m.load.Requests)
	}
	return s
}

// loadAvg returns the one-minute load average.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var v float64
	fmt.Sscan(string(b), &v)
	return v
}

func hostInfo() Host {
	h := Host{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		h.MemoryGiB = int((uint64(si.Totalram)*uint64(si.Unit) + 1<<29) >> 30)
	}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		h.Kernel = cstr(u.Release[:])
	}
	return h
}

func cstr[T int8 | uint8](b []T) string {
	var s []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

// raiseFileLimit lifts the soft limit on open files to the hard one: the idle-connections
// scenario holds ten thousand sockets, and the processes the bench starts inherit the limit.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}
