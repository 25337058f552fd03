package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one run of `seckill bench`: what bench/results/<date>.json holds.
type Result struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Command is the command line that produced the result.
	Command string `json:"command"`
	Host    Host   `json:"host"`
	Sizes   Sizes  `json:"sizes"`
	// Identity is how buyers were named: "jwt" or "x-user-id".
	Identity  string           `json:"identity"`
	Scenarios []ScenarioResult `json:"scenarios"`
	Targets   []Target         `json:"targets"`
	Profiles  []Profile        `json:"profiles,omitempty"`
	Notes     []string         `json:"notes,omitempty"`
}

// Host describes the machine the run was on.
type Host struct {
	CPUs      int    `json:"cpus"`
	CPU       string `json:"cpu"`
	MemoryGiB int    `json:"memory_gib"`
	Kernel    string `json:"kernel"`
	Go        string `json:"go"`
	Commit    string `json:"commit,omitempty"`
}

// ScenarioResult is one scenario or baseline.
type ScenarioResult struct {
	Name     string `json:"name"`
	Round    int    `json:"round"` // from 1
	Baseline bool   `json:"baseline"`
	What     string `json:"what"`
	// Throughput is the headline rate, in Unit: requests/s for HTTP scenarios, orders/s for the
	// drains, EVALSHA/s for the Redis ceiling.
	Throughput float64 `json:"throughput"`
	Unit       string  `json:"unit"`
	Latency    Latency `json:"latency"`
	// CPU is the CPU time each process used during the measured part, in seconds.
	CPU map[string]float64 `json:"cpu_s,omitempty"`
	// CPUPerOp is the CPU time each server process used per request (or per order, for the
	// drains), in microseconds: steadier than throughput on a machine that others share.
	CPUPerOp map[string]float64 `json:"cpu_us_per_op,omitempty"`
	// LoadAvg is the machine's one-minute load average when the scenario started: other work
	// on a shared machine shows here.
	LoadAvg float64 `json:"loadavg"`

	Load  *LoadResult   `json:"load,omitempty"`
	Redis *RedisCeiling `json:"redis,omitempty"`
	Drain *DrainResult  `json:"drain,omitempty"`
	Flash *FlashResult  `json:"flash,omitempty"`
	Idle  *IdleResult   `json:"idle,omitempty"`
	Error string        `json:"error,omitempty"`
}

// FlashResult is what the flash crowd sold, checked in the database.
type FlashResult struct {
	Stock    int64 `json:"stock"`
	Limit    int64 `json:"limit"`
	Accepted int64 `json:"accepted"` // 202 answers
	// SoldOutAfter is when the first buyer heard sold_out, in seconds since the first request.
	SoldOutAfter float64 `json:"sold_out_after_s"`
	// PersistedAfter is when every accepted order was confirmed in PostgreSQL, in seconds since
	// the first request (0: not within the wait).
	PersistedAfter float64 `json:"persisted_after_s"`
	Sold           int64   `json:"sold"`            // campaigns.sold
	Confirmed      int64   `json:"confirmed"`       // confirmed order rows
	OverLimit      int64   `json:"over_limit"`      // buyers holding more than the limit
	RedisRemaining int64   `json:"redis_remaining"` // the stock key after the run
	Audit          string  `json:"audit,omitempty"` // `seckill audit` verdict, when the binary has it
	OK             bool    `json:"ok"`
	// Persisted is the campaign's sold units in the store over time.
	Persisted []DrainPoint `json:"persisted,omitempty"`
}

// IdleResult is the api's memory with many idle keep-alive connections.
type IdleResult struct {
	Connections int     `json:"connections"`
	RSSBefore   float64 `json:"rss_before_mb"`
	RSSAfter    float64 `json:"rss_after_mb"`
	PeakRSS     float64 `json:"peak_rss_mb"`
	PerConnKB   float64 `json:"per_conn_kb"`
	// The Go runtime's own account with the connections open (runtime.MemStats, from
	// /debug/pprof/heap?debug=1): where the resident memory goes.
	HeapInuse  float64 `json:"heap_inuse_mb,omitempty"`
	StackInuse float64 `json:"stack_inuse_mb,omitempty"`
	HeapIdle   float64 `json:"heap_idle_mb,omitempty"`
	Goroutines int     `json:"goroutines,omitempty"`
}

// DrainResult is a consumer draining a backlog of OrderRequested events into PostgreSQL.
type DrainResult struct {
	Events    int64 `json:"events"`
	BatchSize int   `json:"batch_size"`
	Persisted int64 `json:"persisted"`
	// ProduceRate is how fast the backlog was reserved in Redis and written to Kafka beforehand
	// (orders/s).
	ProduceRate float64 `json:"produce_rate"`
	// FirstAfter is when the first order reached the store, in seconds since the consumer
	// started; Elapsed runs from then to the last.
	FirstAfter float64 `json:"first_after_s"`
	Elapsed    float64 `json:"elapsed_s"`
	Complete   bool    `json:"complete"`
	// Batches and CampaignUpdates (row updates of the campaigns table) say how many
	// conditional updates a batch cost.
	Batches         int64        `json:"batches"`
	CampaignUpdates int64        `json:"campaign_updates"`
	Timeline        []DrainPoint `json:"timeline"`
}

// DrainPoint is one sample of a drain.
type DrainPoint struct {
	T    float64 `json:"t"`
	Rate float64 `json:"rate"` // orders/s since the previous sample
	Done int64   `json:"done"`
	Lag  int64   `json:"lag"` // the group's lag, in records (-1: unknown)
}

// Target is one of the targets and where the run left it.
type Target struct {
	Name string  `json:"name"`
	Got  float64 `json:"got"`
	Op   string  `json:"op"` // ">=", "<=", "=="
	Want float64 `json:"want"`
	Unit string  `json:"unit"` // "x" for ratios
	// Pass is nil when the run lacks a figure the target needs, or the target is for
	// information only.
	Pass *bool  `json:"pass"`
	Note string `json:"note,omitempty"`
	// Info marks a figure reported beside the targets, with no verdict.
	Info bool `json:"info,omitempty"`
	// Rounds are the target's figure in each round that had it; Got is their median.
	Rounds []float64 `json:"rounds,omitempty"`
}

// Label names the scenario and its round: "flash-crowd #2".
func (s ScenarioResult) Label() string {
	if s.Round == 0 {
		return s.Name
	}
	return fmt.Sprintf("%s #%d", s.Name, s.Round)
}

// setCPUPerOp divides the server processes' CPU time by ops.
func (s *ScenarioResult) setCPUPerOp(ops int64) { s.CPUPerOp = s.cpuPer(ops) }

// cpuPer returns the server processes' CPU time per op, in microseconds (nil without ops).
func (s ScenarioResult) cpuPer(ops int64) map[string]float64 {
	if ops <= 0 {
		return nil
	}
	var out map[string]float64
	for name, secs := range s.CPU {
		if name == "bench" {
			continue
		}
		if out == nil {
			out = map[string]float64{}
		}
		out[name] = secs * 1e6 / float64(ops)
	}
	return out
}

// CPUString formats CPUPerOp: "api 71µs · consumer 18µs".
func (s ScenarioResult) CPUString() string { return cpuString(s.CPUPerOp) }

func cpuString(perOp map[string]float64) string {
	names := make([]string, 0, len(perOp))
	for name := range perOp {
		names = append(names, name)
	}
	sort.Strings(names)
	var parts []string
	for _, name := range names {
		if v := perOp[name]; v >= 0.5 {
			parts = append(parts, fmt.Sprintf("%s %.0fµs", name, v))
		}
	}
	return strings.Join(parts, " · ")
}

// Scenario returns the named scenario's result, or nil.
func (r *Result) Scenario(name string) *ScenarioResult {
	for i := range r.Scenarios {
		if r.Scenarios[i].Name == name && r.Scenarios[i].Error == "" {
			return &r.Scenarios[i]
		}
	}
	return nil
}

// ComputeTargets fills in Targets from the scenarios: each target is worked out in every round
// that has its figures, and judged on the median of them.
func (r *Result) ComputeTargets() {
	byRound := map[int][]ScenarioResult{}
	var rounds []int
	for _, s := range r.Scenarios {
		if _, ok := byRound[s.Round]; !ok {
			rounds = append(rounds, s.Round)
		}
		byRound[s.Round] = append(byRound[s.Round], s)
	}
	sort.Ints(rounds)
	r.Targets = nil
	// By target, the target in each round that had its figures, and those rounds.
	var had [][]Target
	var hadRounds [][]int
	for _, round := range rounds {
		ts := targetsOf(byRound[round], r.Sizes)
		if r.Targets == nil {
			r.Targets, had, hadRounds = ts, make([][]Target, len(ts)), make([][]int, len(ts))
		}
		for i, t := range ts {
			if t.Pass != nil || t.Info && t.Got != 0 {
				had[i], hadRounds[i] = append(had[i], t), append(hadRounds[i], round)
			}
		}
	}
	for i, ts := range had {
		if len(ts) > 0 {
			r.Targets[i] = judge(ts, hadRounds[i])
		}
	}
}

// judge returns the target of the rounds ts (numbered rounds), judged on the median of their
// figures. Its threshold and note are those of the round nearest the median: a round whose
// scenario failed has neither, and the note's own figures (p99s in ms) then match the median it
// stands beside. An exact count ("==": the stock sold, no 503) is a correctness check, not a
// speed: it must hold in every round, and the first round where it did not speaks for it.
func judge(ts []Target, rounds []int) Target {
	vs := make([]float64, len(ts))
	for i, t := range ts {
		vs[i] = t.Got
	}
	m := median(vs)
	near := 0
	for i, v := range vs {
		if math.Abs(v-m) < math.Abs(vs[near]-m) {
			near = i
		}
	}
	t := ts[near]
	t.Got, t.Rounds = m, vs
	if t.Op == "==" {
		for i, r := range ts {
			if !*r.Pass {
				r.Got, r.Rounds = m, vs
				r.Note = fmt.Sprintf("round %d: %s", rounds[i], r.Note)
				return r
			}
		}
	}
	if !t.Info {
		t.Pass = ptr(t.meets(m))
	}
	return t
}

// median returns the median of vs (the mean of the middle two of an even count).
func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// meets reports whether v satisfies the target's operator and threshold.
func (t Target) meets(v float64) bool {
	switch t.Op {
	case ">=":
		return v >= t.Want
	case "<=":
		return v <= t.Want
	}
	return v == t.Want
}

// Spread formats the target's rounds: "1.02× 0.97× 1.10×", in the order they ran.
func (t Target) Spread() string {
	if len(t.Rounds) < 2 {
		return ""
	}
	parts := make([]string, len(t.Rounds))
	for i, v := range t.Rounds {
		parts[i] = t.format(v)
	}
	return strings.Join(parts, " ")
}

// targetsOf works out the targets from one round's scenarios.
func targetsOf(scenarios []ScenarioResult, sizes Sizes) []Target {
	scenario := func(name string) *ScenarioResult {
		for i := range scenarios {
			if scenarios[i].Name == name && scenarios[i].Error == "" {
				return &scenarios[i]
			}
		}
		return nil
	}
	thr := func(name string) float64 {
		if s := scenario(name); s != nil {
			return s.Throughput
		}
		return 0
	}
	ratio := func(a, b string, want float64, note string) Target {
		t := Target{Name: a + " / " + b, Op: ">=", Want: want, Unit: "x", Note: note}
		if x, y := thr(a), thr(b); x > 0 && y > 0 {
			t.Got = x / y
			t.Pass = ptr(t.Got >= want)
		}
		return t
	}
	info := func(t Target) Target {
		t.Info, t.Pass, t.Op = true, nil, ""
		return t
	}
	allAccept := ratio("all-accept", "bare-reserve", 1.0, "the Kafka produce paid for by batching and coalesced reservations")
	unavailable := Target{Name: "all-accept 503 answers", Op: "==", Want: 0, Unit: "answers", Note: "stock is there for every purchase: none may be refused"}
	if s := scenario("all-accept"); s != nil && s.Load != nil {
		unavailable.Got = float64(s.Load.Outcomes["503 unavailable"])
		unavailable.Pass = ptr(unavailable.Got == 0)
	}
	p99 := Target{Name: "flash-crowd p99 / constant p99", Op: "<=", Want: 1.3, Unit: "x",
		Note: "the HTTP stack's own p99 (constant) is the floor of every handler's, at concurrency " + fmt.Sprint(sizes.Concurrency)}
	if f, c := scenario("flash-crowd"), scenario("constant"); f != nil && c != nil && c.Latency.P99 > 0 {
		p99.Got = f.Latency.P99 / c.Latency.P99
		p99.Pass = ptr(p99.Got <= 1.3)
		p99.Note += fmt.Sprintf(": %.1f ms against %.1f ms", f.Latency.P99, c.Latency.P99)
	}
	sold := Target{Name: "flash-crowd sold", Op: "==", Unit: "units", Note: "exactly the stock, nobody over the limit"}
	if s := scenario("flash-crowd"); s != nil && s.Flash != nil {
		sold.Got, sold.Want = float64(s.Flash.Sold), float64(s.Flash.Stock)
		sold.Pass = ptr(s.Flash.OK)
		if !s.Flash.OK {
			sold.Note = fmt.Sprintf("accepted %d, confirmed %d, over the limit %d", s.Flash.Accepted, s.Flash.Confirmed, s.Flash.OverLimit)
		}
	}
	// Every process's CPU per order, from the purchase to the order in PostgreSQL: per accepted
	// purchase, not per request (the scenario's CPUPerOp), as a refused one is no order.
	cpu := Target{Name: "CPU per order (all-accept-unpaced)", Op: "<=", Want: 120, Unit: "µs",
		Note: "api, Redis, Kafka, consumer, PostgreSQL and compensator together"}
	if s := scenario("all-accept-unpaced"); s != nil && s.Load != nil {
		if perOrder := s.cpuPer(s.Load.Count("2")); len(perOrder) > 0 {
			for _, v := range perOrder {
				cpu.Got += v
			}
			cpu.Pass = ptr(cpu.Got <= 120)
			cpu.Note += ": " + cpuString(perOrder)
		}
	}
	drain := Target{Name: "drain", Op: ">=", Want: 30000, Unit: "orders/s"}
	perBatch := Target{Name: "drain campaign updates per batch", Op: "<=", Want: 1, Unit: "updates", Note: "one conditional update per campaign per batch (the drain has one campaign)"}
	if s := scenario("drain"); s != nil {
		drain.Got, drain.Pass = s.Throughput, ptr(s.Throughput >= 30000)
		if d := s.Drain; d != nil && d.Batches > 0 {
			perBatch.Got = float64(d.CampaignUpdates) / float64(d.Batches)
			perBatch.Pass = ptr(perBatch.Got <= 1)
		}
	}
	// Plain net/http holds an idle keep-alive in a goroutine and its buffers: about 17 KB.
	rss := Target{Name: "api RSS per idle connection", Op: "<=", Want: 32, Unit: "KB"}
	if s := scenario("idle-conns"); s != nil && s.Idle != nil {
		rss.Got, rss.Pass = s.Idle.PerConnKB, ptr(s.Idle.PerConnKB <= 32)
		rss.Note = fmt.Sprintf("%s connections: RSS %.0f → %.0f MB", count(int64(s.Idle.Connections)), s.Idle.RSSBefore, s.Idle.RSSAfter)
	}
	return []Target{
		ratio("sold-out", "constant", 0.8, "a refusal should cost little more than the HTTP stack"),
		allAccept, unavailable,
		ratio("flash-crowd", "constant", 0.85, "the whole purchase against the HTTP stack's fixed answer"),
		p99, sold,
		drain, ratio("drain", "row-at-a-time", 10, "batched persistence against one order per transaction"), perBatch,
		cpu, rss,
		info(ratio("flash-crowd", "sync-db", 0, "the naive one-transaction design, same workload")),
		info(ratio("all-accept", "redis-ceiling", 0, "against redis-benchmark EVALSHA of the reserve script")),
	}
}

func ptr[T any](v T) *T { return &v }

// Verdict is a target's mark: PASS, FAIL, or "n/a" when the run lacks the figures.
func (t Target) Verdict() string {
	switch {
	case t.Info && t.Got != 0:
		return "info"
	case t.Pass == nil:
		return "n/a"
	case *t.Pass:
		return "PASS"
	}
	return "FAIL"
}

// GotString formats the target's figure in its unit.
func (t Target) GotString() string {
	if t.Pass == nil && !(t.Info && t.Got != 0) {
		return "–"
	}
	return t.format(t.Got)
}

// WantString formats the target's threshold with its operator.
func (t Target) WantString() string {
	if t.Info {
		return ""
	}
	op := map[string]string{">=": "≥", "<=": "≤", "==": "="}[t.Op]
	return op + " " + t.format(t.Want)
}

func (t Target) format(v float64) string {
	switch t.Unit {
	case "x":
		return fmt.Sprintf("%.2f×", v)
	case "ms":
		return fmt.Sprintf("%.1f ms", v)
	case "MB":
		return fmt.Sprintf("%.0f MB", v)
	case "updates":
		return fmt.Sprintf("%.1f", v)
	}
	return count(int64(math.Round(v))) + " " + t.Unit
}

// rate formats a throughput: 12,345/s.
func rate(v float64) string { return count(int64(math.Round(v))) }

// WriteTable prints the summary: the scenarios, then the targets.
func (r *Result) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\t\tthroughput\t\tp50\tp99\tp99.9\tmax\tCPU per op\tanswers\t")
	for _, s := range r.Scenarios {
		kind := "seckill"
		if s.Baseline {
			kind = "baseline"
		}
		if s.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\tfailed\t\t\t\t\t\t\t(below)\t\n", s.Name, kind)
			continue
		}
		l := s.Latency
		lat := func(v float64) string {
			if l.Count == 0 && v == 0 {
				return "–"
			}
			return fmtMs(v)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.Label(), kind, rate(s.Throughput), s.Unit,
			lat(l.P50), lat(l.P99), lat(l.P999), lat(l.Max), s.CPUString(), s.Answers())
	}
	tw.Flush()
	for _, s := range r.Scenarios {
		if s.Error != "" {
			fmt.Fprintf(w, "%s failed: %s\n", s.Name, s.Error)
		}
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tmedian\trounds\twant\t\tnote")
	for _, t := range r.Targets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.GotString(), t.Spread(), t.WantString(), t.Verdict(), t.Note)
	}
	tw.Flush()
	for _, s := range r.Scenarios {
		if f := s.Flash; f != nil {
			fmt.Fprintf(w, "\nflash-crowd: %s; %s\n", s.FlashTimes(), f.Line())
		}
		if d := s.Drain; d != nil && s.Name == "drain" {
			fmt.Fprintf(w, "drain: %s of %s events persisted in %.1fs (first order %.1fs after the consumer started); %d batches, %d campaign row updates\n",
				count(d.Persisted), count(d.Events), d.Elapsed, d.FirstAfter, d.Batches, d.CampaignUpdates)
		}
	}
}

func seconds(v float64) string {
	if v <= 0 {
		return "(not within the wait)"
	}
	return fmt.Sprintf("%.2fs", v)
}

// FlashTimes says when a flash crowd sold out, how fast it was answered before and after, and
// when its orders were all in PostgreSQL. An accepted purchase costs the machine several
// refusals, so the first phase sets the crowd's pace and its p99: the two rates tell which phase
// moved a round's ratio to constant (all-accept and sold-out measure each on its own).
func (s ScenarioResult) FlashTimes() string {
	f, l := s.Flash, s.Load
	if f == nil || l == nil {
		return ""
	}
	persisted := "every confirmed order in PostgreSQL after " + seconds(f.PersistedAfter)
	if f.SoldOutAfter <= 0 || f.SoldOutAfter >= l.Elapsed {
		return fmt.Sprintf("never sold out; %s accepted at %s/s; %s", count(f.Accepted), rate(l.Throughput), persisted)
	}
	rest := l.Requests - f.Accepted
	return fmt.Sprintf("sold out after %.2fs, %s accepted at %s/s, the other %s answered at %s/s; %s",
		f.SoldOutAfter, count(f.Accepted), rate(float64(f.Accepted)/f.SoldOutAfter),
		count(rest), rate(float64(rest)/(l.Elapsed-f.SoldOutAfter)), persisted)
}

// Line is the correctness line of a flash crowd.
func (f *FlashResult) Line() string {
	verdict := "CORRECT"
	if !f.OK {
		verdict = "WRONG"
	}
	s := fmt.Sprintf("%s: stock %s, accepted %s, sold %s, confirmed orders %s, buyers over the limit of %d: %d, Redis remaining %d",
		verdict, count(f.Stock), count(f.Accepted), count(f.Sold), count(f.Confirmed), f.Limit, f.OverLimit, f.RedisRemaining)
	if f.Audit != "" {
		s += ", audit " + f.Audit
	}
	return s
}

// Answers summarizes the outcomes: "202 10,000 · 409 sold_out 190,000".
func (s ScenarioResult) Answers() string {
	switch {
	case s.Load != nil:
		var parts []string
		for _, k := range s.Load.OutcomeKeys() {
			parts = append(parts, k+" "+count(s.Load.Outcomes[k]))
		}
		return strings.Join(parts, " · ")
	case s.Drain != nil:
		return fmt.Sprintf("%s/%s orders, batch %d", count(s.Drain.Persisted), count(s.Drain.Events), s.Drain.BatchSize)
	case s.Redis != nil:
		return fmt.Sprintf("%s EVALSHA, %d clients", count(int64(s.Redis.Requests)), s.Redis.Clients)
	case s.Idle != nil:
		out := fmt.Sprintf("%s conns: RSS %.0f → %.0f MB", count(int64(s.Idle.Connections)), s.Idle.RSSBefore, s.Idle.RSSAfter)
		if s.Idle.HeapInuse > 0 {
			out += fmt.Sprintf(" (heap %.0f, stacks %.0f, idle heap %.0f MB)", s.Idle.HeapInuse, s.Idle.StackInuse, s.Idle.HeapIdle)
		}
		return out
	}
	return ""
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// Save writes the result as JSON to dir/<stamp>.json and returns the path.
func (r *Result) Save(dir, stamp string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, stamp+".json")
	return path, writeFileAtomic(path, append(b, '\n'))
}

// LoadResultFile reads a result written by Save.
func LoadResultFile(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// writeFileAtomic writes through a temporary file, so a reader never sees half a report.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
