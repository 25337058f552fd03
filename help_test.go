package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// helpFlags returns the flags that seckill args --help lists.
func helpFlags(t *testing.T, args ...string) map[string]bool {
	t.Helper()
	listed, err := listedFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	return listed
}

// connFor returns the flags of conn (pairs of --flag and its value) that seckill args has: the
// harnesses' connection flags, which not every command reads.
func connFor(args, conn []string) []string {
	listed, err := listedFlags(args)
	if err != nil {
		panic(err)
	}
	var kept []string
	for i := 0; i+1 < len(conn); i += 2 {
		if listed[strings.TrimLeft(conn[i], "-")] {
			kept = append(kept, conn[i], conn[i+1])
		}
	}
	return kept
}

// listedFlags returns the flags that seckill args --help lists.
func listedFlags(args []string) (map[string]bool, error) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), append(slices.Clone(args), "--help"), &stdout, &stderr); code != 0 {
		return nil, fmt.Errorf("seckill %v --help: exit %d\n%s", args, code, stderr.String())
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if name, ok := flagOfLine(line); ok {
			listed[name] = true
		}
	}
	return listed, nil
}

// flagOfLine returns the flag a line of --help lists: "  --name=default  usage" or "  --name  usage".
func flagOfLine(line string) (string, bool) {
	rest, ok := strings.CutPrefix(line, "  --")
	if !ok {
		return "", false
	}
	name, _, _ := strings.Cut(rest, " ")
	name, _, _ = strings.Cut(name, "=")
	return name, true
}

// TestHelpFitsOnAScreen: every command's --help fits on a screen, one line a flag. The api's
// listed its thirty flags on two lines each, 67 lines in all.
func TestHelpFitsOnAScreen(t *testing.T) {
	for _, args := range everyCommand() {
		out := help(t, args)
		if n := strings.Count(out, "\n"); n > 45 {
			t.Errorf("seckill %v --help is %d lines, want at most 45:\n%s", args, n, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "    \t") { // the flag package's second line of a flag
				t.Errorf("seckill %v --help: %q, want each flag on one line", args, line)
			}
		}
	}
}

// TestHelpListsOnlyTheFlagsRead: every command's --help lists the connection flags it reads and
// no other. They are shared (flags.conn), and every command had all of them: migrate listed
// --redis-url and --kafka-brokers, which it never reads, and dlq stats --postgres-url, and an
// operator set them up for nothing.
func TestHelpListsOnlyTheFlagsRead(t *testing.T) {
	const all = "redis-url postgres-url kafka-brokers topic-prefix log-format dev data-dir"
	covered := map[string]bool{}
	for _, c := range []struct{ command, want string }{
		{"api", all},
		{"consumer", all},
		{"compensator", all},
		{"dev", "log-format data-dir"},
		{"migrate", "postgres-url log-format dev data-dir"},
		{"replay", all},
		{"compensate", all},
		{"campaign close", all},
		{"campaign extend", all},
		{"campaign add-stock", all},
		{"campaign cancel", all},
		{"demo", "dev data-dir"},
		{"dlq list", "postgres-url kafka-brokers topic-prefix dev data-dir"},
		{"dlq show", "postgres-url kafka-brokers topic-prefix dev data-dir"},
		{"dlq stats", "kafka-brokers topic-prefix dev data-dir"},
		{"dlq redrive", "redis-url postgres-url kafka-brokers topic-prefix dev data-dir"},
		{"bench", "redis-url postgres-url kafka-brokers"},
		{"audit", "redis-url postgres-url kafka-brokers topic-prefix dev data-dir"},
		{"token", "dev data-dir"},
	} {
		covered[strings.Fields(c.command)[0]] = true
		listed := helpFlags(t, strings.Fields(c.command)...)
		var got []string
		for _, name := range strings.Fields(all) {
			if listed[name] {
				got = append(got, name)
			}
		}
		if want := strings.Fields(c.want); !slices.Equal(got, want) {
			t.Errorf("seckill %s --help lists %v of the connection flags, want %v", c.command, got, want)
		}
	}
	for name := range maps.Keys(commands) {
		if !covered[name] {
			t.Errorf("seckill %s is not in the table: say which connection flags it reads", name)
		}
	}
}

// TestHelpNamesEachVariable: each flag's line of --help names its environment variable. The
// help said only "SECKILL_<FLAG>", and an operator writing a deployment had to work out that
// --max-conns-per-addr is SECKILL_MAX_CONNS_PER_ADDR.
func TestHelpNamesEachVariable(t *testing.T) {
	for _, args := range [][]string{{"api"}, {"migrate"}, {"dlq", "stats"}, {"token"}} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), append(args, "--help"), &stdout, &stderr); code != 0 {
			t.Fatalf("seckill %v --help: exit %d\n%s", args, code, stderr.String())
		}
		for _, line := range strings.Split(stdout.String(), "\n") {
			name, ok := flagOfLine(line)
			if !ok {
				continue
			}
			if want := "(or SECKILL_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + ")"; !strings.HasSuffix(line, want) {
				t.Errorf("seckill %v --help: %q, want it to end with %q", args, line, want)
			}
		}
	}
}

// TestHelpOfACommand: seckill help <command> is seckill <command> --help, as in go and git. It
// printed the list of commands, and the newcomer who typed it did not learn the flags.
func TestHelpOfACommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"help", "dlq", "stats"}, &stdout, &stderr); code != 0 ||
		!strings.HasPrefix(stdout.String(), "Usage: seckill dlq stats [flags]") {
		t.Errorf("seckill help dlq stats: exit %d, stdout %q, stderr %q; want dlq stats --help", code, stdout.String(), stderr.String())
	}
}

// TestHelpSaysTheSecretsDefaults: dev makes its secrets and keeps them in --data-dir, where its
// --help said the api's words: no --jwt-secret default, and an --order-id-secret derived from
// --jwt-secret. The api's --help did not say that it refuses to start without --jwt-secret.
func TestHelpSaysTheSecretsDefaults(t *testing.T) {
	for _, c := range []struct{ command, line, want string }{
		{"dev", "--jwt-secret", "(default: one kept in --data-dir)"},
		{"dev", "--order-id-secret", "(default: one kept in --data-dir)"},
		{"api", "--jwt-secret", "(required, unless --insecure-user-header)"},
	} {
		var stdout, stderr bytes.Buffer
		run(context.Background(), []string{c.command, "--help"}, &stdout, &stderr)
		_, usage, _ := strings.Cut(stdout.String(), "  "+c.line+" ")
		usage, _, _ = strings.Cut(usage, "\n")
		if !strings.Contains(usage, c.want) {
			t.Errorf("seckill %s --help: %s%s, want it to say %q", c.command, c.line, usage, c.want)
		}
	}
}

// everyCommand returns the arguments of every command that has a --help: each of commands, and
// each action of those that dispatch to actions (campaign's, dlq's, bench's hidden ones).
func everyCommand() [][]string {
	var all [][]string
	for _, name := range slices.Sorted(maps.Keys(commands)) {
		all = append(all, []string{name})
		var actions []string
		switch name {
		case "campaign":
			actions = slices.Sorted(maps.Keys(campaignActions))
		case "dlq":
			actions = []string{"list", "show", "stats", "redrive"}
		case "bench":
			actions = []string{"role", "role baseline", "report"}
		}
		for _, a := range actions {
			all = append(all, append([]string{name}, strings.Fields(a)...))
		}
	}
	return all
}

// help returns what seckill args --help prints.
func help(t *testing.T, args []string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), append(slices.Clone(args), "--help"), &stdout, &stderr); code != 0 {
		t.Fatalf("seckill %v --help: exit %d\n%s", args, code, stderr.String())
	}
	return stdout.String()
}

// TestHelpNamesOnlyItsFlags: a flag named in a command's --help is one of that command's flags.
// dev's --max-streams said "below --max-conns", a flag of the api that dev does not have, and
// an operator looked for it. A name of another command's flag is allowed where the text says
// whose it is, in the list below.
func TestHelpNamesOnlyItsFlags(t *testing.T) {
	elsewhere := map[string]bool{ // command: flag, each said to be another command's
		"bench: --user-rate":             true, // "extra flag for every api ... --api-flag=--user-rate=0"
		"bench: --jwt-secret":            true, // "when the api has --jwt-secret"
		"bench: --max-rate":              true, // "of the consumer ..., as its --max-rate"
		"compensator: --idempotency-ttl": true, // "the api's --idempotency-ttl"
		"dev: --dev":                     true, // "the addresses operator commands read with --dev"
	}
	named := regexp.MustCompile(`--[a-z][a-z0-9-]*`)
	for _, args := range everyCommand() {
		command := strings.Join(args, " ")
		listed := helpFlags(t, args...)
		if len(listed) == 0 {
			continue // campaign, dlq: a list of actions, which name their own flags
		}
		for _, flag := range named.FindAllString(help(t, args), -1) {
			name := strings.TrimPrefix(flag, "--")
			if !listed[name] && !elsewhere[command+": "+flag] {
				t.Errorf("seckill %s --help names %s, which it does not have", command, flag)
			}
		}
	}
}

// TestHelpShowsItsUsage: every command's --help has one Usage line, which shows the arguments
// the command takes after its flags. bench role printed two (its summary had one of its own),
// and dlq show's did not show PARTITION/OFFSET, which it requires.
func TestHelpShowsItsUsage(t *testing.T) {
	positional := map[string]string{
		"dlq show":   "PARTITION/OFFSET",
		"bench role": "api|consumer|compensator|baseline [its flags]",
	}
	for _, args := range everyCommand() {
		command := strings.Join(args, " ")
		var usage []string
		for _, line := range strings.Split(help(t, args), "\n") {
			if strings.Contains(line, "Usage:") {
				usage = append(usage, line)
			}
		}
		if len(usage) != 1 || !strings.HasPrefix(usage[0], "Usage: seckill "+command+" ") {
			t.Errorf("seckill %s --help: usage lines %q, want one, of seckill %s", command, usage, command)
			continue
		}
		if want := positional[command]; want != "" && !strings.Contains(usage[0], want) {
			t.Errorf("seckill %s --help: %q, want it to show %s", command, usage[0], want)
		}
	}
}

// TestOpsPortOnLoopbackByDefault: every role's port for operators (/metrics tells a sale's
// figures) listens on loopback unless --metrics-addr says otherwise; it listened on every
// interface (":9090"), so a role started by hand on a host with a public address served them to
// anyone.
func TestOpsPortOnLoopbackByDefault(t *testing.T) {
	for _, role := range []string{"api", "consumer", "compensator"} {
		if out := help(t, []string{role}); !strings.Contains(out, "--metrics-addr=127.0.0.1:9090 ") {
			t.Errorf("seckill %s --help: want --metrics-addr=127.0.0.1:9090 by default:\n%s", role, out)
		}
	}
}
