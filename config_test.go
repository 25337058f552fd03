package main

import (
	"bytes"
	"context"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// TestRolesRefuseABadRedisURL checks that a malformed Redis URL, or one of an unknown scheme,
// ends every role at once with exit code 2 and the reason, from the flag or from
// SECKILL_REDIS_URL, without the password: a role must not wait it out as it waits out an
// outage (the context here is never cancelled: a retry would hang the test).
func TestRolesRefuseABadRedisURL(t *testing.T) {
	for _, url := range []string{
		"redis+foo://127.0.0.1:7000",
		"redis+cluster://u:hunter2@127.0.0.1:7000,,127.0.0.1:7001",
		"redis+sentinel://127.0.0.1:26379",
		"127.0.0.1:6379",
	} {
		for _, role := range []string{"api", "consumer", "compensator", "audit"} {
			for _, via := range []string{"flag", "env"} {
				t.Run(role+"/"+via+"/"+url, func(t *testing.T) {
					args := []string{role}
					if via == "flag" {
						args = append(args, "--redis-url", url)
					} else {
						t.Setenv("SECKILL_REDIS_URL", url)
					}
					var out bytes.Buffer
					code := run(context.Background(), args, &out, &out)
					if code != 2 || !strings.Contains(out.String(), "invalid redis url") {
						t.Fatalf("exit %d, want 2 with the reason:\n%s", code, out.String())
					}
					if strings.Contains(out.String(), "hunter2") {
						t.Errorf("the password was printed:\n%s", out.String())
					}
				})
			}
		}
	}
}

// TestRoleWaitsOutAnUnreachableRedis is the other side: a well-formed URL of each form whose
// servers do not answer is an outage, which the compensator waits out until it is stopped (a
// clean stop, exit 0) rather than a configuration error.
func TestRoleWaitsOutAnUnreachableRedis(t *testing.T) {
	for _, url := range []string{
		"redis://127.0.0.1:1/0",
		"redis+sentinel://127.0.0.1:1,127.0.0.1:2/mymaster/0",
		"redis+cluster://127.0.0.1:1,127.0.0.1:2",
	} {
		t.Run(url, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer time.AfterFunc(2*time.Second, cancel).Stop() // a few retries in
			var out bytes.Buffer
			args := []string{"compensator", "--redis-url", url, "--metrics-addr", "127.0.0.1:0",
				"--postgres-url", "sqlite:" + filepath.Join(t.TempDir(), "db")}
			if code := run(ctx, args, &out, &out); code != 0 {
				t.Fatalf("exit %d, want 0 (stopped while waiting for redis):\n%s", code, out.String())
			}
		})
	}
}

// TestGCPercent: without GOGC every command but dev runs at gcPercent; dev, and any command
// under an operator's GOGC, keep what the runtime set.
func TestGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	unset := func(string) string { return "" }
	setGCPercent("api", unset)
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("api, GOGC unset: GC percent %d, want %d", got, gcPercent)
	}
	setGCPercent("dev", unset)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("dev, GOGC unset: GC percent changed to %d; dev keeps Go's default", got)
	}
	setGCPercent("consumer", func(k string) string { return map[string]string{"GOGC": "50"}[k] })
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("consumer, GOGC=50 set: GC percent changed to %d; the runtime's reading of GOGC must stand", got)
	}
}
