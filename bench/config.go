package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Sizes are the sizes of a run's scenarios.
type Sizes struct {
	// Concurrency is the number of keep-alive connections of every HTTP scenario and the
	// clients of redis-benchmark.
	Concurrency int `json:"concurrency"`
	// Rate, above zero, makes every HTTP scenario open-loop at that many requests a second.
	Rate float64 `json:"rate,omitempty"`
	// FlashStock, FlashRequests and FlashUsers shape the flash crowd (limit 1 per buyer); sync-db
	// runs the same crowd, SyncDBRequests of it.
	FlashStock     int64 `json:"flash_stock"`
	FlashRequests  int64 `json:"flash_requests"`
	FlashUsers     int64 `json:"flash_users"`
	SyncDBRequests int64 `json:"syncdb_requests"`
	// Requests is the size of all-accept, sold-out, bare-reserve and constant.
	Requests int64 `json:"requests"`
	// Warmup requests precede each HTTP scenario, on a campaign of their own, unmeasured.
	Warmup int64 `json:"warmup"`
	// RedisRequests is the size of the redis-benchmark run.
	RedisRequests int `json:"redis_requests"`
	// DrainEvents are pre-produced for the drain; RowEvents for row-at-a-time.
	DrainEvents int64 `json:"drain_events"`
	RowEvents   int64 `json:"row_events"`
	// BatchSize is the drain consumer's --batch-size (0: the consumer's default).
	BatchSize int `json:"batch_size,omitempty"`
	// DrainTimeout bounds a drain; a drain cut short reports its rate so far.
	DrainTimeout time.Duration `json:"drain_timeout"`
	// IdleConns is how many idle keep-alive connections the api's memory is measured with.
	IdleConns int `json:"idle_conns"`
	// Partitions of every topic the bench creates.
	Partitions int `json:"partitions"`
}

// FullSizes are the sizes.
func FullSizes() Sizes {
	return Sizes{
		Concurrency: 256, FlashStock: 10_000, FlashRequests: 200_000, FlashUsers: 100_000, SyncDBRequests: 200_000,
		Requests: 200_000, Warmup: 5_000, RedisRequests: 1_000_000, DrainEvents: 1_000_000, RowEvents: 20_000,
		DrainTimeout: 15 * time.Minute, IdleConns: 10_000, Partitions: 12,
	}
}

// QuickSizes run the whole set in a minute or two.
func QuickSizes() Sizes {
	return Sizes{
		Concurrency: 256, FlashStock: 2_000, FlashRequests: 40_000, FlashUsers: 20_000, SyncDBRequests: 10_000,
		Requests: 40_000, Warmup: 2_000, RedisRequests: 200_000, DrainEvents: 30_000, RowEvents: 2_000,
		DrainTimeout: 2 * time.Minute, IdleConns: 10_000, Partitions: 12,
	}
}

// Scenario names, in the order a run takes them: each seckill scenario close to the baselines
// it is compared with, so a noisy neighbour skews both alike.
const (
	ScConstant     = "constant"
	ScSoldOut      = "sold-out"
	ScBareReserve  = "bare-reserve"
	ScRedisCeiling = "redis-ceiling"
	ScAllAccept    = "all-accept"
	// ScAllAcceptUnpaced is all-accept with the consumer persisting as fast as it can beside
	// the api: what the pace saves the hot path on a machine the roles share.
	ScAllAcceptUnpaced = "all-accept-unpaced"
	ScSyncDB           = "sync-db"
	ScFlashCrowd       = "flash-crowd"
	ScIdleConns        = "idle-conns"
	ScDrain            = "drain"
	ScRowAtATime       = "row-at-a-time"
)

// Baselines are the scenarios that measure something other than seckill, for comparison.
var Baselines = []string{ScConstant, ScBareReserve, ScRedisCeiling, ScSyncDB, ScRowAtATime}

// AllScenarios lists every scenario and baseline in run order, which puts each judged scenario
// next to its baseline: sold-out and flash-crowd on either side of constant, all-accept after
// bare-reserve, drain before row-at-a-time. A shared machine's busy spells last minutes; when
// constant ran first and flash-crowd seven scenarios (four minutes) later, one round's ratio
// read 0.57x and the next 0.94x. idle-conns measures the flash crowd's api, so it follows it.
var AllScenarios = []string{ScSoldOut, ScConstant, ScFlashCrowd, ScIdleConns, ScSyncDB, ScBareReserve, ScAllAccept, ScRedisCeiling, ScAllAcceptUnpaced, ScDrain, ScRowAtATime}

// DefaultConsumerRate is the consumers' pace in the HTTP scenarios. The design persists at a
// controlled pace: Kafka holds the burst and PostgreSQL takes it at a rate it sustains beside
// the rest. On a machine where every role shares two cores, an unpaced consumer (and the
// PostgreSQL and Kafka work it causes) took half the CPU from the api during the burst
// (all-accept-unpaced shows it side by side); 2,000 orders/s clears a 10,000-unit flash sale in
// five seconds.
const DefaultConsumerRate = 2000

// Config configures a run.
type Config struct {
	RedisURL    string
	PostgresURL string
	Brokers     []string
	// Binary is the seckill binary whose roles are measured. Required.
	Binary string
	// Scenarios to run, in AllScenarios order; empty: all. idle-conns runs on the flash
	// crowd's api, so it needs flash-crowd.
	Scenarios []string
	Sizes     Sizes
	// Auth is how buyers are named: "jwt" (a secret of the bench's, passed to the api with
	// --jwt-secret), "header" (X-User-ID, the api started with --insecure-user-header), or ""
	// for jwt when the api knows --jwt-secret.
	Auth string
	// Identity overrides the minted tokens' secret and issuer.
	Identity Identity
	// APIFlags are extra flags for `seckill api`.
	APIFlags []string
	// ConsumerRate is the pace (orders/s, the consumer's --max-rate) of the consumers beside
	// the api in the HTTP scenarios; 0 leaves them unpaced. The drains always run unpaced.
	ConsumerRate int
	// Profile captures pprof CPU and allocation profiles of the api and the consumer.
	Profile bool
	// ProfileSeconds bounds a profile's window. Default: 20.
	ProfileSeconds int
	// WorkDir holds the processes' logs and the raw profiles. Required.
	WorkDir string
	// Keep leaves the run's schema, topics and Redis keys in place.
	Keep bool
	// Rounds is how many times every scenario runs, one round after another, so that each
	// target's pair of scenarios alternates: seckill, baseline, seckill, baseline. A target is
	// judged on the median of its rounds, an exact count (the stock sold) on every round. Default: 3.
	Rounds int
	// RedisBenchmark is the redis-benchmark binary. Default: "redis-benchmark".
	RedisBenchmark string
	// Command is recorded in the result.
	Command string
	// Commit names the source of Binary ("3f2a1bc", "+dirty" when the tree had changes).
	Commit string
}

// Validate reports whether the settings can run, before the binary is built and the work dir
// made (Run needs those too).
func (c *Config) Validate() error {
	var errs []error
	if c.RedisURL == "" || c.PostgresURL == "" || len(c.Brokers) == 0 {
		errs = append(errs, errors.New("the Redis, PostgreSQL and Kafka addresses are all required"))
	}
	for _, s := range c.Scenarios {
		if !slices.Contains(AllScenarios, s) {
			errs = append(errs, fmt.Errorf("unknown scenario %q (want some of %s)", s, strings.Join(AllScenarios, ", ")))
		}
	}
	if c.ConsumerRate < 0 {
		errs = append(errs, fmt.Errorf("consumer rate %d: want 0 (unpaced) or more orders/s", c.ConsumerRate))
	}
	if c.Auth != "" && c.Auth != "jwt" && c.Auth != "header" {
		errs = append(errs, fmt.Errorf("auth %q: want jwt or header", c.Auth))
	}
	s := c.Sizes
	// By the flag that sets each (Partitions has none: it is the bench's own).
	for _, size := range []struct {
		flag string
		n    int64
	}{
		{"--concurrency", int64(s.Concurrency)}, {"--flash-stock", s.FlashStock}, {"--flash-requests", s.FlashRequests},
		{"--flash-users", s.FlashUsers}, {"--requests", s.Requests}, {"--syncdb-requests", s.SyncDBRequests},
		{"--redis-requests", int64(s.RedisRequests)}, {"--drain-events", s.DrainEvents}, {"--row-events", s.RowEvents},
		{"--idle-conns", int64(s.IdleConns)}, {"partitions", int64(s.Partitions)},
	} {
		if size.n < 1 {
			errs = append(errs, fmt.Errorf("%s %d: want at least 1", size.flag, size.n))
		}
	}
	// Found here, not when the scenario that reads them comes, perhaps an hour into the run.
	if s.Rate < 0 || s.Warmup < 0 || s.BatchSize < 0 {
		errs = append(errs, errors.New("--rate, --warmup and --batch-size must be 0 or more"))
	}
	if s.DrainTimeout <= 0 {
		errs = append(errs, fmt.Errorf("drain timeout %v: want a positive duration", s.DrainTimeout))
	}
	if c.Rounds < 0 {
		errs = append(errs, fmt.Errorf("rounds %d: want at least 1 (0: the default, 3)", c.Rounds))
	}
	return errors.Join(errs...)
}

func (c *Config) wants(name string) bool {
	return len(c.Scenarios) == 0 || slices.Contains(c.Scenarios, name)
}
