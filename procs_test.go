package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seckill/seckill/bench"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
	"github.com/seckill/seckill/lua/redisurl"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// This file holds what the fault tests (faults_test.go) and the soak share: the seckill binary
// built with failpoints, roles run as OS processes that a failpoint or the test can kill -9 and
// a supervisor restarts, private servers started through deploy/local/services.sh, and a load of
// buyers whose every answer is recorded.

func TestMain(m *testing.M) {
	code := m.Run()
	for _, b := range []*builtBinary{&binary, &raceBinary} {
		b.once.Do(func() {}) // waits for a build still running (buildEarly)
		if b.dir != "" {
			os.RemoveAll(b.dir)
		}
	}
	os.Exit(code)
}

// builtBinary is the seckill binary with failpoints compiled in, built once per test run.
type builtBinary struct {
	flags []string // go build's, beside -tags failpoints
	once  sync.Once
	dir   string
	path  string
	err   error
}

var (
	binary = builtBinary{}
	// raceBinary is built with the race detector: a story run on it fails on a race that only
	// the processes' concurrency shows (see raceReports).
	raceBinary = builtBinary{flags: []string{"-race"}}
)

// buildEarly starts building the binary in the background: a fault test calls it before
// t.Parallel, so the build runs beside the sequential tests instead of after them.
func buildEarly() { go binary.once.Do(binary.build) }

// seckillBinary returns the path of `go build -tags failpoints` of this module, with the race
// detector when race is set.
func seckillBinary(t *testing.T, race bool) string {
	t.Helper()
	b := &binary
	if race {
		b = &raceBinary
	}
	b.once.Do(b.build)
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// build compiles the binary into a directory named after this process. TestMain removes it;
// one left by a test binary that died (a -timeout panic runs no cleanup) is removed by the next
// build, once its process is gone.
func (b *builtBinary) build() {
	const prefix = "seckill-faults-"
	stale, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	for _, dir := range stale {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(dir), prefix), "-", 2)[0])
		if err == nil && syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(dir)
		}
	}
	b.dir = filepath.Join(os.TempDir(), prefix+strconv.Itoa(os.Getpid())+strings.Join(b.flags, ""))
	if b.err = os.MkdirAll(b.dir, 0o755); b.err != nil {
		return
	}
	b.path = filepath.Join(b.dir, "seckill")
	args := append([]string{"build", "-tags", "failpoints"}, b.flags...)
	cmd := exec.Command("go", append(args, "-o", b.path, ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// raceReports returns the race detector's reports in a role's log: none unless the role ran on
// raceBinary.
func raceReports(logPath string) []string {
	data, _ := os.ReadFile(logPath)
	var out []string
	for _, r := range strings.Split(string(data), "WARNING: DATA RACE")[1:] {
		end, _, _ := strings.Cut(r, "==================")
		out = append(out, "WARNING: DATA RACE"+end)
	}
	return out
}

// ---------------------------------------------------------------------------- processes --

// stopRole stops one run of a role with SIGTERM, the clean stop every role must drain and
// return 0 from.
func stopRole(p *bench.Proc, within time.Duration) error {
	err := p.Stop(within)
	if p.Killed() {
		return errKilledFirst
	}
	return err
}

// errKilledFirst says a process died by SIGKILL (its failpoint) before SIGTERM could stop it.
var errKilledFirst = errors.New("killed by its failpoint before it could stop")

// role keeps one seckill role running: when the process dies it is started again, and a death
// by SIGKILL (a failpoint) is counted. Any other exit is a finding: roles must outlive the
// outages of their dependencies.
type role struct {
	name      string
	c         *cluster
	args      func() []string // read at every start: the api's address is fixed, ports are not
	afterKill func()          // runs after a SIGKILL, before the restart

	mu         sync.Mutex
	failpoints string // SECKILL_FAILPOINTS of the next start
	killsLeft  int    // SIGKILLs after which the starts go without failpoints; < 0 for no bound
	cur        *bench.Proc
	stopping   bool
	kills      int
	starts     int
	exits      []string // deaths that were not SIGKILL
	supervisor chan struct{}
}

func (r *role) start(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	p, err := r.spawn()
	if err != nil {
		r.mu.Unlock()
		t.Fatal(err)
	}
	r.cur = p
	r.supervisor = make(chan struct{})
	r.mu.Unlock()
	go r.supervise()
}

func (r *role) spawn() (*bench.Proc, error) {
	r.starts++
	var env []string
	if r.failpoints != "" && r.killsLeft != 0 {
		env = append(env, "SECKILL_FAILPOINTS="+r.failpoints)
	}
	args := append(r.args(), r.c.conn...)
	return bench.Start(r.c.bin, r.name, r.c.logDir, env, args...)
}

// supervise restarts the role whenever it dies, until stop.
func (r *role) supervise() {
	defer close(r.supervisor)
	for {
		r.mu.Lock()
		p := r.cur
		r.mu.Unlock()
		<-p.Done()
		r.mu.Lock()
		if r.stopping {
			r.mu.Unlock()
			return
		}
		if p.Killed() {
			r.kills++
			r.killsLeft--
		} else {
			_, err := p.Exited()
			r.exits = append(r.exits, fmt.Sprintf("%s exited on its own (%v); its log ends:\n%s", r.name, err, p.Tail(15)))
			time.Sleep(100 * time.Millisecond) // no busy loop if it cannot start at all
		}
		after := r.afterKill
		r.mu.Unlock()
		if after != nil && p.Killed() {
			after()
		}
		r.mu.Lock()
		if r.stopping {
			r.mu.Unlock()
			return
		}
		next, err := r.spawn()
		if err != nil {
			r.exits = append(r.exits, err.Error())
			r.mu.Unlock()
			return
		}
		r.cur = next
		r.mu.Unlock()
	}
}

// setFailpoints changes the failpoints of the next start; restart applies them at once.
func (r *role) setFailpoints(fp string) {
	r.setFailpointsFor(fp, -1)
}

// setFailpointsFor is setFailpoints for the next kills SIGKILLs only; the starts after them
// run clean. A point on a path a process takes many times at once kills nearly every start once
// work backs up behind the kills (the sweeper expires 16 orders at a time: a point at 0.2 lets
// a page of 16 through once in 35 starts), and a role that never finishes its work proves
// nothing about finishing it.
func (r *role) setFailpointsFor(fp string, kills int) {
	r.mu.Lock()
	r.failpoints, r.killsLeft = fp, kills
	r.mu.Unlock()
}

// stop ends the supervision and the process: SIGTERM, or SIGKILL when kill is set.
func (r *role) stop(kill bool) error {
	r.mu.Lock()
	if r.cur == nil || r.stopping {
		r.mu.Unlock()
		return nil
	}
	r.stopping = true
	p := r.cur
	r.mu.Unlock()
	var err error
	if kill {
		p.Kill()
	} else {
		err = stopRole(p, 30*time.Second)
	}
	<-r.supervisor
	if kill || errors.Is(err, errKilledFirst) {
		r.mu.Lock()
		if !kill {
			r.kills++
			r.killsLeft--
		}
		after := r.afterKill
		r.mu.Unlock()
		if after != nil { // the supervisor has gone: the dead process is ours to clean up after
			after()
		}
		err = nil
	}
	return err
}

// restart stops the role cleanly and starts it again under supervision.
func (r *role) restart(t *testing.T) error {
	err := r.stop(false)
	r.mu.Lock()
	r.stopping = false
	r.mu.Unlock()
	r.start(t)
	return err
}

func (r *role) counts() (starts, kills int, exits []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.starts, r.kills, append([]string(nil), r.exits...)
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// -------------------------------------------------------------------- private servers --

// services is a private set of servers started through deploy/local/services.sh on ports of
// its own, in a directory of its own: a test may stop, kill and wipe them without disturbing
// the tests that share the servers of `make test`.
type services struct {
	env   []string
	ports map[string]int
	dir   string

	ready    chan struct{} // closed when the first start has ended
	startErr error
	started  string // how long the first start took
}

const servicesScript = "deploy/local/services.sh"

// privateServices starts the named services (redis, postgres, kafka) on free ports and cleans
// them up when the test ends, failed or not. The script's watchdog cleans them up too if this
// process dies before its cleanup runs (a -timeout panic).
func privateServices(t *testing.T, names ...string) *services {
	t.Helper()
	s := startServices(t, names...)
	s.wait(t)
	return s
}

// startServices is privateServices that returns at once: a test calls it before t.Parallel, so
// a JVM boots while the sequential tests run, and waits for the servers after.
func startServices(t *testing.T, names ...string) *services {
	t.Helper()
	dir, err := os.MkdirTemp("", "seckill-services-")
	if err != nil {
		t.Fatal(err)
	}
	s := &services{dir: dir, ports: map[string]int{}, ready: make(chan struct{})}
	for _, name := range []string{"redis", "postgres", "kafka", "kafka-controller"} {
		s.ports[name] = freePort(t)
	}
	s.env = []string{
		"SECKILL_SERVICES_DIR=" + dir,
		"SECKILL_REDIS_PORT=" + strconv.Itoa(s.ports["redis"]),
		"SECKILL_POSTGRES_PORT=" + strconv.Itoa(s.ports["postgres"]),
		"SECKILL_KAFKA_PORT=" + strconv.Itoa(s.ports["kafka"]),
		"SECKILL_KAFKA_CONTROLLER_PORT=" + strconv.Itoa(s.ports["kafka-controller"]),
		"SECKILL_SERVICES_OWNER_PID=" + strconv.Itoa(os.Getpid()),
	}
	t.Cleanup(func() {
		<-s.ready // never clean up under a start that is still running
		if t.Failed() {
			if out, err := s.run("logs"); err == nil {
				t.Logf("private services' logs:\n%s", out)
			}
		}
		if out, err := s.run("clean"); err != nil {
			t.Errorf("services.sh clean: %v\n%s", err, out)
		}
	})
	go func() {
		defer close(s.ready)
		start := time.Now()
		out, err := s.run(append([]string{"start"}, names...)...)
		if err != nil {
			s.startErr = fmt.Errorf("private services %v: %v\n%s", names, err, out)
			return
		}
		s.started = fmt.Sprintf("private %v started in %v (redis :%d, postgres :%d, kafka :%d)", names, time.Since(start).Round(time.Millisecond),
			s.ports["redis"], s.ports["postgres"], s.ports["kafka"])
	}()
	return s
}

// wait waits until the servers answer, and fails the test if they did not come up.
func (s *services) wait(t *testing.T) {
	t.Helper()
	<-s.ready
	if s.startErr != nil {
		t.Fatal(s.startErr)
	}
	t.Log(s.started)
}

func (s *services) run(args ...string) (string, error) {
	cmd := exec.Command(servicesScript, args...)
	cmd.Env = append(os.Environ(), s.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// do runs a per-service command (start, stop, kill, clean) and returns how long it took.
func (s *services) do(t *testing.T, verb, name string) time.Duration {
	t.Helper()
	start := time.Now()
	if out, err := s.run(verb, name); err != nil {
		t.Fatalf("services.sh %s %s: %v\n%s", verb, name, err, out)
	}
	return time.Since(start)
}

func (s *services) redisURL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.ports["redis"]) }

func (s *services) postgresURL() string {
	return fmt.Sprintf("postgres://seckill:seckill@127.0.0.1:%d/seckill?sslmode=disable", s.ports["postgres"])
}

func (s *services) brokers() []string { return []string{fmt.Sprintf("127.0.0.1:%d", s.ports["kafka"])} }

func freePort(t *testing.T) int {
	t.Helper()
	_, port, _ := strings.Cut(freeAddr(t), ":")
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// freeAddr returns a loopback address with a port nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := bench.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// ---------------------------------------------------------------------------- cluster --

// where says which servers a cluster runs on: the shared test servers unless a private one is
// given.
type where struct {
	redisURL    string
	postgresURL string
	brokers     []string
}

// cluster is the three roles as supervised OS processes on one set of servers, with topics and
// (on the shared PostgreSQL) a schema of their own.
type cluster struct {
	bin    string
	logDir string
	conn   []string // the connection flags every command gets
	topics events.Topics
	where  where

	base        string // the first api's URL
	bases       []string
	admin       string
	store       *store.Store
	redis       *lua.Redis
	kcl         *kgo.Client // the test's own Kafka client
	adm         *kadm.Client
	http        *http.Client
	api         *role // the first of each
	consumer    *role
	compensator *role
	apis        []*role
	consumers   []*role
	comps       []*role
}

// roles returns every role of the cluster.
func (c *cluster) roles() []*role { return slices.Concat(c.apis, c.consumers, c.comps) }

// clusterOptions are the roles' settings that differ between tests.
type clusterOptions struct {
	reservationTTL time.Duration // default 1m
	sweepInterval  time.Duration // default 200ms
	rebuildGrace   time.Duration // default 2s
	batchSize      int           // default 100
	race           bool          // run the roles on raceBinary

	// How many processes of each role (default 1 each); apis listen on addresses of their own.
	apis, consumers, compensators int
	replication                   int           // of the topics the api creates; default 1
	drainDelay                    time.Duration // the apis' --drain-delay; default 500ms
	apiArgs, consumerArgs         []string      // more flags for every api, every consumer
}

func newCluster(t *testing.T, w where, o clusterOptions) *cluster {
	t.Helper()
	if o.reservationTTL == 0 {
		o.reservationTTL = time.Minute
	}
	if o.sweepInterval == 0 {
		o.sweepInterval = 200 * time.Millisecond
	}
	if o.rebuildGrace == 0 {
		o.rebuildGrace = 2 * time.Second
	}
	if o.batchSize == 0 {
		o.batchSize = 100
	}
	o.apis, o.consumers, o.compensators = max(o.apis, 1), max(o.consumers, 1), max(o.compensators, 1)
	o.replication = max(o.replication, 1)
	if o.drainDelay == 0 {
		o.drainDelay = 500 * time.Millisecond
	}
	if w.redisURL == "" {
		luatest.MustRedis(t) // fails with the reason when the shared Redis is missing
		w.redisURL = os.Getenv(luatest.RedisEnv)
	}
	if w.postgresURL == "" {
		w.postgresURL = storetest.PostgresURL(t)
	}
	if w.brokers == nil {
		w.brokers = kafkatest.Real(t)
	}
	c := &cluster{
		bin:    seckillBinary(t, o.race),
		logDir: t.TempDir(),
		topics: kafkatest.Topics(t, w.brokers),
		where:  w,
		admin:  "admin-" + events.NewID(),
		http: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
			MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second}},
	}
	c.conn = []string{
		"--redis-url", w.redisURL,
		"--postgres-url", w.postgresURL,
		"--kafka-brokers", strings.Join(w.brokers, ","),
		"--topic-prefix", c.topics.Prefix,
		"--log-format", "text",
	}
	if out, err := exec.Command(c.bin, append([]string{"migrate"}, connFor([]string{"migrate"}, c.conn)...)...).CombinedOutput(); err != nil {
		t.Fatalf("seckill migrate: %v\n%s", err, out)
	}
	c.store = storetest.MustOpen(t, w.postgresURL)
	opt, err := redisurl.Parse(w.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	c.redis = lua.New(opt.NewClient())
	t.Cleanup(func() { c.redis.Close() })
	kcl, err := kgo.NewClient(kgo.SeedBrokers(w.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcl.Close)
	c.kcl, c.adm = kcl, kadm.NewClient(kcl)

	// The first of each role is named after the role alone, so that its log is <role>.log.
	name := func(role string, i int) string {
		if i == 0 {
			return role
		}
		return fmt.Sprintf("%s-%d", role, i+1)
	}
	for i := range o.apis {
		base := "http://" + freeAddr(t)
		c.bases = append(c.bases, base)
		c.apis = append(c.apis, &role{name: name("api", i), c: c, args: func() []string {
			return append([]string{"api", "--addr", strings.TrimPrefix(base, "http://"), "--metrics-addr", "127.0.0.1:0", "--admin-token", c.admin,
				"--insecure-user-header", "--user-rate", "0", "--ip-rate", "0", "--drain-delay", o.drainDelay.String(),
				"--partitions", "3", "--replication", strconv.Itoa(o.replication), "--reservation-ttl", o.reservationTTL.String()}, o.apiArgs...)
		}})
	}
	for i := range o.consumers {
		c.consumers = append(c.consumers, &role{name: name("consumer", i), c: c, args: func() []string {
			return append([]string{"consumer", "--metrics-addr", "127.0.0.1:0", "--batch-size", strconv.Itoa(o.batchSize)}, o.consumerArgs...)
		}})
	}
	for i := range o.compensators {
		c.comps = append(c.comps, &role{name: name("compensator", i), c: c, args: func() []string {
			return []string{"compensator", "--metrics-addr", "127.0.0.1:0", "--sweep-interval", o.sweepInterval.String(),
				"--rebuild-grace", o.rebuildGrace.String()}
		}})
	}
	c.base, c.api, c.consumer, c.compensator = c.bases[0], c.apis[0], c.consumers[0], c.comps[0]
	t.Cleanup(func() {
		for _, r := range c.roles() {
			if err := r.stop(false); err != nil {
				t.Errorf("%v; its log ends:\n%s", err, tail(filepath.Join(c.logDir, r.name+".log"), 15))
			}
			_, _, exits := r.counts()
			for _, e := range exits {
				t.Error(e)
			}
			for _, race := range raceReports(filepath.Join(c.logDir, r.name+".log")) {
				t.Errorf("%s: %s", r.name, race)
			}
		}
		if t.Failed() {
			for _, r := range c.roles() {
				t.Logf("%s log ends:\n%s", r.name, tail(filepath.Join(c.logDir, r.name+".log"), 25))
			}
		}
	})
	for _, r := range c.roles() {
		r.start(t)
	}
	for _, base := range c.bases {
		c.waitReady(t, base, 30*time.Second)
	}
	return c
}

func (c *cluster) waitAPI(t *testing.T, within time.Duration) {
	t.Helper()
	c.waitReady(t, c.base, within)
}

// waitReady waits until the api at base answers /readyz with 200.
func (c *cluster) waitReady(t *testing.T, base string, within time.Duration) {
	t.Helper()
	eventually(t, within, "the api at "+base+" is ready", func() bool { return c.ready(base) })
}

func (c *cluster) ready(base string) bool {
	resp, err := c.http.Get(base + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// createCampaign creates a campaign through the api.
func (c *cluster) createCampaign(t *testing.T, stock, limit int) string {
	t.Helper()
	return c.createNamed(t, storetest.Name("fault"), stock, limit)
}

// createNamed creates the campaign id through the api.
func (c *cluster) createNamed(t *testing.T, id string, stock, limit int) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"id": id, "name": "Fault test", "stock": stock, "per_user_limit": limit})
	req, _ := http.NewRequest("POST", c.base+"/v1/campaigns", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.admin)
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatalf("create campaign: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("create campaign: %d %s", resp.StatusCode, b)
	}
	return id
}

// answer is what one purchase request got.
type answer struct {
	status  int    // 0: no answer (the connection failed: the api died or is down)
	code    string // error.code of an error answer
	orderID string // of a 202
	err     error  // of a request without an answer
	took    time.Duration
	started time.Time
}

// buy sends one purchase to the first api; key is its Idempotency-Key, "" for none.
func (c *cluster) buy(ctx context.Context, campaign, user string, qty int, key string) answer {
	return c.buyAt(ctx, c.base, campaign, user, qty, key)
}

// buyAt sends one purchase to the api at base.
func (c *cluster) buyAt(ctx context.Context, base, campaign, user string, qty int, key string) answer {
	header := []string{"X-User-ID", user}
	if key != "" {
		header = append(header, "Idempotency-Key", key)
	}
	return c.send(ctx, "POST", base+"/v1/campaigns/"+campaign+"/purchases", fmt.Sprintf(`{"quantity":%d}`, qty), header...)
}

// send sends a request with a JSON body and the headers given as name, value pairs, and
// records its answer: the order id of an order, the code of an error.
func (c *cluster) send(ctx context.Context, method, url, body string, header ...string) answer {
	start := time.Now()
	a := answer{started: start}
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		a.err = err
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.http.Do(req)
	a.took = time.Since(start)
	if err != nil {
		a.err = err
		return a
	}
	defer resp.Body.Close()
	a.status = resp.StatusCode
	var b struct {
		OrderID string `json:"order_id"`
		Error   struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		a.err = fmt.Errorf("status %d, undecodable body: %w", resp.StatusCode, err)
		return a
	}
	a.orderID, a.code = b.OrderID, b.Error.Code
	return a
}

// ledger records every answer of a load, by kind, safely from many goroutines.
type ledger struct {
	mu       sync.Mutex
	requests int
	accepted map[string]string // order id -> user, of every 202
	byKind   map[string]int    // "202", "409 sold_out", "503 unavailable", "no answer", ...
	odd      []string          // answers no story allows
	answers  []answer          // all of them, for the tests that judge an answer by its time
}

func newLedger() *ledger {
	return &ledger{accepted: map[string]string{}, byKind: map[string]int{}}
}

// add records a; allowed says whether an error answer is one the story expects.
func (l *ledger) add(a answer, user string, allowed func(a answer) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests++
	l.answers = append(l.answers, a)
	switch {
	case a.status == 0:
		l.byKind["no answer"]++
	case a.status == http.StatusAccepted:
		l.byKind["202"]++
		if a.orderID == "" {
			l.odd = append(l.odd, "202 without an order id")
		} else if prev, ok := l.accepted[a.orderID]; ok && prev != user {
			l.odd = append(l.odd, fmt.Sprintf("order %s answered to %s and %s", a.orderID, prev, user))
		}
		l.accepted[a.orderID] = user
	default:
		kind := fmt.Sprintf("%d %s", a.status, a.code)
		l.byKind[kind]++
		if !allowed(a) {
			l.odd = append(l.odd, kind)
		}
	}
}

func (l *ledger) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	kinds := make([]string, 0, len(l.byKind))
	for k, n := range l.byKind {
		kinds = append(kinds, fmt.Sprintf("%s: %d", k, n))
	}
	slices.Sort(kinds)
	return fmt.Sprintf("%d requests (%s)", l.requests, strings.Join(kinds, ", "))
}

// between returns the answers to requests that started at or after from and ended before to.
func (l *ledger) between(from, to time.Time) []answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []answer
	for _, a := range l.answers {
		if !a.started.Before(from) && a.started.Add(a.took).Before(to) {
			out = append(out, a)
		}
	}
	return out
}

// kinds counts answers by kind, as the ledger does.
func kinds(as []answer) map[string]int {
	m := map[string]int{}
	for _, a := range as {
		switch {
		case a.status == 0:
			m["no answer"]++
		case a.code == "":
			m[strconv.Itoa(a.status)]++
		default:
			m[fmt.Sprintf("%d %s", a.status, a.code)]++
		}
	}
	return m
}

// refusals are the error answers of an ordinary sale.
func refusals(a answer) bool {
	return a.status == http.StatusConflict && (a.code == "sold_out" || a.code == "limit_exceeded")
}

// load runs workers goroutines that call next until ctx is done. next gets a context that is
// never canceled: a request in flight when the load stops gets its answer, or the ledger would
// count an order the test itself cut off as one without an answer.
func load(ctx context.Context, workers int, next func(ctx context.Context, worker, i int)) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				next(context.WithoutCancel(ctx), w, i)
			}
		}()
	}
	return &wg
}

// -------------------------------------------------------------------- settling and checks --

// settle waits until every reservation of the campaign is final in Redis and the consumer and
// the compensator have nothing left to read.
func (c *cluster) settle(t *testing.T, campaign string, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	var state string
	deadline := time.Now().Add(within)
	for {
		pending, err := c.redis.Client().ZCard(ctx, lua.KeysOf(campaign).Pending).Result()
		consumer, err1 := events.Lag(ctx, c.adm, c.topics.Requested, c.topics.ConsumerGroup())
		dlq, err2 := events.Lag(ctx, c.adm, c.topics.DLQ, c.topics.CompensatorGroup())
		// A rebuild under way (or one the guard has yet to start after a failover) is not
		// settled: its campaign is frozen, or on a run id it was not written on.
		gens, err3 := c.redis.Generations(ctx, []string{campaign})
		g := gens[campaign]
		rebuilding := g.Frozen || g.Lost()
		if err == nil && err1 == nil && err2 == nil && err3 == nil && pending == 0 && consumer == 0 && dlq == 0 && !rebuilding {
			return
		}
		state = fmt.Sprintf("%d reservations pending (%v), consumer lag %d (%v), compensator lag %d (%v), rebuild under way %v (%v)",
			pending, err, consumer, err1, dlq, err2, rebuilding, err3)
		if time.Now().After(deadline) {
			t.Fatalf("%s has not settled within %v: %s%s", campaign, within, state, c.describePending(campaign))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// describePending tells what the store says of the first pending reservations, for a failure.
func (c *cluster) describePending(campaign string) string {
	ctx := context.Background()
	ids, err := c.redis.Client().ZRangeWithScores(ctx, lua.KeysOf(campaign).Pending, 0, 4).Result()
	if err != nil || len(ids) == 0 {
		return ""
	}
	now, _ := c.redis.Now(ctx, campaign)
	var b strings.Builder
	b.WriteString("; first pending:")
	for _, z := range ids {
		id := z.Member.(string)
		o, err := c.store.Order(ctx, id)
		fmt.Fprintf(&b, "\n  %s deadline %+dms from now, store: %q %s %v", id, int64(z.Score)-now, o.Status, o.Reason, err)
		if o.Status == events.Confirmed {
			b.WriteString(" (confirmed in the store, but the consumer did not confirm it in Redis: only the sweeper will, at its deadline)")
		}
	}
	return b.String()
}

// audit runs `seckill audit --campaign` and fails the test unless every invariant holds.
func (c *cluster) audit(t *testing.T, campaign string) string {
	t.Helper()
	out, err := c.runAudit(campaign)
	if err != nil {
		t.Errorf("seckill audit --campaign %s: %v\n%s", campaign, err, out)
	}
	return out
}

func (c *cluster) runAudit(campaign string) (string, error) {
	args := append([]string{"audit"}, connFor([]string{"audit"}, c.conn)...)
	if campaign != "" {
		args = append(args, "--campaign", campaign)
	}
	out, err := exec.Command(c.bin, args...).CombinedOutput()
	return string(out), err
}

// finalState is a settled campaign as checkFinal found it.
type finalState struct {
	stock, limit, remaining, sold int64
	confirmedUnits                int64
	buyers                        int // who hold units
	orders                        map[string]store.Order
	reservations                  map[string]lua.Reservation
	byReason                      map[string]int
}

// checkFinal compares the state of a settled campaign in Redis and in the store, reservation by
// reservation: every reservation is confirmed or released, matching the store's confirmed or
// failed row; stock is conserved; nobody holds more than the limit, and every count agrees.
func (c *cluster) checkFinal(t *testing.T, campaign string) finalState {
	t.Helper()
	ctx := context.Background()
	camp, err := c.store.Campaign(ctx, campaign)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := c.redis.Snapshot(ctx, campaign)
	if err != nil {
		t.Fatal(err)
	}
	orders, err := c.store.Orders(ctx, campaign)
	if err != nil {
		t.Fatal(err)
	}
	holdings, err := c.store.Holdings(ctx, campaign)
	if err != nil {
		t.Fatal(err)
	}
	f := finalState{stock: camp.Stock, limit: camp.PerUserLimit, remaining: snap.Remaining, sold: camp.Sold,
		orders: map[string]store.Order{}, reservations: map[string]lua.Reservation{}, byReason: map[string]int{}}
	byUser := map[string]int64{}
	for _, o := range orders {
		f.orders[o.OrderID] = o
		switch o.Status {
		case events.Confirmed, events.Paid:
			f.confirmedUnits += o.Quantity
			byUser[o.UserID] += o.Quantity
			f.byReason["confirmed"]++
		case events.Failed:
			f.byReason["failed "+o.Reason]++
		default:
			f.byReason[string(o.Status)]++
		}
	}
	if !snap.Exists || snap.Frozen {
		t.Errorf("%s in redis: exists %v, frozen %v", campaign, snap.Exists, snap.Frozen)
	}
	var bad []string
	for _, res := range snap.Reservations {
		f.reservations[res.OrderID] = res
		o, ok := f.orders[res.OrderID]
		want := map[events.Status]string{events.Confirmed: "confirmed", events.Paid: "confirmed", events.Failed: "released",
			events.Refunded: "refunded", events.Expired: "expired"}[o.Status]
		if !ok || res.State != want {
			bad = append(bad, fmt.Sprintf("%s is %s in redis, %q in the store", res.OrderID, res.State, o.Status))
		}
	}
	// A row without a reservation is an order whose reservation Redis lost (a rebuild keeps the
	// confirmed ones only) or never had: failed is the only state it may have then.
	for id, o := range f.orders {
		if _, ok := f.reservations[id]; !ok && o.Status != events.Failed {
			bad = append(bad, fmt.Sprintf("%s is %s in the store but redis has no reservation", id, o.Status))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d reservations disagree with the store (first: %s)", len(bad), bad[0])
	}
	if f.sold > f.stock || f.remaining < 0 {
		t.Errorf("oversold: sold %d of %d, remaining %d", f.sold, f.stock, f.remaining)
	}
	if f.sold != f.confirmedUnits {
		t.Errorf("store: sold %d but confirmed orders hold %d units", f.sold, f.confirmedUnits)
	}
	if f.remaining+f.confirmedUnits != f.stock {
		t.Errorf("conservation: remaining %d + confirmed %d != stock %d (a release ran twice, or not at all)", f.remaining, f.confirmedUnits, f.stock)
	}
	var over []string
	for u, n := range byUser {
		if n > f.limit || holdings[u] != n || snap.Buyers[u] != n {
			over = append(over, fmt.Sprintf("%s: confirmed %d, purchases %d, redis %d, limit %d", u, n, holdings[u], snap.Buyers[u], f.limit))
		}
	}
	for u, n := range snap.Buyers {
		if n != byUser[u] {
			over = append(over, fmt.Sprintf("%s: redis counts %d, confirmed %d", u, n, byUser[u]))
		}
	}
	if len(over) > 0 {
		t.Errorf("%d buyers' counts are wrong (first: %s)", len(over), over[0])
	}
	f.buyers = len(byUser)
	return f
}

// evictGroup removes every member of the consumer group. It runs after the only consumer was
// killed: a dead member stays in its group until its session times out (45s by default), and
// the next consumer's join waits for it all that time. Kafka's LeaveGroup on the dead member's
// behalf is what the coordinator would do once the session expired, just sooner.
func (c *cluster) evictGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	group := c.topics.ConsumerGroup()
	described, err := c.adm.DescribeGroups(ctx, group)
	if err != nil {
		t.Logf("describe group %s: %v", group, err)
		return
	}
	g, ok := described[group]
	if !ok || len(g.Members) == 0 {
		return
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = group
	for _, m := range g.Members {
		lm := kmsg.NewLeaveGroupRequestMember()
		lm.MemberID = m.MemberID
		reason := "killed by a fault test"
		lm.Reason = &reason
		req.Members = append(req.Members, lm)
	}
	if _, err := req.RequestWith(ctx, c.kcl); err != nil {
		t.Logf("leave group %s for its dead members: %v", group, err)
	}
}

// lagOf returns the consumer's lag on the requested topic.
func (c *cluster) lagOf(ctx context.Context) (int64, error) {
	return events.Lag(ctx, c.adm, c.topics.Requested, c.topics.ConsumerGroup())
}

// resultsConfirmed returns the order ids that OrderConfirmed events on the results topic name.
func (c *cluster) resultsConfirmed(t *testing.T) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.where.brokers...), kgo.ConsumeTopics(c.topics.Results),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	ends, err := c.adm.ListEndOffsets(ctx, c.topics.Results)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	got := map[string]int{}
	deadline := time.Now().Add(30 * time.Second)
	for len(want) > 0 && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= want[r.Partition] {
				delete(want, r.Partition)
			}
			e, err := events.Decode(r.Value)
			if err == nil && e.Type == events.OrderConfirmed {
				got[e.OrderID]++
			}
		})
	}
	if len(want) > 0 {
		t.Fatalf("could not read the results topic to its end: %v left", want)
	}
	return got
}

// lines counts the lines of s that contain sub.
func lines(s, sub string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if strings.Contains(sc.Text(), sub) {
			n++
		}
	}
	return n
}

// isRefused reports whether err is a connection the api refused: it is down, being restarted.
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// TestRaceReports: a race report in a role's log is found whole, and a clean log has none.
func TestRaceReports(t *testing.T) {
	dir := t.TempDir()
	clean, racy := filepath.Join(dir, "clean.log"), filepath.Join(dir, "racy.log")
	os.WriteFile(clean, []byte("level=INFO msg=\"api listening\"\n"), 0o644)
	os.WriteFile(racy, []byte("level=INFO msg=started\n==================\nWARNING: DATA RACE\nWrite at 0x00c by goroutine 7:\n  main.f()\n==================\nlevel=INFO msg=stopped\n"), 0o644)
	if got := raceReports(clean); len(got) != 0 {
		t.Errorf("clean log: %q", got)
	}
	got := raceReports(racy)
	if len(got) != 1 || !strings.Contains(got[0], "Write at 0x00c by goroutine 7") || strings.Contains(got[0], "stopped") {
		t.Errorf("racy log: %q", got)
	}
}
