package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/bench"
)

// TestBenchTakesItsWorkloadFromItsCommandLine: variables set for other commands (SECKILL_RATE
// for seckill demo, SECKILL_BATCH_SIZE for the consumers) share names with bench's flags, and
// turned a bench open-loop or changed its drain. Only its servers come from the environment:
// here the malformed values would stop it with their names, and the unknown scenario is what it
// reports instead.
func TestBenchTakesItsWorkloadFromItsCommandLine(t *testing.T) {
	t.Setenv("SECKILL_RATE", "fast")
	t.Setenv("SECKILL_BATCH_SIZE", "many")
	t.Setenv("SECKILL_ROUNDS", "0")
	var out bytes.Buffer
	code := run(context.Background(), []string{"bench", "--scenarios", "nope"}, &out, &out)
	if code != 2 || !strings.Contains(out.String(), "nope") || strings.Contains(out.String(), "SECKILL_") {
		t.Errorf("bench with SECKILL_RATE, SECKILL_BATCH_SIZE and SECKILL_ROUNDS set, and an unknown scenario: exit %d\n%s\nwant 2 for the scenario, the variables unread", code, out.String())
	}
}

func TestBenchRoleNeedsARole(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"bench", "role", "--pprof", "127.0.0.1:0", "nope"}, &out, &out); code != 2 {
		t.Fatalf("bench role nope exited %d:\n%s", code, out.String())
	}
}

func TestBenchReportRewritesFromAResult(t *testing.T) {
	dir := t.TempDir()
	res := &bench.Result{Started: time.Now(), Command: "seckill bench --quick", Sizes: bench.QuickSizes(),
		Scenarios: []bench.ScenarioResult{{Name: bench.ScConstant, Baseline: true, Unit: "req/s", Throughput: 1000}}}
	path, err := res.Save(dir, "run")
	if err != nil {
		t.Fatal(err)
	}
	readme := filepath.Join(dir, "README.md")
	os.WriteFile(readme, []byte("## Performance\n"+bench.ReadmeBegin+"\n"+bench.ReadmeEnd+"\n"), 0o644)
	var out bytes.Buffer
	if code := run(context.Background(), []string{"bench", "report", "--result", path, "--readme", readme}, &out, &out); code != 0 {
		t.Fatalf("bench report exited %d:\n%s", code, out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "run.html")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(readme); !bytes.Contains(b, []byte("| constant | baseline | 1,000 req/s |")) {
		t.Fatalf("README:\n%s", b)
	}
}

// TestBenchCommandHidesSecrets: the result and the README's table carry the bench's command
// line; a secret handed to the apis through --api-flag, in either form, stays out of it.
func TestBenchCommandHidesSecrets(t *testing.T) {
	f := newFlags("bench", "", io.Discard)
	var apiFlags multiFlag
	f.Var(&apiFlags, "api-flag", "")
	f.String("token-secret", "", "")
	if err := f.Parse([]string{"--api-flag=--payment-token=hunter6", "--api-flag=--user-rate=0",
		"--api-flag=--order-id-secret", "--api-flag=hunter7", "--token-secret=hunter8"}); err != nil {
		t.Fatal(err)
	}
	got := benchCommand(f, nil)
	if strings.Contains(got, "hunter") || !strings.Contains(got, "--api-flag=--user-rate=0") || !strings.Contains(got, "--api-flag=--payment-token=…") {
		t.Errorf("bench's command line for the report: %q; want the api flags without their secrets", got)
	}
}

// TestBenchReadsTheRolesFlags: the bench adapts to the flags a role's --help lists (it turns the
// per-address limit off, as its one load generator is one address). Help lists a flag with a
// default as --name=default, which the bench read as the name "ip-rate=2000": the api kept its
// limit of 2,000 requests a second, and every scenario's buyers were refused 429 by the
// hundred thousand.
func TestBenchReadsTheRolesFlags(t *testing.T) {
	flags := bench.FlagsOf(seckillBinary(t, false), "api")
	for _, name := range []string{"ip-rate", "jwt-secret", "metrics-addr", "insecure-user-header"} {
		if !flags[name] {
			t.Errorf("the bench reads no --%s in seckill api --help: %v", name, flags)
		}
	}
}
