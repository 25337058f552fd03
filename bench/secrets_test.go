package bench

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRoleSecretsStayOffTheCommandLine: what the bench hands a role that holds a password, a
// token or the JWT secret reaches it in the environment (SECKILL_<FLAG>, which every command
// reads), not on its command line, which ps shows anyone on the machine.
func TestRoleSecretsStayOffTheCommandLine(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "seckill")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nwhile :; do sleep 0.1; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &runner{cfg: Config{Binary: bin, WorkDir: dir}}
	p, err := r.role("api", "127.0.0.1:1", "api", "--redis-url", "redis://:hunter2@h:1/0",
		"--postgres-url", "postgres://u:hunter3@h/db", "--jwt-secret", "hunter4", "--admin-token", "hunter5",
		// as --api-flag passes them
		"--payment-token=hunter6", "-order-id-secret=hunter7", // Go takes one dash as two
		"--kafka-brokers", "k:9092")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	proc := "/proc/" + strconv.Itoa(p.Pid())
	// Read once the child has exec'd the binary: just after the fork, cmdline can be empty.
	var args string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		cmdline, err := os.ReadFile(proc + "/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		if args = strings.ReplaceAll(string(cmdline), "\x00", " "); strings.Contains(args, "bench role") {
			break
		}
	}
	if strings.Contains(args, "hunter") || !strings.Contains(args, "api --kafka-brokers k:9092") {
		t.Errorf("command line %q: want the api's other flags and no secret", args)
	}
	environ, err := os.ReadFile(proc + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Split(string(environ), "\x00")
	for _, want := range []string{"SECKILL_REDIS_URL=redis://:hunter2@h:1/0", "SECKILL_POSTGRES_URL=postgres://u:hunter3@h/db",
		"SECKILL_JWT_SECRET=hunter4", "SECKILL_ADMIN_TOKEN=hunter5", "SECKILL_PAYMENT_TOKEN=hunter6", "SECKILL_ORDER_ID_SECRET=hunter7"} {
		if !slices.Contains(env, want) {
			t.Errorf("the role's environment lacks %s", want)
		}
	}
}
