package bench

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// The README's Performance section holds the latest table between these markers.
const (
	ReadmeBegin = "<!-- bench:begin (written by seckill bench --readme; edits inside are overwritten) -->"
	ReadmeEnd   = "<!-- bench:end -->"
)

// Markdown returns the run's tables for the README: the targets, then the scenarios.
func (r *Result) Markdown(jsonPath, htmlPath string) string {
	var b strings.Builder
	commit := ""
	if r.Host.Commit != "" {
		commit = " of " + r.Host.Commit
	}
	fmt.Fprintf(&b, "Latest run%s: %s on %d × %s (%d GiB), everything colocated; buyers named by %s.\n",
		commit, r.Started.Format("2006-01-02"), r.Host.CPUs, r.Host.CPU, r.Host.MemoryGiB, r.Identity)
	fmt.Fprintf(&b, "Produced by `%s`; full result in [`%s`](%s), report in [`%s`](%s).\n\n", r.Command, jsonPath, jsonPath, htmlPath, htmlPath)
	b.WriteString("Each target is judged on the median of its rounds, an exact count on every round; the rounds ran one after another, so each ratio's two scenarios alternated.\n\n")
	b.WriteString("| target | median | rounds | want | | note |\n|---|--:|--:|--:|---|---|\n")
	for _, t := range r.Targets {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", t.Name, t.GotString(), t.Spread(), t.WantString(), t.Verdict(), strings.ReplaceAll(t.Note, "|", "/"))
	}
	b.WriteString("\n| scenario | | throughput | p50 | p99 | p99.9 | CPU per op | answers | load |\n|---|---|--:|--:|--:|--:|---|---|--:|\n")
	for _, s := range r.Scenarios {
		kind := "seckill"
		if s.Baseline {
			kind = "baseline"
		}
		if s.Error != "" {
			fmt.Fprintf(&b, "| %s | %s | failed: %s | | | | | | |\n", s.Label(), kind, firstLine(s.Error))
			continue
		}
		l := s.Latency
		lat := func(v float64) string {
			if v == 0 {
				return "–"
			}
			return fmtMs(v)
		}
		fmt.Fprintf(&b, "| %s | %s | %s %s | %s | %s | %s | %s | %s | %.1f |\n", s.Label(), kind, rate(s.Throughput), s.Unit,
			lat(l.P50), lat(l.P99), lat(l.P999), s.CPUString(), strings.ReplaceAll(s.Answers(), "|", "/"), s.LoadAvg)
	}
	b.WriteString("\nCPU per op: CPU time of each server process per request (per order for the drains), the local\nRedis, PostgreSQL (all backends) and Kafka broker included: steadier than throughput on a shared\nmachine, and it shows where a request's cost lands. load: the one-minute load average when the scenario started (2 cores).\n")
	for _, s := range r.Scenarios {
		if f := s.Flash; f != nil {
			fmt.Fprintf(&b, "\nflash-crowd: %s. %s.\n", s.FlashTimes(), f.Line())
		}
	}
	return b.String()
}

// UpdateReadme replaces what lies between the bench markers of the file at path with block.
func UpdateReadme(path, block string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i := bytes.Index(b, []byte(ReadmeBegin))
	j := bytes.Index(b, []byte(ReadmeEnd))
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q … %q block to write the table into", path, ReadmeBegin, ReadmeEnd)
	}
	var out bytes.Buffer
	out.Write(b[:i+len(ReadmeBegin)])
	out.WriteString("\n" + strings.TrimSpace(block) + "\n")
	out.Write(b[j:])
	return writeFileAtomic(path, out.Bytes())
}
