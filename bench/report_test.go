package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeResult is a run with every kind of scenario, as Run would leave it.
func fakeResult() *Result {
	load := func(rps, p99 float64, outcomes map[string]int64) *LoadResult {
		return &LoadResult{Throughput: rps, Outcomes: outcomes, Latency: Latency{Count: 100, P50: 1, P99: p99, P999: p99 * 2, Max: 50},
			Timeline: []Point{{T: 0.25, Rate: rps, OK: rps / 2, P50: 1, P99: p99, P999: 2 * p99}, {T: 0.5, Rate: rps * 1.1, OK: rps / 2, P50: 1.2, P99: p99, P999: 3 * p99}}}
	}
	r := &Result{
		Started: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), Command: "seckill bench --quick", Identity: "jwt",
		Host: Host{CPUs: 2, CPU: "Test CPU", MemoryGiB: 24, Go: "go1.26"}, Sizes: QuickSizes(),
		Notes: []string{"a note <with markup>"},
	}
	add := func(name string, baseline bool, unit string, thr float64, l *LoadResult) *ScenarioResult {
		s := ScenarioResult{Name: name, Baseline: baseline, Unit: unit, Throughput: thr, Load: l, What: "what " + name}
		if l != nil {
			s.Latency = l.Latency
		}
		r.Scenarios = append(r.Scenarios, s)
		return &r.Scenarios[len(r.Scenarios)-1]
	}
	add(ScConstant, true, "req/s", 40000, load(40000, 5, map[string]int64{"202": 100}))
	so := add(ScSoldOut, false, "req/s", 36000, load(36000, 6, map[string]int64{"409 sold_out": 100}))
	so.CPU = map[string]float64{"api": 7.1, "bench": 1}
	so.setCPUPerOp(100_000)
	add(ScBareReserve, true, "req/s", 20000, load(20000, 9, map[string]int64{"202": 100}))
	add(ScRedisCeiling, true, "EVALSHA/s", 50000, nil).Redis = &RedisCeiling{Requests: 1000, Clients: 256, Throughput: 50000}
	add(ScAllAccept, false, "req/s", 10000, load(10000, 30, map[string]int64{"202": 100}))
	add(ScSyncDB, true, "req/s", 2000, load(2000, 300, map[string]int64{"202": 10, "409 sold_out": 90}))
	fc := add(ScFlashCrowd, false, "req/s", 30000, load(30000, 12, map[string]int64{"202": 10, "409 sold_out": 90}))
	fc.Load.Requests, fc.Load.Elapsed = 100, 0.5
	fc.Flash = &FlashResult{Stock: 10, Limit: 1, Accepted: 10, Sold: 10, Confirmed: 10, OK: true, SoldOutAfter: 0.1, PersistedAfter: 0.9,
		Persisted: []DrainPoint{{T: 0.1, Done: 2}, {T: 0.5, Done: 10}}}
	add(ScIdleConns, false, "MB", 120, nil).Idle = &IdleResult{Connections: 10000, RSSBefore: 40, RSSAfter: 120}
	add(ScDrain, false, "orders/s", 20000, nil).Drain = &DrainResult{Events: 1000, Persisted: 1000, BatchSize: 500, Batches: 2, CampaignUpdates: 1000,
		Timeline: []DrainPoint{{T: 1, Rate: 500, Done: 500, Lag: 500}, {T: 2, Rate: 500, Done: 1000, Lag: 0}}}
	add(ScRowAtATime, true, "orders/s", 1000, nil).Drain = &DrainResult{Events: 100, Persisted: 100, BatchSize: 1}
	un := add(ScAllAcceptUnpaced, false, "req/s", 8000, load(8000, 40, map[string]int64{"202": 100_000}))
	un.CPU = map[string]float64{"api": 5, "redis": 3, "bench": 1}
	un.setCPUPerOp(100_000)
	r.Scenarios = append(r.Scenarios, ScenarioResult{Name: "broken", Error: "it broke\nbadly"})
	r.Profiles = []Profile{{Scenario: ScAllAccept, Process: "api", Kind: "cpu", Unit: "nanoseconds", Seconds: 5, Total: 2e9,
		Flat: []TopRow{{Func: "syscall.Syscall6", Flat: 1e9, FlatPct: 50, Cum: 1e9, CumPct: 50}},
		Cum:  []TopRow{{Func: "net/http.(*conn).serve", Flat: 0, Cum: 2e9, CumPct: 100}}}}
	r.ComputeTargets()
	return r
}

func TestTargets(t *testing.T) {
	r := fakeResult()
	want := map[string]string{
		"sold-out / constant": "PASS", "all-accept / bare-reserve": "FAIL", "all-accept 503 answers": "PASS",
		"flash-crowd / constant": "FAIL", "flash-crowd p99 / constant p99": "FAIL", "flash-crowd sold": "PASS",
		"drain": "FAIL", "drain / row-at-a-time": "PASS", "drain campaign updates per batch": "FAIL",
		"CPU per order (all-accept-unpaced)": "PASS", "api RSS per idle connection": "PASS",
		"flash-crowd / sync-db": "info", "all-accept / redis-ceiling": "info",
	}
	if len(r.Targets) != len(want) {
		t.Fatalf("%d targets, want %d", len(r.Targets), len(want))
	}
	got := map[string]Target{}
	for _, tg := range r.Targets {
		got[tg.Name] = tg
		if tg.Verdict() != want[tg.Name] {
			t.Errorf("%s: %s (got %s, want %s), expected %s", tg.Name, tg.Verdict(), tg.GotString(), tg.WantString(), want[tg.Name])
		}
	}
	for name, v := range map[string]float64{
		"all-accept / bare-reserve": 0.5, "flash-crowd / constant": 0.75, "flash-crowd p99 / constant p99": 2.4,
		"CPU per order (all-accept-unpaced)": 80, "flash-crowd / sync-db": 15,
	} {
		if g := got[name].Got; g < v-1e-9 || g > v+1e-9 {
			t.Errorf("%s = %v, want %v", name, g, v)
		}
	}
	empty := &Result{}
	empty.ComputeTargets()
	for _, tg := range empty.Targets {
		t.Errorf("a run without scenarios has target %s", tg.Name)
	}
	noFigures := &Result{Scenarios: []ScenarioResult{{Name: "broken", Error: "x"}}}
	noFigures.ComputeTargets()
	for _, tg := range noFigures.Targets {
		if v := tg.Verdict(); v != "n/a" || tg.GotString() != "–" {
			t.Errorf("%s without figures: %s %s", tg.Name, v, tg.GotString())
		}
	}
}

// TestTargetsMedianOfRounds: a target is judged on the median of its rounds, which the report
// shows in the order they ran; one slow round does not flip it.
func TestTargetsMedianOfRounds(t *testing.T) {
	r := &Result{}
	for round, ratio := range []float64{0.9, 1.1, 1.05} {
		r.Scenarios = append(r.Scenarios,
			ScenarioResult{Name: ScAllAccept, Round: round + 1, Throughput: 10000 * ratio, Load: &LoadResult{Outcomes: map[string]int64{"202": 1}}},
			ScenarioResult{Name: ScBareReserve, Round: round + 1, Baseline: true, Throughput: 10000})
	}
	r.ComputeTargets()
	var tg Target
	for _, x := range r.Targets {
		if x.Name == "all-accept / bare-reserve" {
			tg = x
		}
	}
	if tg.Verdict() != "PASS" || tg.GotString() != "1.05×" || tg.Spread() != "0.90× 1.10× 1.05×" {
		t.Errorf("median of 0.90, 1.10, 1.05: %s %s (%s)", tg.Verdict(), tg.GotString(), tg.Spread())
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of an even count = %v, want 2.5", got)
	}
}

func TestReports(t *testing.T) {
	r := fakeResult()
	dir := t.TempDir()
	jsonPath, err := r.Save(dir, "stamp")
	if err != nil {
		t.Fatal(err)
	}
	back, err := LoadResultFile(jsonPath)
	if err != nil || len(back.Scenarios) != len(r.Scenarios) || back.Scenarios[6].Flash == nil {
		t.Fatalf("round trip: %v", err)
	}
	htmlPath, err := r.WriteHTML(dir, "stamp")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(htmlPath)
	for _, want := range []string{"<svg", "polyline", "all-accept / bare-reserve", "FAIL", "PASS", "CORRECT", "net/http.(*conn).serve",
		"consumer group lag", "orders confirmed in PostgreSQL", "failed: it broke", "a note &lt;with markup&gt;", flashTimes} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("the report lacks %q", want)
		}
	}
	for _, never := range []string{"<script", "http://", "https://"} {
		if bytes.Contains(page, []byte(never)) {
			t.Errorf("the report is not self-contained: it has %q", never)
		}
	}
	var table bytes.Buffer
	r.WriteTable(&table)
	for _, want := range []string{"flash-crowd", "30,000", "409 sold_out 90", "PASS", "CORRECT", "failed: it broke", "10,000 conns", "api 71µs", flashTimes} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, table.String())
		}
	}
}

// flashTimes is fakeResult's flash crowd in words: 10 accepts in its first 0.1s, 90 refusals in
// the other 0.4s.
const flashTimes = "sold out after 0.10s, 10 accepted at 100/s, the other 90 answered at 225/s; every confirmed order in PostgreSQL after 0.90s"

func TestFlashTimesWithoutASellOut(t *testing.T) {
	s := ScenarioResult{Load: &LoadResult{Requests: 50, Elapsed: 2, Throughput: 25}, Flash: &FlashResult{Accepted: 50}}
	if got, want := s.FlashTimes(), "never sold out; 50 accepted at 25/s; every confirmed order in PostgreSQL after (not within the wait)"; got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if got := (ScenarioResult{Load: s.Load}).FlashTimes(); got != "" {
		t.Fatalf("a scenario that is not a flash crowd: %q", got)
	}
}

func TestUpdateReadme(t *testing.T) {
	path := filepath.Join(t.TempDir(), "README.md")
	os.WriteFile(path, []byte("# x\n\n## Performance\n\n"+ReadmeBegin+"\nold table\n"+ReadmeEnd+"\n\nafter\n"), 0o644)
	md := fakeResult().Markdown("bench/results/stamp.json", "bench/results/stamp.html")
	if err := UpdateReadme(path, md); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	s := string(b)
	if strings.Contains(s, "old table") || !strings.Contains(s, "| all-accept / bare-reserve | 0.50× |  | ≥ 1.00× | FAIL |") ||
		!strings.HasSuffix(s, ReadmeEnd+"\n\nafter\n") || !strings.Contains(s, "`seckill bench --quick`") ||
		!strings.Contains(s, "flash-crowd: "+flashTimes+". CORRECT") {
		t.Fatalf("README:\n%s", s)
	}
	os.WriteFile(path, []byte("no markers"), 0o644)
	if err := UpdateReadme(path, md); err == nil {
		t.Fatal("a README without markers was rewritten")
	}
}

func TestScrapeCounter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "# HELP x\nseckill_consumer_batch_size_sum 1500\nseckill_consumer_batch_size_count 3\n")
	}))
	defer srv.Close()
	n, err := scrapeCounter(context.Background(), srv.URL, "seckill_consumer_batch_size_count")
	if err != nil || n != 3 {
		t.Fatalf("%d %v", n, err)
	}
	if _, err := scrapeCounter(context.Background(), srv.URL, "missing"); err == nil {
		t.Fatal("a missing counter was found")
	}
}

func TestProgressWithoutATerminal(t *testing.T) {
	var b bytes.Buffer
	p := NewProgress(&b)
	p.Logf("hello %d", 1)
	stop := p.Watch("step", 10, func() int64 { return 5 }, func() string { return "detail" })
	stop()
	out := b.String()
	if !strings.Contains(out, "hello 1\n") || !strings.Contains(out, "50% 5/10") || !strings.Contains(out, "detail") {
		t.Fatalf("progress: %q", out)
	}
	b.Reset()
	update, stop := p.Track("grows")
	update(3, 4)
	update(5, 8)
	stop()
	if out := b.String(); !strings.Contains(out, "62% 5/8") {
		t.Fatalf("a growing total: %q", out)
	}
	var nilProgress *Progress
	nilProgress.Logf("ignored")
	nilProgress.Watch("x", 1, nil, nil)()
}

func TestFormatting(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{count(0), "0"}, {count(999), "999"}, {count(1000), "1,000"}, {count(-1234567), "-1,234,567"},
		{fmtMs(0.123), "0.12ms"}, {fmtMs(12.34), "12.3ms"}, {fmtMs(1234), "1234ms"},
		{short(1500), "1.5k"}, {short(2e6), "2M"}, {short(0.01), "0.01"}, {short(20), "20"},
		{fmt.Sprint(niceStep(3.2)), "5"}, {fmt.Sprint(niceStep(0.7)), "1"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{RedisURL: "redis://x", PostgresURL: "postgres://x", Brokers: []string{"x"}, Binary: "b", WorkDir: "w", Sizes: QuickSizes()}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := ok
	bad.Scenarios, bad.Auth, bad.Sizes.Concurrency = []string{"nope"}, "basic", 0
	err := bad.Validate()
	for _, want := range []string{"nope", "basic", "at least 1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	full := FullSizes()
	if full.FlashStock != 10_000 || full.FlashRequests != 200_000 || full.FlashUsers != 100_000 || full.Concurrency != 256 || full.DrainEvents != 1_000_000 {
		t.Errorf("the full sizes are not the issue's: %+v", full)
	}
}

// targetOf returns the named target of r.
func targetOf(t *testing.T, r *Result, name string) Target {
	t.Helper()
	for _, tg := range r.Targets {
		if tg.Name == name {
			return tg
		}
	}
	t.Fatalf("no target %q", name)
	return Target{}
}

// flashRound is a flash crowd of stock 10 in one round, correct unless over is above zero.
func flashRound(round int, over int64) ScenarioResult {
	f := &FlashResult{Stock: 10, Limit: 1, Accepted: 10, Sold: 10, Confirmed: 10, OverLimit: over, OK: over == 0}
	return ScenarioResult{Name: ScFlashCrowd, Round: round, Throughput: 1000, Flash: f,
		Load: &LoadResult{Outcomes: map[string]int64{"202": 10}}}
}

// TestExactTargetsHoldInEveryRound: a count that must be exact (the stock sold, no 503) is
// judged on every round: the median of three rounds' counts hides the one round that sold to a
// buyer over the limit, or refused purchases.
func TestExactTargetsHoldInEveryRound(t *testing.T) {
	r := &Result{Scenarios: []ScenarioResult{flashRound(1, 0), flashRound(2, 1), flashRound(3, 0)}}
	for round, refused := range []int64{0, 7, 0} {
		r.Scenarios = append(r.Scenarios, ScenarioResult{Name: ScAllAccept, Round: round + 1, Throughput: 1000,
			Load: &LoadResult{Outcomes: map[string]int64{"202": 100, "503 unavailable": refused}}})
	}
	r.ComputeTargets()
	sold := targetOf(t, r, "flash-crowd sold")
	if sold.Verdict() != "FAIL" || !strings.Contains(sold.Note, "round 2") || !strings.Contains(sold.Note, "over the limit 1") {
		t.Errorf("round 2 sold to a buyer over the limit: %s, note %q", sold.Verdict(), sold.Note)
	}
	if v := targetOf(t, r, "all-accept 503 answers").Verdict(); v != "FAIL" {
		t.Errorf("round 2 answered 503 seven times: %s", v)
	}
}

// TestTargetsFromTheRoundsThatHadThem: a target's threshold and note come from a round that had
// its figures, not from the first round, whose scenario may have failed; and a note with
// figures speaks of the round whose figure is the median.
func TestTargetsFromTheRoundsThatHadThem(t *testing.T) {
	t.Run("the first round failed", func(t *testing.T) {
		r := &Result{Scenarios: []ScenarioResult{{Name: ScFlashCrowd, Round: 1, Error: "the api did not start"}, flashRound(2, 0), flashRound(3, 0)}}
		r.ComputeTargets()
		if sold := targetOf(t, r, "flash-crowd sold"); sold.Verdict() != "PASS" || sold.WantString() != "= 10 units" {
			t.Errorf("rounds 2 and 3 sold their stock of 10: %s, want %s", sold.Verdict(), sold.WantString())
		}
	})
	t.Run("the median round speaks", func(t *testing.T) {
		r := &Result{}
		for round, p99 := range []float64{40, 12, 30} {
			f := flashRound(round+1, 0)
			f.Latency.P99 = p99
			r.Scenarios = append(r.Scenarios, f,
				ScenarioResult{Name: ScConstant, Round: round + 1, Baseline: true, Throughput: 1000, Latency: Latency{P99: 10}})
		}
		r.ComputeTargets()
		if p99 := targetOf(t, r, "flash-crowd p99 / constant p99"); p99.GotString() != "3.00×" || !strings.Contains(p99.Note, ": 30.0 ms against 10.0 ms") {
			t.Errorf("p99 ratios 4.0, 1.2 and 3.0: %s, note %q", p99.GotString(), p99.Note)
		}
	})
}

// TestCPUPerOrderCountsOrders: the CPU target is per order, from the purchase to the row in
// PostgreSQL: a refused purchase (503, or no answer) is no order, and dividing by every
// request made a run that refused half its purchases look twice as frugal.
func TestCPUPerOrderCountsOrders(t *testing.T) {
	l := &LoadResult{Requests: 100_000, Outcomes: map[string]int64{"202": 50_000, "503 unavailable": 50_000}}
	s := ScenarioResult{Name: ScAllAcceptUnpaced, Round: 1, Throughput: 1000, Load: l,
		CPU: map[string]float64{"api": 8, "postgres": 2, "bench": 5}}
	s.setCPUPerOp(l.Requests) // as httpResult does: the scenario's table shows CPU per request
	r := &Result{Scenarios: []ScenarioResult{s}}
	r.ComputeTargets()
	cpu := targetOf(t, r, "CPU per order (all-accept-unpaced)")
	if cpu.GotString() != "200 µs" || cpu.Verdict() != "FAIL" || !strings.Contains(cpu.Note, "api 160µs · postgres 40µs") {
		t.Errorf("10s of CPU for 50,000 orders: %s %s, note %q", cpu.GotString(), cpu.Verdict(), cpu.Note)
	}
}
