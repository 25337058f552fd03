// Command seckill is the flash-sale pipeline: one binary, one subcommand per role (api,
// consumer, compensator, or all three on embedded servers: dev) and per operation (migrate,
// replay, compensate, campaign, dlq, audit, token, demo, bench). seckill --help lists them,
// seckill <command> --help a command's flags; README.md says how they fit together.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/seckill/seckill/events"
)

const usage = `seckill: a flash-sale order pipeline (Redis reserve -> Kafka -> PostgreSQL)

Usage: seckill <command> [flags]     (seckill help <command>, or <command> --help, for its flags)

Roles (long-running; SIGTERM drains in-flight work):
  api          the HTTP API: reserve in Redis, produce OrderRequested
  consumer     persist OrderRequested events into PostgreSQL in batches
  compensator  release what will not become an order (dead letters, expired reservations,
               unpaid orders past pay_by) and rebuild Redis after it lost data
  dev          all three in one process on embedded Kafka, Redis and SQLite (make run)

Operations:
  demo         a small flash sale against a running dev, for the console to show (make demo)
  migrate      apply the database schema
  replay       re-consume OrderRequested from a time or offset into the store
  compensate   release or refund one order, or a campaign's orders in bulk (--campaign)
  campaign     close, extend, add-stock or cancel a live campaign
  dlq          the dead letters: dlq list|show|stats|redrive, with what became of each order
  bench        measure seckill against its baselines on real services (make bench)
  audit        check the invariants across Redis, the store and Kafka; exit 1 on a violation
               or on what it could not check
  token        print a buyer's bearer token (a JWT signed with --jwt-secret)

Every flag has an environment fallback, SECKILL_<FLAG> (--redis-url: SECKILL_REDIS_URL), but
those that pick what an operation changes (compensate --order, campaign --id, …) and bench's
workload: a command's --help names each flag's variable, or says "command line only".
`

var commands = map[string]func(ctx context.Context, args []string, stdout io.Writer) error{
	"api":         runAPI,
	"consumer":    runConsumer,
	"compensator": runCompensator,
	"dev":         runDev,
	"migrate":     runMigrate,
	"replay":      runReplay,
	"compensate":  runCompensate,
	"campaign":    runCampaign,
	"demo":        runDemo,
	"dlq":         runDLQ,
	"bench":       runBench,
	"audit":       runAudit,
	"token":       runToken,
}

// gcPercent is the garbage collector's GOGC unless the environment sets one: the heap may grow
// to five times what is live before a collection, against Go's default of twice. Every role
// allocates a few kilobytes per order on a live heap of a few megabytes, so at 100 it collected
// 20-30 times a second, and each cycle's fixed costs (its workers, the scan of every stack) were
// paid that often. Side by side in the bench's all-accept-unpaced, six alternating rounds each,
// against the default: the CPU of every process per order 101-128 µs (median 114) against
// 124-146 (137), the consumer's own 9-10 µs against 16-18, with 13,000-16,000 purchases/s
// against 11,600-13,500; the api's RSS per idle connection no higher (16-17 KB against 18-19).
// Memory pays: the api's RSS after a flash crowd 72-76 MB against 46-50. In a container,
// GOMEMLIMIT (which deploy/ sets from the memory limit) holds the heap under the limit whatever
// this is.
const gcPercent = 400

// setGCPercent applies gcPercent to a command unless GOGC is set: an operator's GOGC wins. dev
// keeps Go's default: its embedded Kafka and Redis hold every event and key on its own heap, so
// what is live grows with the sale, and five times that is more than a demo should take.
func setGCPercent(command string, getenv func(string) string) {
	if command != "dev" && getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

// quietRedis drops go-redis's own log lines (its dial retries, printed with the standard log
// package in the middle of our JSON logs and a command's output): every failure they tell of
// reaches us as an error too, which the role logs in its own format.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietRedis{}) }

func main() {
	if len(os.Args) > 1 {
		setGCPercent(os.Args[1], os.Getenv)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal starts a graceful stop; a second one, from someone who will not wait
	// for the drain, ends the process as signals do by default.
	context.AfterFunc(ctx, stop)
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// runsUntilStopped reports whether the command of args runs until a signal stops it, so that a
// stop, even while it waits for a server, is its clean end. Any other command a signal stops
// has not done what it was asked: it fails with why, or a script's `seckill audit && …` would
// read an interrupted audit as a clean one.
func runsUntilStopped(args []string) bool {
	switch args[0] {
	case "api", "consumer", "compensator", "dev", "demo":
		return true
	case "bench":
		return len(args) > 1 && args[1] == "role" // the bench's own roles, stopped by the bench
	}
	return false
}

// unreachable says what to do when the server of the operator command of args did not answer
// (or Kafka answered without the command's topics): the command waits for nothing (only the
// roles wait), and a newcomer's first audit without --dev dials the production defaults on
// 127.0.0.1. Each command has the flags of the servers it reaches and no others, so it points
// at the command's --help for them.
func unreachable(args []string, err error) error {
	command := args[0]
	switch command {
	case "campaign", "dlq": // their actions have flags of their own
		if len(args) > 1 {
			command += " " + args[1]
		}
	case "audit", "compensate", "migrate", "replay":
	default:
		return err
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) && !strings.Contains(err.Error(), "--topic-prefix") {
		// Kafka answered, without the topics: a mistyped prefix, or another deployment's.
		return fmt.Errorf("%w (is --topic-prefix right? seckill api creates the topics at its start)", err)
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		return err
	}
	return fmt.Errorf("%w: nothing answers there; start it, point seckill at yours (seckill %s --help names the flag of each server), or give --dev to reach make run", err, command)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		fmt.Fprint(stderr, usage)
		return 2
	case args[0] == "help" && len(args) > 1: // as in go and git: help dlq stats
		return run(ctx, append(slices.Clone(args[1:]), "--help"), stdout, stderr)
	case args[0] == "help" || args[0] == "-h" || args[0] == "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "seckill: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	err := cmd(ctx, args[1:], stdout)
	var bad *usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &bad):
		fmt.Fprintln(stderr, strings.TrimRight(bad.msg, "\n"))
		return 2
	case events.ErrorCode(err) == events.Invalid:
		// An operator's value the operation refused (campaign add-stock --add 0): the input,
		// as with a flag, not a server.
		fmt.Fprintf(stderr, "seckill %s: %v\n", args[0], err)
		return 2
	case errors.Is(err, context.Canceled) && ctx.Err() != nil && runsUntilStopped(args):
		return 0 // stopped while waiting for a dependency: a clean stop
	case err != nil:
		fmt.Fprintf(stderr, "seckill %s: %v\n", args[0], unreachable(args, err))
		return 1
	}
	return 0
}
