package validate

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	promql "github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// The alert rules (deploy/prometheus) and the Grafana dashboard (deploy/grafana) are checked
// here. promtool checks the rules and runs their unit tests (alerts_test.yml). The rest reads
// the metrics the seckill code registers (name, type, labels) from its Go sources and checks
// every PromQL expression of the rules and the dashboard against them with Prometheus's own
// parser: a misspelt metric or label, a rate of a gauge, or a legend naming a label the query
// drops shows nothing in Grafana and fires nothing in Prometheus, and no other check says so.

// promtool finds Prometheus's promtool, or fails saying how to get it.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is needed to check the alert rules: install Debian's prometheus package (apt-get install prometheus; deploy/local/services.sh up does)")
	}
	return path
}

func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestAlertRules checks the rules and runs their unit tests (alerts_test.yml).
func TestAlertRules(t *testing.T) {
	runPromtool(t, "../prometheus", "check", "rules", "alerts.yml")
	runPromtool(t, "../prometheus", "test", "rules", "alerts_test.yml")
}

// metric is one metric the code registers.
type metric struct {
	kind   string // counter, gauge, histogram or summary
	labels []string
}

// optsKinds maps client_golang's options types to the kind of metric they make.
var optsKinds = map[string]string{"CounterOpts": "counter", "GaugeOpts": "gauge", "HistogramOpts": "histogram", "SummaryOpts": "summary"}

// codeMetrics reads the metrics the seckill module registers from its Go sources (tests and
// deploy/ aside): every call whose first argument is a prometheus.…Opts literal with a Name, and
// whose second, for a vector, is the []string literal of its labels.
func codeMetrics(tb testing.TB) map[string]metric {
	tb.Helper()
	const root = "../.."
	metrics := map[string]metric{}
	var ps problems
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != root && (d.Name() == "deploy" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			opts, ok := call.Args[0].(*ast.CompositeLit)
			if !ok {
				return true
			}
			typ, ok := opts.Type.(*ast.SelectorExpr)
			if !ok || optsKinds[typ.Sel.Name] == "" {
				return true
			}
			if pkg, _ := typ.X.(*ast.Ident); pkg == nil || pkg.Name != "prometheus" {
				return true
			}
			at := fset.Position(call.Pos())
			var name string
			for _, el := range opts.Elts {
				kv, _ := el.(*ast.KeyValueExpr)
				key, _ := kv.Key.(*ast.Ident)
				switch {
				case key == nil:
				case key.Name == "Namespace" || key.Name == "Subsystem":
					ps.addf("%s: %s is set; this check reads the metric's whole name from Name only", at, key.Name)
				case key.Name == "Name":
					name = stringLit(kv.Value)
				}
			}
			if name == "" {
				ps.addf("%s: a %s whose Name is not a string literal", at, typ.Sel.Name)
				return true
			}
			m := metric{kind: optsKinds[typ.Sel.Name]}
			if len(call.Args) > 1 {
				list, _ := call.Args[1].(*ast.CompositeLit)
				if list == nil {
					ps.addf("%s: the labels of %s are not a []string literal", at, name)
				} else {
					for _, el := range list.Elts {
						if l := stringLit(el); l != "" {
							m.labels = append(m.labels, l)
						} else {
							ps.addf("%s: a label of %s is not a string literal", at, name)
						}
					}
				}
			}
			if _, dup := metrics[name]; dup {
				ps.addf("%s: %s is registered twice", at, name)
			}
			metrics[name] = m
			return true
		})
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	ps.report(tb)
	if len(metrics) < 10 {
		tb.Fatalf("found %d metrics in the code, which cannot be all: %v", len(metrics), metrics)
	}
	return metrics
}

func stringLit(e ast.Expr) string {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return ""
	}
	s, _ := strconv.Unquote(lit.Value)
	return s
}

// scrapeLabels are the labels Prometheus adds to every scraped series.
var scrapeLabels = []string{"instance", "job"}

// promqlReader checks PromQL expressions against the metrics of the code and the recording rules.
type promqlReader struct {
	metrics map[string]metric
	records map[string][]string // a recording rule's name -> the labels of its series
	reads   map[string][]string // a recording rule's name -> the metrics it reads
	read    map[string]bool     // the metrics and rules the expressions checked so far read
}

// series returns the kind and labels of the series named name: a counter or gauge, a summary's
// quantiles, one of a histogram's or summary's _bucket, _sum and _count counters, or a recording
// rule ("record"); base is the metric or rule it belongs to. A classic histogram has no series
// of its bare name.
func (r *promqlReader) series(name string) (base, kind string, labels []string, ok bool) {
	if ls, ok := r.records[name]; ok {
		return name, "record", ls, true
	}
	if m, ok := r.metrics[name]; ok && m.kind != "histogram" {
		if m.kind == "summary" {
			m.labels = append(slices.Clone(m.labels), "quantile")
		}
		return name, m.kind, append(slices.Clone(m.labels), scrapeLabels...), true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		m, ok := r.metrics[strings.TrimSuffix(name, suffix)]
		if !strings.HasSuffix(name, suffix) || !ok || m.kind != "histogram" && m.kind != "summary" || suffix == "_bucket" && m.kind != "histogram" {
			continue
		}
		labels = append(slices.Clone(m.labels), scrapeLabels...)
		if suffix == "_bucket" {
			labels = append(labels, "le")
		}
		return strings.TrimSuffix(name, suffix), "counter", labels, true
	}
	return "", "", nil, false
}

// check parses expr (in where) and returns the labels its result may carry and what is wrong.
func (r *promqlReader) check(where, expr string) ([]string, problems) {
	var ps problems
	e, err := promql.NewParser(promql.Options{}).ParseExpr(expr)
	if err != nil {
		ps.addf("%s: %q is not PromQL: %v", where, expr, err)
		return nil, ps
	}
	var labelsOf func(n promql.Node) []string
	labelsOf = func(n promql.Node) []string {
		switch n := n.(type) {
		case *promql.VectorSelector:
			base, _, labels, ok := r.series(n.Name)
			switch {
			case !ok && r.metrics[n.Name].kind == "histogram":
				ps.addf("%s: reads the histogram %s by its bare name: read its _bucket, _sum or _count", where, n.Name)
				return nil
			case !ok:
				ps.addf("%s: reads %s, which the code does not export", where, n.Name)
				return nil
			}
			r.read[base] = true
			for _, m := range r.reads[base] { // read through the rule
				r.read[m] = true
			}
			for _, m := range n.LabelMatchers {
				if m.Name != "__name__" && !slices.Contains(labels, m.Name) {
					ps.addf("%s: selects %s by %s, a label it does not have (it has %v)", where, n.Name, m.Name, labels)
				}
			}
			return labels
		case *promql.MatrixSelector:
			return labelsOf(n.VectorSelector)
		case *promql.SubqueryExpr:
			return labelsOf(n.Expr)
		case *promql.ParenExpr:
			return labelsOf(n.Expr)
		case *promql.UnaryExpr:
			return labelsOf(n.Expr)
		case *promql.StepInvariantExpr:
			return labelsOf(n.Expr)
		case *promql.NumberLiteral, *promql.StringLiteral:
			return nil
		case *promql.Call:
			var labels []string
			for _, arg := range n.Args {
				labels = union(labels, labelsOf(arg))
			}
			switch n.Func.Name {
			case "rate", "irate", "increase":
				if sel, ok := n.Args[0].(*promql.MatrixSelector); ok {
					if vs, ok := sel.VectorSelector.(*promql.VectorSelector); ok {
						if _, kind, _, ok := r.series(vs.Name); ok && kind != "counter" && kind != "record" {
							ps.addf("%s: %s of %s, a %s: only a counter has a rate", where, n.Func.Name, vs.Name, kind)
						}
					}
				}
			case "histogram_quantile":
				if !slices.Contains(labels, "le") {
					ps.addf("%s: histogram_quantile over series without le (aggregate by le)", where)
				}
				labels = slices.DeleteFunc(labels, func(l string) bool { return l == "le" })
			}
			return labels
		case *promql.AggregateExpr:
			inner := labelsOf(n.Expr)
			if n.Param != nil {
				labelsOf(n.Param)
			}
			for _, l := range n.Grouping {
				if !slices.Contains(inner, l) {
					ps.addf("%s: %s by %s, a label of none of the series it aggregates (%v)", where, n.Op, l, inner)
				}
			}
			if n.Without {
				return slices.DeleteFunc(inner, func(l string) bool { return slices.Contains(n.Grouping, l) })
			}
			return slices.Clone(n.Grouping)
		case *promql.BinaryExpr:
			l, rr := labelsOf(n.LHS), labelsOf(n.RHS)
			if m := n.VectorMatching; m != nil {
				for _, label := range append(slices.Clone(m.MatchingLabels), m.Include...) {
					if !slices.Contains(union(l, rr), label) {
						ps.addf("%s: matches on %s, a label of neither side", where, label)
					}
				}
			}
			switch {
			case n.LHS.Type() == promql.ValueTypeScalar:
				return rr
			case n.Op == promql.LOR:
				return union(l, rr)
			}
			return l
		}
		ps.addf("%s: the check does not know PromQL's %T: teach it", where, n)
		return nil
	}
	return labelsOf(e), ps
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

type rule struct {
	Record      string            `json:"record"`
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

type ruleTests struct {
	Tests []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			Alertname string            `json:"alertname"`
			ExpAlerts []json.RawMessage `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type templateVar struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Query string `json:"query"`
}

type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []templateVar `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int                      `json:"id"`
		Title      string                   `json:"title"`
		Datasource *datasourceRef           `json:"datasource"`
		GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
		Targets    []struct {
			RefID        string         `json:"refId"`
			Expr         string         `json:"expr"`
			LegendFormat string         `json:"legendFormat"`
			Datasource   *datasourceRef `json:"datasource"`
		} `json:"targets"`
	} `json:"panels"`
}

// monitoringFiles are the files the checks below read, so that a test can break a copy.
type monitoringFiles struct {
	rules, tests, dashboard, readme string
}

func readMonitoringFiles(tb testing.TB) monitoringFiles {
	tb.Helper()
	readme, err := os.ReadFile(filepath.Join(deployDir(tb), "..", "README.md"))
	if err != nil {
		tb.Fatal(err)
	}
	return monitoringFiles{
		rules:     string(readDeployFile(tb, "prometheus/alerts.yml")),
		tests:     string(readDeployFile(tb, "prometheus/alerts_test.yml")),
		dashboard: string(readDeployFile(tb, "grafana/seckill.json")),
		readme:    string(readme),
	}
}

var (
	fixedWindow     = regexp.MustCompile(`\[([0-9]+[smh])\]`)
	annotationLabel = regexp.MustCompile(`\$labels\.([A-Za-z_][A-Za-z0-9_]*)`)
	legendLabel     = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)
	heading         = regexp.MustCompile(`(?m)^#+ +(.+?) *$`)
)

// readmeAnchors returns the anchors GitHub gives the README's headings.
func readmeAnchors(readme string) []string {
	var anchors []string
	for _, m := range heading.FindAllStringSubmatch(readme, -1) {
		slug := strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				return r
			}
			return -1
		}, strings.ToLower(m[1]))
		anchors = append(anchors, slug)
	}
	return anchors
}

// checkMonitoring checks the rules, their tests' coverage and the dashboard against the metrics.
func checkMonitoring(metrics map[string]metric, f monitoringFiles) problems {
	var ps problems
	r := &promqlReader{metrics: metrics, records: map[string][]string{}, reads: map[string][]string{}}

	var rules ruleFile
	if err := yaml.UnmarshalStrict([]byte(f.rules), &rules); err != nil {
		ps.addf("alerts.yml: %v", err)
	}
	alerts := map[string]bool{}
	anchors := readmeAnchors(f.readme)
	for _, g := range rules.Groups {
		for _, rl := range g.Rules {
			r.read = map[string]bool{}
			if rl.Record != "" {
				labels, more := r.check("rule "+rl.Record, rl.Expr)
				ps = append(ps, more...)
				r.records[rl.Record] = labels
				for m := range r.read {
					r.reads[rl.Record] = append(r.reads[rl.Record], m)
				}
				continue
			}
			where := "alert " + rl.Alert
			alerts[rl.Alert] = true
			labels, more := r.check(where, rl.Expr)
			ps = append(ps, more...)
			if s := rl.Labels["severity"]; s != "critical" && s != "warning" {
				ps.addf("%s: severity %q, want critical (wakes someone) or warning", where, s)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(rl.Annotations[a]) == "" {
					ps.addf("%s: no %s annotation: the person paged needs it", where, a)
				}
			}
			if rb := rl.Annotations["runbook"]; rb != "" {
				page, anchor, _ := strings.Cut(rb, "#")
				if page != "README.md" || !slices.Contains(anchors, anchor) {
					ps.addf("%s: runbook %s is no section of README.md (its sections: %v)", where, rb, anchors)
				}
			}
			for _, text := range rl.Annotations {
				for _, m := range annotationLabel.FindAllStringSubmatch(text, -1) {
					if _, own := rl.Labels[m[1]]; !own && !slices.Contains(labels, m[1]) {
						ps.addf("%s: an annotation names $labels.%s, which the alert's series do not have (%v)", where, m[1], labels)
					}
				}
			}
		}
	}

	// promtool runs the tests, but passes an alert that no test mentions.
	var tests ruleTests
	if err := yaml.Unmarshal([]byte(f.tests), &tests); err != nil {
		ps.addf("alerts_test.yml: %v", err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, at := range tc.AlertRuleTest {
			if !alerts[at.Alertname] {
				ps.addf("alerts_test.yml: %q tests %s, which alerts.yml does not have", tc.Name, at.Alertname)
			}
			if len(at.ExpAlerts) > 0 {
				fires[at.Alertname] = true
			} else {
				silent[at.Alertname] = true
			}
		}
	}
	for a := range alerts {
		if !fires[a] {
			ps.addf("alert %s: no test in alerts_test.yml expects it to fire", a)
		}
		if !silent[a] {
			ps.addf("alert %s: no test in alerts_test.yml expects it to stay silent on a look-alike", a)
		}
	}

	var d dashboard
	if err := json.Unmarshal([]byte(f.dashboard), &d); err != nil {
		ps.addf("the dashboard is not JSON: %v", err)
		return ps
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		ps.addf("the dashboard has no title, uid or panels")
	}
	if !slices.ContainsFunc(d.Templating.List, func(v templateVar) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		ps.addf("the dashboard has no datasource variable of Prometheus data sources: its panels name ${datasource}")
	}
	read := map[string]bool{} // what the dashboard's queries read
	ids := map[int]bool{}
	for i, p := range d.Panels {
		where := fmt.Sprintf("panel %q", p.Title)
		if ids[p.ID] {
			ps.addf("%s repeats id %d", where, p.ID)
		}
		ids[p.ID] = true
		if g := p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			ps.addf("%s: gridPos %+v is outside Grafana's 24 columns", where, g)
		}
		for _, q := range d.Panels[:i] {
			a, b := p.GridPos, q.GridPos
			if a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H {
				ps.addf("%s overlaps panel %q", where, q.Title)
			}
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			ps.addf("%s: its datasource is not ${datasource}, the data source picked at import", where)
		}
		if len(p.Targets) == 0 {
			ps.addf("%s has no query", where)
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			at := where + " query " + q.RefID
			if q.RefID == "" || refs[q.RefID] {
				ps.addf("%s: refId empty or repeated", at)
			}
			refs[q.RefID] = true
			if q.Datasource == nil || q.Datasource.UID != "${datasource}" {
				ps.addf("%s: its datasource is not ${datasource}", at)
			}
			// Grafana widens $__rate_interval to four scrape intervals at least; a fixed [$__rate_interval] holds
			// two samples at a 30 s scrape interval (none once one is missed) and at most one at
			// Prometheus's default of 1 m, so the panel shows gaps or nothing.
			for _, m := range fixedWindow.FindAllStringSubmatch(q.Expr, -1) {
				if d, err := time.ParseDuration(m[1]); err == nil && d < 4*time.Minute {
					ps.addf("%s: window [%s] is fixed and short: at a 30 s or 1 m scrape interval it holds two samples or fewer; use [$__rate_interval]", at, m[1])
				}
			}
			r.read = map[string]bool{}
			labels, more := r.check(at, strings.ReplaceAll(q.Expr, "$__rate_interval", "1m"))
			ps = append(ps, more...)
			for name := range r.read {
				read[name] = true
				// A recording rule's series exist only where alerts.yml is loaded: a dashboard
				// imported beside another Prometheus would show nothing.
				if _, ok := r.records[name]; ok {
					ps.addf("%s reads the recording rule %s, which only a Prometheus that loads alerts.yml has: graph its expression", at, name)
				}
			}
			if q.LegendFormat == "" {
				ps.addf("%s has no legendFormat: its lines would be named by their whole label sets", at)
			}
			for _, m := range legendLabel.FindAllStringSubmatch(q.LegendFormat, -1) {
				if !slices.Contains(labels, m[1]) {
					ps.addf("%s: legend {{%s}} names a label its series do not have (%v)", at, m[1], labels)
				}
			}
		}
	}
	// Every figure is graphed, so every alert has its history beside it.
	for name := range metrics {
		if !read[name] {
			ps.addf("%s is on no panel of the dashboard: graph every figure the code exports", name)
		}
	}
	return ps
}

// TestMonitoring checks the real rules, their tests' coverage and the dashboard.
func TestMonitoring(t *testing.T) {
	checkMonitoring(codeMetrics(t), readMonitoringFiles(t)).report(t)
}

// TestMonitoringRejects breaks a copy of the files in one way each and expects the checks to
// say so.
func TestMonitoringRejects(t *testing.T) {
	metrics := codeMetrics(t)
	if m := metrics["seckill_compensations_total"]; m.kind != "counter" || !slices.Equal(m.labels, []string{"source", "outcome"}) {
		t.Fatalf("read seckill_compensations_total from the code as %+v, want a counter by source and outcome", m)
	}
	real := readMonitoringFiles(t)
	rules := func(old, new string) func(testing.TB, *monitoringFiles) {
		return func(tb testing.TB, f *monitoringFiles) { f.rules = mustReplace(tb, f.rules, old, new) }
	}
	tests := func(old, new string) func(testing.TB, *monitoringFiles) {
		return func(tb testing.TB, f *monitoringFiles) { f.tests = mustReplace(tb, f.tests, old, new) }
	}
	board := func(old, new string) func(testing.TB, *monitoringFiles) {
		return func(tb testing.TB, f *monitoringFiles) { f.dashboard = mustReplace(tb, f.dashboard, old, new) }
	}
	for _, tc := range []struct {
		name   string
		break_ func(testing.TB, *monitoringFiles)
		want   string
	}{
		{"misspelt metric in an alert", rules("increase(seckill_dlq_total[5m])", "increase(seckill_dlq_totals[5m])"), "reads seckill_dlq_totals, which the code does not export"},
		{"selector on a missing label", rules(`{outcome="reserved"}`, `{result="reserved"}`), "selects seckill_reservations_total by result"},
		{"not PromQL", rules("sum by (reason) (increase(seckill_dlq_total[5m])) > 0", "sum by (reason) (increase(seckill_dlq_total[5m]) > 0"), "is not PromQL"},
		{"annotation names a label the alert drops", rules("{{ $labels.instance }}", "{{ $labels.pod }}"), "names $labels.pod"},
		{"no severity", rules("severity: warning", "severity: page"), `severity "page"`},
		{"runbook to no section", rules("runbook: README.md#commands", "runbook: README.md#command"), "runbook README.md#command is no section"},
		{"an alert no test fires", tests("alertname: SeckillAuditViolation\n        exp_alerts:", "alertname: SeckillAuditViolation\n        exp_alertz:"), "SeckillAuditViolation: no test in alerts_test.yml expects it to fire"},
		{"a test of no alert", tests("alertname: SeckillBreakerOpen", "alertname: SeckillBreakerOpened"), "tests SeckillBreakerOpened, which alerts.yml does not have"},
		{"group by a missing label", board("sum by (outcome) (rate(seckill_reservations_total[$__rate_interval]))", "sum by (result) (rate(seckill_reservations_total[$__rate_interval]))"), "by result, a label of none"},
		{"rate of a gauge", board("max(seckill_campaigns_frozen)", "sum(rate(seckill_campaigns_frozen[$__rate_interval]))"), "rate of seckill_campaigns_frozen, a gauge"},
		{"quantile without le", board("histogram_quantile(0.99, sum by (le) (rate(seckill_produce_seconds_bucket[$__rate_interval])))", "histogram_quantile(0.99, sum(rate(seckill_produce_seconds_bucket[$__rate_interval])))"), "histogram_quantile over series without le"},
		{"bare name of a histogram", board("rate(seckill_produce_seconds_bucket[$__rate_interval])", "rate(seckill_produce_seconds[$__rate_interval])"), "reads the histogram seckill_produce_seconds by its bare name"},
		{"bucket of a counter", board("seckill_http_refused_connections_total[$__rate_interval]", "seckill_http_refused_connections_total_bucket[$__rate_interval]"), "reads seckill_http_refused_connections_total_bucket"},
		{"legend of a dropped label", board(`"legendFormat": "{{reason}}"`, `"legendFormat": "{{campaign}}"`), "legend {{campaign}}"},
		{"no legend", board(`"legendFormat": "p50"`, `"legendFormat": ""`), "has no legendFormat"},
		{"a metric on no panel", board("rate(seckill_http_refused_connections_total[$__rate_interval])", "rate(seckill_http_requests_total[$__rate_interval])"), "seckill_http_refused_connections_total is on no panel"},
		{"panels overlap", board(`"x": 12,`, `"x": 6,`), "overlaps panel"},
		{"fixed data source", board(`"uid": "${datasource}"`, `"uid": "prom-1"`), "its datasource is not ${datasource}"},
		{"dashboard reads a recording rule", board("sum(max by (partition) (seckill_consumer_lag))", "seckill:consumer_lag:sum"), "reads the recording rule seckill:consumer_lag:sum"},
		{"fixed one-minute window", board("rate(seckill_produce_seconds_bucket[$__rate_interval])", "rate(seckill_produce_seconds_bucket[1m])"), "window [1m] is fixed and short"},
		{"not JSON", board(`"panels": [`, `"panels": [,`), "the dashboard is not JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := real
			tc.break_(t, &f)
			expectProblem(t, checkMonitoring(metrics, f), tc.want)
		})
	}
}
