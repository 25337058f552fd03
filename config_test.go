package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua/luatest"
	"github.com/seckill/seckill/store/storetest"
)

// TestRolesRefuseABadRedisURL checks that a malformed Redis URL, or one of an unknown scheme,
// ends every role at once with exit code 2 and the reason, from the flag or from
// SECKILL_REDIS_URL, without the password: a role must not wait it out as it waits out an
// outage (the context here is never cancelled: a retry would hang the test).
func TestRolesRefuseABadRedisURL(t *testing.T) {
	for _, url := range []string{
		"redis+foo://127.0.0.1:7000",
		"redis+cluster://u:hunter2@127.0.0.1:7000,,127.0.0.1:7001",
		// Passwords that hold an unencoded '?' or '/', and the sentinels' own password.
		"redis+cluster://u:hunter2?x@127.0.0.1:7000",
		"redis+sentinel://u:hunter2/x@127.0.0.1:26379/m",
		"redis+sentinel://127.0.0.1:26379/m/zero?sentinel_password=hunter2",
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
				"--postgres-url", migratedSQLite(t)}
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

// TestBadConfigStopsAtOnce: a value no server could mend (a negative duration, a zero batch, a
// store URL of another scheme, a broken variable) ends the command at once with exit 2 and
// the reason on stderr, before it connects to anything. The context outlives none of them: a
// command that waited instead would run into it and exit 0.
func TestBadConfigStopsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string // NAME=value
		want string
	}{
		{[]string{"api", "--reservation-ttl", "-5s"}, "", "--reservation-ttl: want a positive duration"},
		{[]string{"api", "--partitions", "0"}, "", "--partitions: want at least 1"},
		{[]string{"api", "--produce-linger", "-1ms"}, "", "--produce-linger: want a duration of 0 or more"},
		{[]string{"api", "--produce-timeout", "0s"}, "", "--produce-timeout: want a positive duration"},
		// Every purchase of a quiet sale would wait the linger in the producer, and time out.
		{pointedNowhere("api", "--insecure-user-header", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--produce-linger", "3s"), "", "--produce-linger 3s: want below --produce-timeout (3s)"},
		{[]string{"api", "--idempotency-ttl", "-1h"}, "", "--idempotency-ttl: want a positive duration"},
		{[]string{"api", "--insecure-user-header", "--max-conns", "1000", "--max-streams", "1000"}, "", "--max-streams 1000: want below --max-conns (1000)"},
		{pointedNowhere("api", "--insecure-user-header", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--max-conns", "1000"), "SECKILL_MAX_STREAMS=1000", "--max-streams 1000: want below --max-conns (1000)"},
		{[]string{"api", "--max-streams-per-buyer", "0"}, "", "--max-streams-per-buyer: want at least 1"},
		{[]string{"consumer", "--batch-size", "0"}, "", "--batch-size: want at least 1"},
		{[]string{"consumer", "--max-rate", "-1"}, "", "--max-rate: want at least 0"},
		{[]string{"compensator", "--sweep-interval", "0s"}, "", "--sweep-interval: want a positive duration"},
		// 0 is PostgreSQL's lock_timeout of no bound: what the flag is there to prevent.
		{[]string{"migrate", "--lock-timeout", "0s"}, "", "--lock-timeout: want a positive duration"},
		{[]string{"migrate"}, "SECKILL_LOCK_TIMEOUT=-1s", "--lock-timeout: want a positive duration (--lock-timeout is SECKILL_LOCK_TIMEOUT from the environment)"},
		{[]string{"consumer", "--postgres-url", "mysql://x"}, "", `unsupported url "mysql://x"`},
		// net/url's escape error quotes the '%' and the two characters after it, a piece of the
		// password.
		{[]string{"consumer", "--postgres-url", "postgres://u:hunter2%zz@h/db"}, "", `a '%' not followed by two hex digits: percent-encode a '%' as %25`},
		{[]string{"consumer", "--redis-url", "redis://:hunter2%zz@h:1/0"}, "", `invalid redis url: a '%' not followed by two hex digits`},
		{[]string{"consumer", "--redis-url", "redis+sentinel://s1/m?sentinel_password=hunter2%zz"}, "", `invalid redis url: a '%' not followed by two hex digits`},
		// A mistyped or missing scheme: the usage error quotes the URL, never its password.
		{[]string{"migrate", "--postgres-url", "postgres:/u:hunter2@h:5432/db"}, "", `unsupported url "postgres:/u:xxxxx@h:5432/db"`},
		{[]string{"migrate", "--postgres-url", "seckill:hunter2@db:5432/seckill"}, "", `unsupported url "seckill:xxxxx@db:5432/seckill"`},
		{[]string{"migrate"}, "SECKILL_POSTGRES_URL=seckill:hunter2@db:5432/seckill", `unsupported url`},
		{[]string{"audit", "--redis-url", "redis:/:hunter2@h:1/0"}, "", "--redis-url redis:/:xxxxx@h:1/0: invalid redis url"},
		{[]string{"audit", "--redis-url", ":hunter2@10.0.0.5:6379"}, "", "invalid redis url"},
		// A password that holds an unencoded '/' ends the host early: lib/pq's error would quote
		// what precedes it as the port.
		{[]string{"migrate", "--postgres-url", "postgres://u:hunter2/x@h:5432/db"}, "", "an '@' after the host"},
		// Values lib/pq refuses only when it connects, and an invalid port: the roles retried
		// them for ever, as if the server were down.
		{[]string{"consumer", "--postgres-url", "postgres://u:hunter2@h:5432/db?sslmode=bogus"}, "", `wrong value for "sslmode"`},
		{[]string{"api", "--insecure-user-header", "--postgres-url", "postgres://u:hunter2@127.0.0.1:99999/db"}, "", `wrong value for "port"`},
		{[]string{"compensator", "--postgres-url", "postgres://u:hunter2@h/db?connect_timeout=abc"}, "", `wrong value for "connect_timeout"`},
		{[]string{"compensator", "--postgres-url", "postgres://u:hunter2@127.0.0.1:0/db"}, "", "port 0: want 1 to 65535"},
		{[]string{"consumer", "--redis-url", "redis://:hunter2@127.0.0.1:99999/0"}, "", `invalid redis url: address "127.0.0.1:99999": want host:port`},
		{[]string{"consumer", "--redis-url", "redis://127.0.0.1:0/0"}, "", `invalid redis url: address "127.0.0.1:0": want host:port`},
		{[]string{"consumer", "--log-format", "yaml"}, "", "--log-format: want json or text"},
		{[]string{"dev", "--log-format", "yaml"}, "", "--log-format: want json or text"},
		{[]string{"consumer", "--kafka-brokers", ""}, "", "--kafka-brokers: want host:port"},
		{[]string{"consumer", "--kafka-brokers", "http://127.0.0.1:9092"}, "", `--kafka-brokers: want host:port seed brokers, comma-separated (got "http://127.0.0.1:9092")`},
		{[]string{"api", "--insecure-user-header", "--kafka-brokers", "127.0.0.1:9092,kafka:90o2"}, "", `(got "kafka:90o2")`},
		{[]string{"api", "--insecure-user-header", "--addr", "8080"}, "", `--addr "8080": want host:port`},
		// One port for both: the api's own --addr held it, and it said another process had it.
		{pointedNowhere("api", "--insecure-user-header", "--addr", ":18080", "--metrics-addr", "127.0.0.1:18080"), "", `--metrics-addr "127.0.0.1:18080": want another port than --addr's (":18080")`},
		{[]string{"consumer", "--metrics-addr", "127.0.0.1:99999"}, "", `--metrics-addr "127.0.0.1:99999": want host:port`},
		{[]string{"compensator", "--metrics-addr", ""}, "", `--metrics-addr "": want host:port`},
		{[]string{"dev", "--addr", "localhost"}, "", `--addr "localhost": want host:port`},
		{[]string{"api", "--insecure-user-header", "--topic-prefix", "bad prefix!"}, "", `--topic-prefix "bad prefix!": want 1 to 232 letters, digits, '.', '_' or '-'`},
		{[]string{"consumer", "--topic-prefix", ""}, "", `--topic-prefix "": want 1 to 232`},
		{[]string{"replay", "--from", "yesterday"}, "", `replay: --from "yesterday": want an RFC 3339 time`},
		// No event is after it: replayed, it read none, caught the store up and exited 0.
		{pointedNowhere("replay", "--from", "2999-01-01T00:00:00Z"), "", `replay: --from "2999-01-01T00:00:00Z": a time to come`},
		{[]string{"api"}, "", "buyers cannot authenticate: give --jwt-secret (SECKILL_JWT_SECRET)"},
		{[]string{"api", "--jwt-secret", "short"}, "", "--jwt-secret (SECKILL_JWT_SECRET): want at least 32 bytes"},
		{[]string{"api", "--insecure-user-header", "--admin-token", "short"}, "", "--admin-token (SECKILL_ADMIN_TOKEN): want at least 32 bytes"},
		{[]string{"api", "--insecure-user-header", "--payment-token", "short"}, "", "--payment-token (SECKILL_PAYMENT_TOKEN): want at least 32 bytes"},
		{[]string{"api", "--insecure-user-header", "--order-id-secret", "short"}, "", "--order-id-secret (SECKILL_ORDER_ID_SECRET): want at least 32 bytes"},
		{pointedNowhere("api", "--insecure-user-header", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--admin-token", "hunter2-hunter2-hunter2-hunter2-x", "--payment-token", "hunter2-hunter2-hunter2-hunter2-x"), "",
			"--payment-token: want another value than --admin-token's"},
		// The login service that signs buyers' tokens would hold an admin's or the payment
		// service's powers too.
		{pointedNowhere("api", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--jwt-secret", "hunter2-hunter2-hunter2-hunter2-x", "--admin-token", "hunter2-hunter2-hunter2-hunter2-x"), "",
			"--admin-token: want another value than --jwt-secret's"},
		{pointedNowhere("api", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--payment-token", "hunter2-hunter2-hunter2-hunter2-x"), "SECKILL_JWT_SECRET=hunter2-hunter2-hunter2-hunter2-x",
			"--payment-token: want another value than --jwt-secret's"},
		{[]string{"dev", "--admin-token", "short"}, "", "--admin-token (SECKILL_ADMIN_TOKEN): want at least 32 bytes"},
		{[]string{"token", "--user", "bob", "--jwt-secret", "short"}, "", "--jwt-secret (SECKILL_JWT_SECRET): want at least 32 bytes"},
		// The missing flag or bad value first, with --dev too: it read the dev's file, and said
		// no dev ran there (exit 1); started, the operator was told of the flag.
		{[]string{"compensate", "--dev", "--data-dir", "/nonexistent"}, "", "compensate: give one of --order and --campaign"},
		{[]string{"campaign", "close", "--dev", "--data-dir", "/nonexistent"}, "", "campaign close: --id is required"},
		{[]string{"campaign", "add-stock", "--id", "x", "--dev", "--data-dir", "/nonexistent"}, "", "campaign add-stock: give --add N"},
		{[]string{"campaign", "extend", "--id", "x", "--dev", "--data-dir", "/nonexistent"}, "", "campaign extend: --ends-at: required"},
		{[]string{"replay", "--dev", "--data-dir", "/nonexistent"}, "", "replay: --from is required"},
		{[]string{"audit", "--dev", "--data-dir", "/nonexistent", "--campaign", "bad id!"}, "", `--campaign "bad id!": want 1 to 64 letters`},
		{[]string{"dlq", "show", "--dev", "--data-dir", "/nonexistent"}, "", "dlq show: name one dead letter as PARTITION/OFFSET"},
		{[]string{"dlq", "list", "--dev", "--data-dir", "/nonexistent", "--since", "yesterday"}, "", `dlq: --since "yesterday" is neither`},
		// The missing flag first: it read the dev's file, and said no dev ran there (exit 1).
		{[]string{"token", "--dev", "--data-dir", "/nonexistent"}, "", "token: --user and --jwt-secret (or SECKILL_JWT_SECRET, or --dev) are required"},
		{[]string{"api", "--insecure-user-header", "--user-rate", "-1"}, "", "--user-rate: want 0 or more"},
		{[]string{"api", "--insecure-user-header", "--ip-rate", "-1"}, "", "--ip-rate: want 0 or more"},
		{pointedNowhere("api", "--insecure-user-header", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--ip-rate", "Inf"), "", "--ip-rate: want 0 or more, at most 1000000000"},
		{pointedNowhere("api", "--insecure-user-header", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--user-rate", "+Inf"), "", "--user-rate: want 0 or more, at most 1000000000"},
		{pointedNowhere("api", "--insecure-user-header", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--user-rate", "1e300"), "", "--user-rate: want 0 or more, at most 1000000000"},
		{pointedNowhere("api", "--insecure-user-header", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--user-rate", "NaN"), "", "--user-rate: want 0 or more"},
		{pointedNowhere("api", "--insecure-user-header", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"), "SECKILL_IP_RATE=inf", "--ip-rate: want 0 or more, at most 1000000000"},
		{[]string{"api", "--insecure-user-header", "--max-conns", "-1"}, "", "--max-conns: want 0 or more"},
		{[]string{"api", "--insecure-user-header", "--max-conns-per-addr", "-1"}, "", "--max-conns-per-addr: want 0 or more"},
		{[]string{"api", "--insecure-user-header", "--max-streams", "-1"}, "", "--max-streams: want 0 or more"},
		{[]string{"api", "--insecure-user-header", "--max-streams-per-addr", "-1"}, "", "--max-streams-per-addr: want 0 or more"},
		{[]string{"campaign", "add-stock", "--id", "x", "--add", "-5"}, "", "campaign add-stock: --add -5: want at least 1"},
		{[]string{"campaign", "add-stock", "--id", "x", "--to", "-5"}, "", "campaign add-stock: --to -5: want at least 1"},
		{[]string{"campaign", "add-stock", "--id", "x", "--add", "0"}, "", "campaign add-stock: give --add N (units to put on sale) or --to TOTAL"},
		{pointedNowhere("compensate", "--order", "abc"), "", `--order "abc": want CAMPAIGN.ID`},
		{pointedNowhere("compensate", "--order", " "), "", `--order " ": want CAMPAIGN.ID`},
		{pointedNowhere("compensate", "--campaign", " "), "", `--campaign " ": want 1 to 64 letters`},
		{pointedNowhere("compensate", "--campaign", "demo.x"), "", `--campaign "demo.x": want 1 to 64 letters`},
		{pointedNowhere("campaign", "close", "--id", "bad id!"), "", `--id "bad id!": want 1 to 64 letters`},
		{pointedNowhere("campaign", "cancel", "--id", "-x"), "", `--id "-x": want 1 to 64 letters`},
		{pointedNowhere("campaign", "extend", "--id", " ", "--ends-at", "+1h"), "", `--id " ": want 1 to 64 letters`},
		{pointedNowhere("campaign", "add-stock", "--id", "a/b", "--add", "1"), "", `--id "a/b": want 1 to 64 letters`},
		{pointedNowhere("audit", "--campaign", "bad id!"), "", `--campaign "bad id!": want 1 to 64 letters`},
		{pointedNowhere("dlq", "list", "--campaign", "bad id!"), "", `--campaign "bad id!": want 1 to 64 letters`},
		{pointedNowhere("dlq", "redrive", "--campaign", "bad id!"), "", `--campaign "bad id!": want 1 to 64 letters`},
		// What a command changes is picked on its command line only: a SECKILL_CAMPAIGN
		// exported for audits made a bare compensate release and refund that whole campaign.
		{pointedNowhere("compensate"), "SECKILL_CAMPAIGN=demo", "compensate: give one of --order and --campaign"},
		{pointedNowhere("compensate"), "SECKILL_ORDER=demo.x", "compensate: give one of --order and --campaign"},
		{pointedNowhere("campaign", "cancel"), "SECKILL_ID=demo", "campaign cancel: --id is required"},
		{[]string{"demo", "--dev=false", "--api-url", "http://127.0.0.1:1"}, "", "demo: without --dev, give --api-url and --admin-token"},
		{[]string{"demo", "--dev=false", "--admin-token", "t"}, "", "demo: without --dev, give --api-url and --admin-token"},
		{[]string{"demo", "--api-url", "http://127.0.0.1:1"}, "SECKILL_DEV=false", "demo: without --dev, give --api-url and --admin-token"},
		{[]string{"replay", "--from", "start", "--batch-size", "-3"}, "", "--batch-size: want at least 1"},
		{[]string{"replay", "--from", "start", "--max-rate", "-1"}, "", "--max-rate: want at least 0"},
		{[]string{"dlq", "list", "--since", "-1h"}, "", "--since -1h: want a duration ago"},
		{[]string{"audit", "--grace", "-5s"}, "", "--grace: want a positive duration"},
		// A value a variable set is named as such: the manifest has no command line to look at.
		{[]string{"consumer"}, "SECKILL_BATCH_SIZE=-1", "--batch-size: want at least 1 (--batch-size is SECKILL_BATCH_SIZE from the environment)"},
		{[]string{"dlq", "list"}, "SECKILL_SINCE=-1h", "dlq: --since -1h: want a duration ago of 0 or more (--since is SECKILL_SINCE from the environment)"},
		{[]string{"api", "--insecure-user-header", "--max-conns", "10"}, "SECKILL_MAX_STREAMS=10",
			"(10): every stream holds a connection, and purchases need the others (--max-streams is SECKILL_MAX_STREAMS from the environment)\n"},
		{[]string{"audit", "--grace", "0s"}, "", "--grace: want a positive duration"},
		{[]string{"consumer"}, "SECKILL_BATCH_SIZE=abc", `SECKILL_BATCH_SIZE="abc": want a whole number, as --batch-size`},
		// The flag says what its variable says: the flag package's own error is "parse error".
		{[]string{"consumer", "--session-timeout", "5"}, "", `--session-timeout "5": want a duration such as 5s or 2m (seckill consumer --help lists the flags)`},
		{[]string{"consumer", "--batch-size=abc"}, "", `--batch-size "abc": want a whole number`},
		{[]string{"api", "--insecure-user-header=maybe"}, "", `--insecure-user-header "maybe": want true or false`},
		{[]string{"consumer", "--no-such-flag"}, "", "flag provided but not defined: -no-such-flag (seckill consumer --help lists the flags)"},
		{[]string{"compensator"}, "SECKILL_SWEEP_INTERVAL=5", `SECKILL_SWEEP_INTERVAL="5": want a duration such as 5s or 2m, as --sweep-interval`},
		{[]string{"bench", "--scenarios", "bogus"}, "", `unknown scenario "bogus"`},
		{[]string{"bench", "--binary", "/nonexistent", "--batch-size", "-5"}, "", "--batch-size must be 0 or more"},
		{[]string{"bench", "--binary", "/nonexistent", "--drain-timeout", "-1m"}, "", "drain timeout -1m0s: want a positive duration"},
		{[]string{"bench", "--binary", "/nonexistent", "--rounds", "0"}, "", "--rounds: want at least 1"},
		{[]string{"bench", "--binary", "/nonexistent", "--concurrency", "-1"}, "", "bench: --concurrency -1: want at least 1"},
		{[]string{"bench", "role", "--pprof", "nope", "api"}, "", `--pprof "nope": want host:port`},
		{[]string{"demo", "--api-url", "127.0.0.1:8080", "--admin-token", "t"}, "", `--api-url "127.0.0.1:8080": want http://host:port`},
		{[]string{"demo", "--api-url", "ftp://127.0.0.1:8080", "--admin-token", "t"}, "", `--api-url "ftp://127.0.0.1:8080": want http://host:port`},
		{[]string{"demo", "--api-url", "http://127.0.0.1:1", "--admin-token", "t", "--stock", "1099511627777"}, "", "--stock 1099511627777: want at most 1099511627776"},
		// bench checks its servers' flags as the roles do: it dialled a malformed one, or
		// printed the password in the parse error of its own schema's URL, and exited 1.
		{[]string{"bench", "--binary", "/nonexistent", "--redis-url", "http://:hunter2@h:1/0"}, "", "--redis-url http://:xxxxx@h:1/0: invalid redis url"},
		{[]string{"bench", "--binary", "/nonexistent", "--postgres-url", "postgres://u:hunter2@127.0.0.1:99999/x"}, "", "--postgres-url postgres://u:xxxxx@127.0.0.1:99999/x"},
		{[]string{"bench", "--binary", "/nonexistent", "--kafka-brokers", "http://k:1"}, "", "--kafka-brokers: want host:port"},
		// The flag wins over its variable, so a broken variable the flag replaces is no error:
		// the command gets as far as the next bad value.
		{[]string{"consumer", "--batch-size", "10", "--postgres-url", "mysql://x"}, "SECKILL_BATCH_SIZE=abc", "unsupported url"},
	} {
		t.Run(strings.Join(tc.args, " ")+" "+tc.env, func(t *testing.T) {
			if name, value, ok := strings.Cut(tc.env, "="); ok {
				t.Setenv(name, value)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			code := run(ctx, tc.args, &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 with %q on stderr", code, stdout.String(), stderr.String(), tc.want)
			}
			if strings.Contains(stderr.String(), "hunter2") {
				t.Errorf("the password was printed: %s", stderr.String())
			}
		})
	}
}

// pointedNowhere is the command args pointed at servers that do not answer, so that a bad value
// it let through fails as exit 1, not as a change to a server this test did not start.
func pointedNowhere(args ...string) []string {
	conn := []string{"--redis-url", "redis://127.0.0.1:1/0", "--postgres-url", "postgres://u@127.0.0.1:1/x", "--kafka-brokers", "127.0.0.1:1"}
	return append(args, connFor(args, conn)...)
}

// TestUnreachableSaysWhatToDo: an operator command whose server does not answer waits for
// nothing (only the roles wait): it stops at once with exit 1, and says where to point it,
// --dev included, as a newcomer's first `seckill audit` without --dev dials 127.0.0.1:5432.
// It names no flag the command lacks: migrate was told to point --redis-url and
// --kafka-brokers, which it refuses.
func TestUnreachableSaysWhatToDo(t *testing.T) {
	for _, args := range [][]string{
		{"audit", "--postgres-url", "postgres://u:p@127.0.0.1:1/db"},
		{"campaign", "close", "--id", "x", "--postgres-url", migratedSQLite(t), "--redis-url", "redis://127.0.0.1:1/0"},
		{"dlq", "stats", "--kafka-brokers", "127.0.0.1:1"},
		{"migrate", "--postgres-url", "postgres://u:p@127.0.0.1:1/db"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			code := run(ctx, args, &stdout, &stderr)
			command := args[0]
			if command == "campaign" || command == "dlq" {
				command += " " + args[1]
			}
			want := "nothing answers there; start it, point seckill at yours (seckill " + command + " --help names the flag of each server), or give --dev to reach make run"
			if code != 1 || ctx.Err() != nil || !strings.Contains(stderr.String(), want) {
				t.Errorf("exit %d (after its deadline: %v), stderr %q; want exit 1 at once with %q", code, ctx.Err() != nil, stderr.String(), want)
			}
		})
	}
}

// TestUnreachableNamesItsServer: the error of a server that does not answer says which server,
// with its URL, as the store's does: an unreachable Redis said only "load scripts: dial tcp …".
func TestUnreachableNamesItsServer(t *testing.T) {
	sqlite := migratedSQLite(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "--postgres-url", "postgres://u:p@127.0.0.1:1/db"}, "open store postgres://u:xxxxx@127.0.0.1:1/db: dial tcp 127.0.0.1:1"},
		{[]string{"campaign", "close", "--id", "x", "--postgres-url", sqlite, "--redis-url", "redis://:p@127.0.0.1:1/0"}, "open redis redis://:xxxxx@127.0.0.1:1/0: "},
		{[]string{"campaign", "close", "--id", "x", "--postgres-url", sqlite, "--redis-url", "redis+cluster://127.0.0.1:1"}, "open redis redis+cluster://127.0.0.1:1: "},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			if code := run(ctx, tc.args, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 1 with %q", code, stderr.String(), tc.want)
			}
		})
	}
}

// TestTakenPortStopsAtOnce: a role whose port another process holds stops at once, saying which
// flag to change. It used to wait for its servers first (for ever, while they are down) and
// only then find the port taken; /healthz was not served while it waited either.
func TestTakenPortStopsAtOnce(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := held.Addr().String()
	down := []string{"--postgres-url", "postgres://u:p@127.0.0.1:1/db", "--redis-url", "redis://127.0.0.1:1/0", "--kafka-brokers", "127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"api", "--insecure-user-header", "--addr", taken}, "--addr"},
		{[]string{"api", "--insecure-user-header", "--addr", "127.0.0.1:0", "--metrics-addr", taken}, "--metrics-addr"},
		{[]string{"consumer", "--metrics-addr", taken}, "--metrics-addr"},
		{[]string{"compensator", "--metrics-addr", taken}, "--metrics-addr"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			code := run(ctx, append(tc.args, down...), &stdout, &stderr)
			want := tc.flag + " " + taken
			if code != 1 || ctx.Err() != nil || !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "give another with "+tc.flag) {
				t.Errorf("exit %d (after its deadline: %v), stderr %q; want exit 1 at once naming %q and saying to give another", code, ctx.Err() != nil, stderr.String(), want)
			}
		})
	}
}

// TestOpsAnswerWhileTheRoleWaits: a role waiting for its servers serves /healthz (it is alive:
// a liveness probe that restarts it gains nothing, it would wait again) and answers /readyz
// 503 saying why. Nothing listened on --metrics-addr until every server had answered.
func TestOpsAnswerWhileTheRoleWaits(t *testing.T) {
	ops := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"consumer", "--metrics-addr", ops, "--postgres-url", "postgres://u:p@127.0.0.1:1/db",
			"--redis-url", "redis://127.0.0.1:1/0", "--kafka-brokers", "127.0.0.1:1"}, io.Discard, io.Discard)
	}()
	defer func() { cancel(); <-exited }()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + ops + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(10 * time.Second)
	code, body := get("/healthz")
	for code != http.StatusOK && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		code, body = get("/healthz")
	}
	if code != http.StatusOK {
		t.Fatalf("/healthz of a consumer waiting for its servers: %d %s, want 200", code, body)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for the store, Redis and Kafka") {
		t.Errorf("/readyz: %d %q, want 503 saying what it waits for", code, body)
	}
}

// TestReplayHelpNamesMaxRate: replay --help documents --max-rate, the pace of its orders, and
// that 0, the default, is unpaced.
func TestReplayHelpNamesMaxRate(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"replay", "--help"}, &stdout, &stderr); code != 0 ||
		!regexp.MustCompile(`\n  --max-rate +[^\n]*orders[^\n]*per second[^\n]*0: unpaced`).MatchString(stdout.String()) {
		t.Errorf("replay --help: exit %d, stdout %q; want --max-rate, its unit and its default", code, stdout.String())
	}
}

// TestHelpWins: --help prints the flags on stdout and exits 0 whatever the environment holds,
// and a positional argument after the flags is read where a command takes one.
func TestHelpWins(t *testing.T) {
	t.Setenv("SECKILL_BATCH_SIZE", "abc")
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"consumer", "--help"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "--batch-size=500") || stderr.Len() != 0 {
		t.Errorf("consumer --help under a broken variable: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	dir := t.TempDir()
	code := run(context.Background(), []string{"dlq", "show", "--dev", "--data-dir", dir, "1/0"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "no seckill dev is running on "+dir) {
		t.Errorf("dlq show with its position after the flags: exit %d, stderr %q; want the flags read and the missing dev named", code, stderr.String())
	}
}

// redisReply is an error reply of Redis's, as go-redis returns it.
type redisReply string

func (e redisReply) Error() string { return string(e) }
func (redisReply) RedisError()     {}

// TestRedisRefusedForGood: a Redis that refuses us for a reason no wait changes stops the role
// with it; one that is down, loading or read-only is waited out. (store.Open says the same of
// the store's refusals: TestOpenRefusedIsPermanent.)
func TestRedisRefusedForGood(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("open redis: %w", redisReply("WRONGPASS invalid username-password pair")), true},
		{redisReply("NOAUTH Authentication required."), true},
		{fmt.Errorf("load scripts: %w", redisReply("NOPERM User seckill has no permissions to run the 'info' command")), true},
		{redisReply("ERR DB index is out of range"), true},
		{redisReply("LOADING Redis is loading the dataset in memory"), false},
		{redisReply("READONLY You can't write against a read only replica."), false},
		{errors.New("dial tcp 127.0.0.1:6379: connect: connection refused"), false},
	} {
		if got := redisRefused(c.err); got != c.want {
			t.Errorf("redisRefused(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestInterruptedOperationFails: a one-shot command stopped by a signal (here a context
// cancelled before it could reach its servers) has not done what it was asked, and must not
// exit 0 as if it had: `seckill audit && deploy` would read an interrupted audit as a clean
// one. Only a role, which runs until it is stopped, takes the stop as its clean end.
func TestInterruptedOperationFails(t *testing.T) {
	storeURL := storetest.SQLiteURL(t)
	mr := miniredis.RunT(t)
	conn := []string{"--postgres-url", storeURL, "--redis-url", "redis://" + mr.Addr() + "/0", "--kafka-brokers", freeAddr(t)}
	for _, args := range [][]string{
		{"migrate"},
		{"audit"},
		{"replay", "--from", "start"},
		{"dlq", "list"},
		{"compensate", "--order", "c.x"},
		{"campaign", "close", "--id", "c"},
	} {
		t.Run(args[0], func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var stdout, stderr bytes.Buffer
			if code := run(ctx, append(args, connFor(args, conn)...), &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "context canceled") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and why it stopped", code, stdout.String(), stderr.String())
			}
		})
	}
	t.Run("compensator", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var out bytes.Buffer
		if code := run(ctx, append([]string{"compensator", "--metrics-addr", "127.0.0.1:0"}, conn...), &out, &out); code != 0 {
			t.Fatalf("exit %d, want 0 (a role stopped while it waits for a server stops cleanly):\n%s", code, out.String())
		}
	})
}

// captureStderr sends what this process writes to os.Stderr (the progress of a command run
// in-process, a role's log) to a file, until read, which puts os.Stderr back and returns what
// was written.
func captureStderr(t *testing.T) (read func() string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = f
	t.Cleanup(func() { os.Stderr = stderr; f.Close() })
	return func() string {
		os.Stderr = stderr
		b, _ := os.ReadFile(f.Name())
		return string(b)
	}
}

// migratedSQLite is the URL of a new SQLite store that seckill migrate has run on: for a test of
// what a command does when another of its servers is not there.
func migratedSQLite(t *testing.T) string {
	url := storetest.SQLiteURL(t)
	storetest.MustOpen(t, url)
	return url
}

// TestUnmigratedStore: on a store seckill migrate has not run on, an operator command stops at
// once saying to run it, and a role waits for it (a deployment's migrate job runs beside the
// roles), saying so in its log, and is ready once it ran. Both used to go on: a command or a
// role failed each write with "no such table" (a role for as long as it ran).
func TestUnmigratedStore(t *testing.T) {
	luatest.MustRedis(t)
	brokers := kafkatest.Real(t)
	topics := kafkatest.Topics(t, brokers)
	db := "sqlite:" + filepath.Join(t.TempDir(), "s.db")
	conn := []string{"--postgres-url", db, "--redis-url", os.Getenv(luatest.RedisEnv),
		"--kafka-brokers", strings.Join(brokers, ","), "--topic-prefix", topics.Prefix}
	const want = "run seckill migrate"
	for _, args := range [][]string{{"audit"}, {"replay", "--from", "start"}, {"campaign", "close", "--id", "x"}, {"dlq", "list"}} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), append(args, connFor(args, conn)...), &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), want) {
			t.Errorf("seckill %s on an unmigrated store: exit %d, stderr %q; want exit 1 saying %q", strings.Join(args, " "), code, stderr.String(), want)
		}
	}

	ops := freeAddr(t)
	var log syncBuffer // roles log to their process's stderr
	consumer := exec.Command(seckillBinary(t, false), append([]string{"consumer", "--metrics-addr", ops}, conn...)...)
	consumer.Stdout, consumer.Stderr = io.Discard, &log
	if err := consumer.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { consumer.Process.Kill(); consumer.Wait() }()
	eventually(t, 30*time.Second, "the consumer says to run seckill migrate", func() bool { return strings.Contains(log.String(), want) })
	if code := run(context.Background(), append([]string{"migrate"}, connFor([]string{"migrate"}, conn)...), io.Discard, io.Discard); code != 0 {
		t.Fatalf("seckill migrate: exit %d", code)
	}
	eventually(t, 60*time.Second, "the consumer is ready once migrate ran", func() bool {
		resp, err := http.Get("http://" + ops + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestNamesFlag: a message names --max-conns only where no longer flag's name goes on.
func TestNamesFlag(t *testing.T) {
	for _, tc := range []struct {
		msg, name string
		want      bool
	}{
		{"--max-conns: want at least 1", "max-conns", true},
		{"--max-conns-per-addr: want at least 1", "max-conns", false},
		{"--max-conns-per-addr 3: want below --max-conns (2)", "max-conns", true},
		{"want below --max-conns", "max-conns", true},
		{"--batch-sizes", "batch-size", false},
	} {
		if got := namesFlag(tc.msg, tc.name); got != tc.want {
			t.Errorf("namesFlag(%q, %q) = %v, want %v", tc.msg, tc.name, got, tc.want)
		}
	}
}

// TestTopicsWhoseSettingsCannotBeRead: a managed Kafka whose ACLs let the api produce but not
// read topic settings answers DescribeConfigs with TOPIC_AUTHORIZATION_FAILED. The settings
// check is advice, yet its error made the api retry creating its topics for ever, never
// serving. It warns, names what to check by hand, and goes on.
func TestTopicsWhoseSettingsCannotBeRead(t *testing.T) {
	kafka := kafkatest.FakeCluster(t)
	kafka.ControlKey(int16(kmsg.DescribeConfigs), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kafka.KeepControl()
		dreq := req.(*kmsg.DescribeConfigsRequest)
		resp := dreq.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, r := range dreq.Resources {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ErrorCode = r.ResourceType, r.ResourceName, kerr.TopicAuthorizationFailed.Code
			resp.Resources = append(resp.Resources, rr)
		}
		return resp, nil, true
	})
	var logged bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics := events.NewTopics("t" + strings.ToLower(events.NewID()))
	if err := createTopics(ctx, kafka.ListenAddrs(), topics, 3, 1, slog.New(slog.NewTextHandler(&logged, nil))); err != nil {
		t.Fatalf("createTopics: %v, want nil", err)
	}
	if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "min.insync.replicas") {
		t.Errorf("logged %q, want a warning naming what to check by hand", logged.String())
	}
}

// TestStartLineNamesEverySetting: a role's start line, "the configuration printed once at start"
// (README, Configuration), has every setting its --help lists. The compensator's left out
// --rebuild-grace and the api's --produce-linger, --partitions and --replication, and an
// operator reading the log of a deployment could not tell what they were.
func TestStartLineNamesEverySetting(t *testing.T) {
	// The key of a flag in the start line where it is not the flag's name with '_' for '-': the
	// servers by what they are, the secrets as set or not, and none for the flags that say only
	// where to find the others (--dev) or how to write the line itself.
	keys := map[string]string{
		"redis-url": "redis", "postgres-url": "store", "kafka-brokers": "kafka", "topic-prefix": "topics",
		"admin-token": "admin_token_set", "payment-token": "payment_token_set", "jwt-secret": "jwt_secret_set",
		"order-id-secret": "order_id_secret_set", "dev": "", "data-dir": "", "log-format": "",
	}
	bin := seckillBinary(t, false)
	for _, role := range []string{"api", "consumer", "compensator"} {
		t.Run(role, func(t *testing.T) {
			// Nothing answers at these addresses: the role logs its start line, then waits.
			args := []string{role, "--redis-url", "redis://127.0.0.1:1/0", "--postgres-url", "postgres://x:y@127.0.0.1:1/x?sslmode=disable",
				"--kafka-brokers", "127.0.0.1:1", "--metrics-addr", "127.0.0.1:0"}
			if role == "api" {
				args = append(args, "--addr", "127.0.0.1:0", "--insecure-user-header")
			}
			cmd := exec.Command(bin, args...)
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer cmd.Process.Kill()
			var start map[string]any
			for dec := json.NewDecoder(stderr); start["msg"] != "starting"; {
				start = nil
				if err := dec.Decode(&start); err != nil {
					t.Fatalf("seckill %s: no start line: %v", role, err)
				}
			}
			for name := range helpFlags(t, role) {
				key, ok := keys[name]
				if !ok {
					key = strings.ReplaceAll(name, "-", "_")
				}
				if _, logged := start[key]; key != "" && !logged {
					t.Errorf("seckill %s's start line has no %s (--%s)", role, key, name)
				}
			}
		})
	}
}

// TestSameListenPort: the api's two listen addresses clash on one port of one host, or where
// either listens on every address; port 0 is any free port, never a clash.
func TestSameListenPort(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{":8080", ":8080", true},
		{":8080", "127.0.0.1:8080", true},
		{"0.0.0.0:9090", "10.0.0.5:9090", true},
		{"[::]:80", ":http", true},
		{"127.0.0.1:8080", "127.0.0.1:8080", true},
		{"127.0.0.1:8080", "127.0.0.2:8080", false},
		{":8080", ":9090", false},
		{":0", ":0", false},
		{"127.0.0.1:0", "127.0.0.1:0", false},
	} {
		if got := sameListenPort(c.a, c.b); got != c.want {
			t.Errorf("sameListenPort(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// TestRoleRefusedForGoodLogsAnError: a role that a server turns away for good at start (a wrong
// password: no wait mends it) ends, exit 1, with an ERROR in its own log, as a role that fails
// later does: an alert on the role's ERRORs, or a person reading its JSON log, saw nothing but
// the start line, the reason being a plain line on stderr.
func TestRoleRefusedForGoodLogsAnError(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.RequireAuth("hunter2-hunter2")
	for _, role := range []string{"consumer", "compensator"} {
		read := captureStderr(t) // where the roles log
		var out bytes.Buffer
		code := run(context.Background(), []string{role, "--metrics-addr", "127.0.0.1:0", "--redis-url", "redis://" + mr.Addr() + "/0",
			"--postgres-url", migratedSQLite(t), "--kafka-brokers", freeAddr(t)}, &out, &out)
		logged := read()
		var errorLine bool
		for _, line := range strings.Split(string(logged), "\n") {
			if strings.Contains(line, `"level":"ERROR"`) && strings.Contains(line, "NOAUTH") {
				errorLine = true
			}
		}
		if code != 1 || !errorLine {
			t.Errorf("seckill %s turned away by Redis for good: exit %d, log:\n%s\nwant exit 1 and an ERROR naming NOAUTH", role, code, logged)
		}
	}
}

// TestMissingTopicNamesTheFlag: an operator command whose --topic-prefix names topics Kafka
// does not have (a typo, another deployment's prefix) says which flag to check. It ended with
// Kafka's "UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition." alone.
func TestMissingTopicNamesTheFlag(t *testing.T) {
	mr := miniredis.RunT(t)
	conn := []string{"--kafka-brokers", strings.Join(kafkatest.Fake(t), ","), "--topic-prefix", "nosuch",
		"--redis-url", "redis://" + mr.Addr() + "/0", "--postgres-url", migratedSQLite(t)}
	for _, args := range [][]string{{"dlq", "stats"}, {"dlq", "list"}, {"dlq", "redrive"}, {"replay", "--from", "start"}} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), append(args, connFor(args, conn)...), &stdout, &stderr); code != 1 ||
			!strings.Contains(stderr.String(), "nosuch.orders.") || !strings.Contains(stderr.String(), "--topic-prefix") {
			t.Errorf("seckill %s of topics Kafka lacks: exit %d, stderr %q; want exit 1 naming the topic and --topic-prefix", strings.Join(args, " "), code, stderr.String())
		}
	}
}

// TestReplayProgressOnStderr: replay's progress and summary go to stderr, as every command's
// progress does, and stdout holds its result alone. They went to stdout, so a script reading
// `seckill replay`'s result read the progress lines too.
func TestReplayProgressOnStderr(t *testing.T) {
	brokers := kafkatest.Fake(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := events.CreateTopics(context.Background(), kadm.NewClient(cl), events.NewTopics("rp"), 1, 1); err != nil {
		t.Fatal(err)
	}
	mr := miniredis.RunT(t)
	progress := captureStderr(t)
	var stdout, errs bytes.Buffer
	code := run(context.Background(), []string{"replay", "--from", "start", "--topic-prefix", "rp", "--kafka-brokers", strings.Join(brokers, ","),
		"--redis-url", "redis://" + mr.Addr() + "/0", "--postgres-url", migratedSQLite(t)}, &stdout, &errs)
	shown := progress()
	if code != 0 || stdout.String() != "replayed 0 events\n" || !strings.Contains(shown, "replay: done") {
		t.Errorf("replay of an empty topic: exit %d, stdout %q, stderr %q %q; want its result alone on stdout, its progress and summary on stderr",
			code, stdout.String(), errs.String(), shown)
	}
}
