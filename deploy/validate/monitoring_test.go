package validate

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The alert rules (deploy/prometheus) and the Grafana dashboard (deploy/grafana) are checked
// here: promtool checks the rules and runs their unit tests, and every metric that the rules
// and the dashboard name must be one the seckill code exports.

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

// exported returns the metric names the seckill code registers (Name: "seckill_…").
func exported(t *testing.T) []string {
	t.Helper()
	name := regexp.MustCompile(`Name:\s+"(seckill_[a-z0-9_]+)"`)
	var names []string
	const root = "../.."
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != root && (d.Name() == "deploy" || strings.HasPrefix(d.Name(), ".")):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range name.FindAllSubmatch(b, -1) {
			names = append(names, string(m[1]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 10 {
		t.Fatalf("found %d metrics in the code, which cannot be all: %v", len(names), names)
	}
	return names
}

// metricsIn returns the seckill metric names an expression reads, histogram series as their
// metric's name.
func metricsIn(expr string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`\bseckill_[a-z0-9_]+`).FindAllString(expr, -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			m = strings.TrimSuffix(m, suffix)
		}
		out = append(out, m)
	}
	return out
}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Record string `json:"record"`
			Alert  string `json:"alert"`
			Expr   string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

type dashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestDashboardAndRulesReadRealMetrics: every metric that an alert or a panel reads exists,
// every metric an alert reads is on the dashboard, and every panel's query is valid PromQL
// (promtool checks them as recording rules).
func TestDashboardAndRulesReadRealMetrics(t *testing.T) {
	have := exported(t)
	var rules ruleFile
	b, err := os.ReadFile("../prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	var alerted []string
	records := map[string][]string{} // a recording rule's name -> the metrics it reads
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				records[r.Record] = metricsIn(r.Expr)
			}
			for _, m := range metricsIn(r.Expr) {
				if !slices.Contains(have, m) {
					t.Errorf("rule %s%s reads %s, which the code does not export", r.Alert, r.Record, m)
				}
				alerted = append(alerted, m)
			}
		}
	}

	var d dashboard
	b, err = os.ReadFile("../grafana/seckill.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("the dashboard has no title, uid or panels: %+v", d)
	}
	graphed := map[string]bool{}
	ids := map[int]bool{}
	var check strings.Builder
	check.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q repeats id %d", p.Title, p.ID)
		}
		ids[p.ID] = true
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for j, q := range p.Targets {
			for _, m := range metricsIn(q.Expr) {
				if !slices.Contains(have, m) {
					t.Errorf("panel %q reads %s, which the code does not export", p.Title, m)
				}
				graphed[m] = true
			}
			for r, ms := range records {
				if strings.Contains(q.Expr, r) {
					graphed[r] = true
					for _, m := range ms { // graphed through the recording rule
						graphed[m] = true
					}
				}
			}
			expr, _ := json.Marshal(q.Expr) // a JSON string is a YAML string
			check.WriteString("      - record: dashboard:panel" + string(rune('a'+i)) + string(rune('a'+j)) + "\n        expr: " + string(expr) + "\n")
		}
	}
	for _, m := range alerted {
		if !graphed[m] {
			t.Errorf("an alert reads %s, and no panel of the dashboard shows it", m)
		}
	}
	for r := range records {
		if !graphed[r] {
			t.Errorf("the recording rule %s is on no panel", r)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "panels.yml"), []byte(check.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, dir, "check", "rules", "panels.yml")
}
