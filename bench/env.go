package bench

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// Env is one run's share of the real services: a fresh PostgreSQL schema, topic prefixes and
// campaign ids of its own, so a run never meets another run's (or a test's) data.
type Env struct {
	RunID   string
	round   int // the round running now (Run sets it), from 1
	Schema  string
	PGURL   string // the run's schema (search_path)
	baseURL string
	// RedisURL is the Redis the run uses; Redis its parsed options.
	RedisURL string
	Redis    *redis.Options
	Brokers  []string

	Store *store.Store
	RDB   *redis.Client
	Lua   *lua.Redis
	Kafka *kgo.Client
	Admin *kadm.Client

	campaigns []string
	prefixes  []string
}

// NewEnv creates the run's schema (migrated) and connects to the three services.
func NewEnv(ctx context.Context, redisURL, postgresURL string, brokers []string) (*Env, error) {
	id := strings.ToLower(events.NewID()[18:])
	e := &Env{RunID: id, Schema: "bench_" + id, baseURL: postgresURL, RedisURL: redisURL, Brokers: brokers}
	var err error
	if e.Redis, err = redis.ParseURL(redisURL); err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	e.RDB = redis.NewClient(e.Redis)
	e.Lua = lua.New(e.RDB)
	if err := e.Lua.Load(ctx); err != nil {
		e.RDB.Close()
		return nil, fmt.Errorf("redis at %s: %w", e.Redis.Addr, err)
	}
	admin, err := sql.Open("postgres", postgresURL)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+e.Schema); err != nil {
		e.RDB.Close()
		return nil, fmt.Errorf("postgres: create schema: %w", err)
	}
	u, err := url.Parse(postgresURL)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("search_path", e.Schema)
	u.RawQuery = q.Encode()
	e.PGURL = u.String()
	if e.Store, err = store.Open(ctx, e.PGURL); err != nil {
		e.Close(ctx, false)
		return nil, err
	}
	if err := e.Store.Migrate(ctx); err != nil {
		e.Close(ctx, false)
		return nil, err
	}
	if e.Kafka, err = events.NewClient(brokers); err != nil {
		e.Close(ctx, false)
		return nil, err
	}
	e.Admin = kadm.NewClient(e.Kafka)
	return e, nil
}

// tag names the run and its round in what a scenario creates: each round's campaigns, topics
// and buyers are its own.
func (e *Env) tag() string {
	if e.round <= 1 {
		return e.RunID
	}
	return fmt.Sprintf("%s-r%d", e.RunID, e.round)
}

// Campaign returns a fresh campaign id for a scenario; Close deletes its Redis keys.
func (e *Env) Campaign(name string) string {
	id := name + "-" + e.tag()
	e.campaigns = append(e.campaigns, id)
	return id
}

// Prefix returns a fresh topic prefix for a scenario; Close deletes its topics.
func (e *Env) Prefix(name string) string {
	p := "bench-" + e.tag() + "-" + name
	e.prefixes = append(e.prefixes, p) // named twice by some scenarios: DeleteTopics copes
	return p
}

// CreateTopics creates the topics of prefix (replication 1: the bench's broker is one).
func (e *Env) CreateTopics(ctx context.Context, prefix string, partitions int) error {
	return events.CreateTopics(ctx, e.Admin, events.NewTopics(prefix), int32(partitions), 1)
}

// DropCampaign deletes campaign's Redis keys now, not at Close: a drain's million reservations
// would otherwise stay in Redis (and its append-only file) through every scenario after it.
func (e *Env) DropCampaign(ctx context.Context, campaign string) error {
	iter := e.RDB.Scan(ctx, 0, "seckill:{c:"+campaign+"}:*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	return e.RDB.Unlink(ctx, keys...).Err()
}

// Close drops what the run made (unless keep) and disconnects.
func (e *Env) Close(ctx context.Context, keep bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var errs []error
	if !keep {
		for _, c := range e.campaigns {
			if err := e.DropCampaign(ctx, c); err != nil {
				errs = append(errs, err)
			}
		}
		if e.Admin != nil && len(e.prefixes) > 0 {
			var topics []string
			for _, p := range e.prefixes {
				topics = append(topics, events.NewTopics(p).All()...)
			}
			if err := events.DeleteTopics(ctx, e.Admin, topics...); err != nil {
				errs = append(errs, err)
			}
		}
		if db, err := sql.Open("postgres", e.baseURL); err == nil {
			if _, err := db.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+e.Schema+` CASCADE`); err != nil {
				errs = append(errs, fmt.Errorf("drop schema: %w", err))
			}
			db.Close()
		}
	}
	if e.Kafka != nil {
		e.Kafka.Close()
	}
	if e.Store != nil {
		e.Store.Close()
	}
	e.RDB.Close()
	if len(errs) > 0 {
		return fmt.Errorf("clean up: %v", errs)
	}
	return nil
}
