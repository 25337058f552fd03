package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/bench"
	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// deps are the three dependencies a role runs on.
type deps struct {
	store *store.Store
	redis *lua.Redis
}

func (d deps) close() {
	if d.redis != nil {
		d.redis.Close()
	}
	if d.store != nil {
		d.store.Close()
	}
}

// openWaiting is open for a long-running role: a dependency that is down at start is waited for,
// with backoff, rather than ending the process (which Kubernetes would restart in a loop).
func (c conn) openWaiting(ctx context.Context, log *slog.Logger) (deps, error) {
	var d deps
	err := events.Retry(ctx, log, "connect to the store and redis", func() error {
		var err error
		d, err = c.open(ctx) // a refusal no wait mends comes marked events.Permanent
		return err
	})
	return d, err
}

func (c conn) open(ctx context.Context) (deps, error) {
	var d deps
	var err error
	if d.store, err = c.openStore(ctx); err != nil {
		return d, err
	}
	if d.redis, err = c.openRedis(ctx); err != nil {
		d.close()
		return d, err
	}
	return d, nil
}

func runAPI(ctx context.Context, args []string, stdout io.Writer) (err error) {
	f := newFlags("api", "Serve the HTTP API: reserve stock in Redis and produce OrderRequested to Kafka.", stdout)
	c := f.conn(usesAll)
	addr := f.listenAddr("addr", ":8080", "listen address of the public API")
	metricsAddr := f.opsAddr()
	adminToken := f.secret("admin-token", "bearer token of the admin endpoints (none: they are closed)")
	paymentToken := f.secret("payment-token", "bearer token of the payment service, which may record payments and nothing else (the admin token may too)")
	ttl := f.duration("reservation-ttl", 2*time.Minute, false, "how long a reservation may stay pending before the sweeper releases it")
	produceTimeout := f.duration("produce-timeout", 3*time.Second, false, "how long a purchase waits for Kafka's acknowledgement before it is cancelled with 503: raise it where the brokers pause for longer under load")
	linger := f.duration("produce-linger", produceLinger, true, "how long the producer waits to fill a batch: a longer wait packs more purchases into each Kafka request and adds to each purchase's latency")
	partitions := f.atLeast("partitions", 12, 1, "partitions of the topics the api creates at start")
	replication := f.atLeast("replication", 3, 1, "replication factor of the topics the api creates at start")
	maxConns := notNegative(f, "max-conns", f.Int("max-conns", api.DefaultMaxConns(), "connections held at once; one more is closed on accept (0: no cap; the default is the open-file limit less 1024)"))
	drainDelay := f.duration("drain-delay", 5*time.Second, true, "how long a stopping api goes on serving while /readyz answers 503, for the load balancer to move buyers elsewhere")
	maxConnsPerAddr := notNegative(f, "max-conns-per-addr", f.Int("max-conns-per-addr", 1000, "connections from one client address (an IPv6 /64); behind a load balancer raise it, or 0 for no cap"))
	guards := f.guards(false)
	// api.Config.Validate refuses it too, but after the start line is logged, and it can name
	// only the settings.
	f.after = append(f.after, func() error {
		if sameListenPort(*addr, *metricsAddr) {
			// The public port would be taken by the api itself, and listen said "another process".
			return f.usagef("--metrics-addr %q: want another port than --addr's (%q)", *metricsAddr, *addr)
		}
		if *maxConns > 0 && *guards.streams >= *maxConns {
			return f.usagef("--max-streams %d: want below --max-conns (%d): every stream holds a connection, and purchases need the others", *guards.streams, *maxConns)
		}
		if *linger >= *produceTimeout {
			// A batch that does not fill waits the linger before it is sent: every purchase of a
			// quiet sale would run out of its produce timeout, and be cancelled with 503.
			return f.usagef("--produce-linger %v: want below --produce-timeout (%v): a purchase waits for the linger before Kafka sees it", *linger, *produceTimeout)
		}
		if *paymentToken != "" && *paymentToken == *adminToken {
			// The payment service could then do all an admin can.
			return f.usagef("--payment-token: want another value than --admin-token's: the payment service's token may record payments and nothing else")
		}
		for _, tok := range []struct{ flag, value string }{{"--admin-token", *adminToken}, {"--payment-token", *paymentToken}} {
			if tok.value != "" && tok.value == *guards.secret {
				// The login service, which signs buyers' tokens with the JWT secret, could then
				// call these endpoints too.
				return f.usagef("%s: want another value than --jwt-secret's: the login service that signs buyers' tokens holds that one", tok.flag)
			}
		}
		return nil
	})
	f.check(func() bool { return *guards.secret != "" || *guards.insecureUser },
		"buyers cannot authenticate: give --jwt-secret (SECKILL_JWT_SECRET), the JWT secret your login service signs their tokens with (in development only, --insecure-user-header instead)")
	if err := f.parse(args); err != nil {
		return err
	}
	log := c.logger(os.Stderr)
	defer logStopped(ctx, log, &err)
	c.logStart(log, "api", append([]any{"addr", *addr, "admin_token_set", *adminToken != "", "payment_token_set", *paymentToken != "", "reservation_ttl", *ttl, "produce_timeout", *produceTimeout, "produce_linger", *linger, "partitions", *partitions, "replication", *replication, "metrics_addr", *metricsAddr, "max_conns", *maxConns, "max_conns_per_addr", *maxConnsPerAddr, "drain_delay", *drainDelay}, guards.logArgs()...)...)
	cfg := api.Config{DrainDelay: *drainDelay, AdminToken: *adminToken, PaymentToken: *paymentToken, Topics: c.topics(), ReservationTTL: *ttl, ProduceTimeout: *produceTimeout, MaxConns: *maxConns, MaxConnsPerAddr: *maxConnsPerAddr, Logger: log}
	if err := guards.apply(&cfg, log); err != nil {
		return err
	}
	ln, err := listen("addr", *addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	o, err := startOps(*metricsAddr)
	if err != nil {
		return err
	}
	defer o.srv.Close()
	d, err := c.openWaiting(ctx, log)
	if err != nil {
		return err
	}
	defer d.close()
	if err := events.Retry(ctx, log, "create the topics", func() error {
		return createTopics(ctx, c.brokerList(), c.topics(), *partitions, *replication, log)
	}); err != nil {
		return err
	}
	producer, err := apiProducer(c.brokerList(), c.topics(), *linger)
	if err != nil {
		return err
	}
	defer events.FlushAndClose(producer)
	cfg.Brokers = c.brokerList()
	srv := api.New(cfg, d.store, d.redis, producer)
	defer srv.Close()
	// The operators' port answers /readyz as the public one does (the store is reported, not
	// required; 503 while draining): a load balancer pointed at either sees one readiness.
	return runWithOps(ctx, o, srv.Handler(), func(ctx context.Context) error { return srv.Serve(ctx, ln) })
}

func runConsumer(ctx context.Context, args []string, stdout io.Writer) (err error) {
	f := newFlags("consumer", "Persist OrderRequested events into the order database, in batches, idempotently.", stdout)
	c := f.conn(usesAll)
	metricsAddr := f.opsAddr()
	batch := f.atLeast("batch-size", 500, 1, "most events persisted in one transaction")
	maxRate := f.atLeast("max-rate", 0, 0, "most events the consumer group persists per second, the controlled pace: Kafka holds a burst and the database takes it at this rate from all the group's consumers together, each pacing at its share of the requested topic's partitions (0: as fast as the database takes them)")
	session := f.sessionTimeout("consumer")
	if err := f.parse(args); err != nil {
		return err
	}
	log := c.logger(os.Stderr)
	defer logStopped(ctx, log, &err)
	c.logStart(log, "consumer", "batch_size", *batch, "max_rate", *maxRate, "session_timeout", *session, "metrics_addr", *metricsAddr)
	o, err := startOps(*metricsAddr)
	if err != nil {
		return err
	}
	defer o.srv.Close()
	d, err := c.openWaiting(ctx, log)
	if err != nil {
		return err
	}
	defer d.close()
	cons, err := consumer.New(consumer.Config{Brokers: c.brokerList(), Topics: c.topics(), BatchSize: *batch, MaxRate: *maxRate, SessionTimeout: *session, Logger: log}, d.store, d.redis)
	if err != nil {
		return err
	}
	defer cons.Close()
	return runWithOps(ctx, o, depsReady(d, cons.Ping, log), cons.Run)
}

func runCompensator(ctx context.Context, args []string, stdout io.Writer) (err error) {
	f := newFlags("compensator", "Release reservations that will not become orders (dead letters, reservations past their\ndeadline, orders unpaid past their pay_by), and rebuild Redis from the store after it lost\ndata. Run two for a standby: one sweeps at a time, under a lease.", stdout)
	c := f.conn(usesAll)
	metricsAddr := f.opsAddr()
	sweep := f.duration("sweep-interval", 5*time.Second, false, "how often to look for reservations past their deadline")
	retention := f.duration("retention", 24*time.Hour, false, "how long Redis keeps the records of released, refunded and expired reservations (at least the api's --idempotency-ttl) and an ended campaign's keys")
	grace := f.duration("rebuild-grace", 6*time.Second, false, "after Redis lost data, how long to wait for purchases in flight before rebuilding (at least the api's produce timeout)")
	session := f.sessionTimeout("compensator")
	if err := f.parse(args); err != nil {
		return err
	}
	log := c.logger(os.Stderr)
	defer logStopped(ctx, log, &err)
	c.logStart(log, "compensator", "sweep_interval", *sweep, "retention", *retention, "rebuild_grace", *grace, "session_timeout", *session, "metrics_addr", *metricsAddr)
	o, err := startOps(*metricsAddr)
	if err != nil {
		return err
	}
	defer o.srv.Close()
	d, err := c.openWaiting(ctx, log)
	if err != nil {
		return err
	}
	defer d.close()
	comp, err := compensator.New(compensator.Config{Brokers: c.brokerList(), Topics: c.topics(), SweepInterval: *sweep, RebuildGrace: *grace, Retention: *retention, SessionTimeout: *session, Logger: log}, d.store, d.redis)
	if err != nil {
		return err
	}
	defer comp.Close()
	return runWithOps(ctx, o, depsReady(d, comp.Ping, log), comp.Run)
}

// opsAddr reads --metrics-addr, the role's port for operators (/healthz, /readyz, /metrics).
// It listens on loopback unless told otherwise: the metrics tell a sale's figures, and a role
// started by hand on a host with a public address served them to anyone who asked. Where
// Prometheus or a load balancer reach the role from elsewhere, deploy/ sets it (:9090).
func (f *flags) opsAddr() *string {
	return f.listenAddr("metrics-addr", "127.0.0.1:9090", "address of /healthz, /readyz and /metrics, for operators only (:9090 for Prometheus on another host)")
}

// listen binds the address of flag (--addr, --metrics-addr) at a role's start, before it waits
// for its servers: a port another process holds stops it at once. It used to wait for
// PostgreSQL, Redis and Kafka first, for ever while they were down, and only then fail.
func listen(flag, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("--%s %s: %w: another process has the port; give another with --%s", flag, addr, err, flag)
	}
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", flag, addr, err)
	}
	return ln, nil
}

// ops is a role's server of /healthz, /readyz and /metrics, serving from the role's start.
// While the role waits for its servers, /healthz answers (the process is alive, and a restart
// would only wait again) and /readyz answers 503; runWithOps then hands /readyz to the role.
type ops struct {
	srv    *http.Server
	ready  atomic.Pointer[http.Handler]
	served chan error
}

// startOps listens on addr, the role's --metrics-addr, and serves on it.
func startOps(addr string) (*ops, error) {
	ln, err := listen("metrics-addr", addr)
	if err != nil {
		return nil, err
	}
	o := &ops{served: make(chan error, 1)}
	o.srv = opsServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := o.ready.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		http.Error(w, "starting: waiting for the store, Redis and Kafka", http.StatusServiceUnavailable)
	}))
	go func() { o.served <- o.srv.Serve(ln) }()
	return o, nil
}

// runWithOps runs a role beside its ops server, which answers /readyz with ready from now on.
func runWithOps(ctx context.Context, o *ops, ready http.Handler, role func(context.Context) error) error {
	o.ready.Store(&ready)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := <-o.served; err != http.ErrServerClosed {
			return fmt.Errorf("ops server: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		defer o.srv.Close()
		return role(gctx)
	})
	return g.Wait()
}

// logStopped logs a role's end, and why: at ERROR when it ended by itself, as it does when a
// server turns it away for good at start (a wrong password) or fails it later, for that is a
// failure a person must look at; at INFO when it was told to stop. Its caller defers it once
// its logger is made, so that no failure ends a role with only a plain line on stderr.
func logStopped(ctx context.Context, log *slog.Logger, err *error) {
	if *err != nil && ctx.Err() == nil {
		log.Error("stopped", "err", *err)
	} else {
		log.Info("stopped", "err", *err)
	}
}

// opsServer is the server of /healthz, /readyz (ready) and /metrics. Its timeouts are the
// public server's: it shares the process's open files with it, and a connection left idle, or
// a body that never comes, would hold one for good.
func opsServer(ready http.Handler) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.Handle("GET /readyz", ready)
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		IdleTimeout: 90 * time.Second}
}

// depsReady is the /readyz of a consumer or a compensator: ready when Kafka (ping), the store
// and Redis all answer. The body names those that do not, as the api's does; why (an address,
// a refusal) goes to log.
func depsReady(d deps, pingKafka func(context.Context) error, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var down []string
		for name, err := range api.PingAll(r.Context(), 2*time.Second, map[string]func(context.Context) error{
			"kafka": pingKafka, "store": d.store.Ping, "redis": d.redis.Ping,
		}) {
			if err != nil {
				down = append(down, name)
				log.Warn("a dependency does not answer", "dependency", name, "err", err)
			}
		}
		if len(down) > 0 {
			slices.Sort(down)
			http.Error(w, strings.Join(down, ", ")+": unavailable", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
}

func runMigrate(ctx context.Context, args []string, stdout io.Writer) error {
	f := newFlags("migrate", "Apply the order database schema (idempotent). On PostgreSQL a migration that waits\nlonger than --lock-timeout for a table's lock (a long transaction holds it) lets go, so\nthat the queries queued behind it run, and tries again until it gets it; it logs a WARN\nwhile it waits.", stdout)
	c := f.conn(usesStore | usesLog)
	lockTimeout := f.duration("lock-timeout", store.DefaultLockTimeout, false, "PostgreSQL: the longest a migration waits for a table's lock before it lets go and tries again (every query on the table waits behind it meanwhile)")
	if err := f.parse(args); err != nil {
		return err
	}
	st, err := store.Open(ctx, *c.postgresURL)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Migrate(ctx, store.LockTimeout(*lockTimeout), store.MigrateLog(c.logger(os.Stderr))); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "migrate: schema is up to date")
	return nil
}

func runReplay(ctx context.Context, args []string, stdout io.Writer) error {
	f := newFlags("replay", "Re-consume OrderRequested events into the order database. Missing orders come back;\nstored ones are left as they are, but those Redis has refunded or expired since, and\nthe payments on the results topic are recorded.", stdout)
	c := f.conn(usesAll)
	from := f.String("from", "", "where to start: an RFC 3339 time, an offset (applied to every partition), or start (required)")
	batch := f.atLeast("batch-size", 500, 1, "most events persisted in one transaction")
	maxRate := f.atLeast("max-rate", 0, 0, "most orders persisted per second, paced as the consumer's --max-rate is: during a sale the replay shares the database with the consumer group, so give it what the database can spare beyond the group's rate; SECKILL_MAX_RATE, the consumers' variable, sets it too (0: unpaced)")
	var start consumer.From
	f.after = append(f.after, func() error {
		if *from == "" {
			return usagef("replay: --from is required")
		}
		var err error
		if start, err = consumer.ParseFrom(*from); err != nil {
			return usagef("replay: %v", err)
		}
		if start.Time.After(time.Now()) {
			// No event is after it: the replay read none, caught the store up and succeeded.
			return usagef("replay: --from %q: a time to come: no event is after it (want a time past, an offset or start)", *from)
		}
		return nil
	})
	if err := f.parse(args); err != nil {
		return err
	}
	d, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer d.close()
	stats, err := consumer.Replay(ctx, consumer.Config{Brokers: c.brokerList(), Topics: c.topics(), BatchSize: *batch, MaxRate: *maxRate,
		Logger: c.logger(os.Stderr)}, start, d.store, d.redis, os.Stderr) // progress, as every command's
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "replayed %d events\n", stats.Events)
	return nil
}

func runCompensate(ctx context.Context, args []string, stdout io.Writer) error {
	f := newFlags("compensate", "Release a reservation that will not become an order, or refund a confirmed order\n(--order; prints its final state as JSON). With --campaign, every pending reservation\nand every confirmed or paid order of a campaign, or those of --status, with progress.\nIdempotent: run again, it changes nothing more.", stdout)
	c := f.conn(usesAll)
	order := f.orderID("order", "the order id")
	campaign := f.campaignID("campaign", "compensate every order of this campaign (in place of --order)")
	status := f.String("status", "", "with --campaign: pending (release the pending reservations) or confirmed (refund the confirmed and paid orders); default both")
	f.pick("order", "campaign", "status")
	f.after = append(f.after, func() error {
		switch {
		case (*order == "") == (*campaign == ""):
			return usagef("compensate: give one of --order and --campaign")
		case *status != "" && (*campaign == "" || (*status != "pending" && *status != "confirmed")):
			return usagef("compensate: --status is pending or confirmed, with --campaign")
		}
		return nil
	})
	if err := f.parse(args); err != nil {
		return err
	}
	pending, confirmed := *status != "confirmed", *status != "pending"
	op, d, done, err := openOperator(ctx, c)
	if err != nil {
		return err
	}
	defer done()
	if *order != "" {
		// A stop (^C) lets the order in hand finish, as a bulk run's orders do: cut in the
		// middle, its refund was stored with its announcement not sent, and the command failed
		// as if Kafka were down.
		work, release := events.Drain(ctx, 0, c.logger(os.Stderr), "the order in hand")
		o, err := op.Compensate(work, *order)
		release()
		if err != nil {
			return err
		}
		return printJSON(stdout, api.ViewOrder(o))
	}
	if _, err := d.store.Campaign(ctx, *campaign); err != nil {
		return err
	}
	update, stop := bench.NewProgress(os.Stderr).Track("compensate " + *campaign)
	tally, err := op.CompensateCampaign(ctx, *campaign, pending, confirmed, update)
	stop()
	if err != nil && tally != (compensator.Tally{}) {
		// A run cut short (a stop, a failure) has done part of its work: the operator sees
		// what, as campaign cancel shows it, with what is left in the error.
		return errors.Join(err, printJSON(stdout, tally))
	}
	if err != nil {
		return err
	}
	return printJSON(stdout, tally)
}

// produceLinger is how long the api's producer waits to fill a batch by default. 1ms: side by
// side in the bench's all-accept-unpaced, two rounds each, against 0: 13,824 and 13,794 req/s
// against 11,713 and 10,549, p99 42 and 41 ms against 50 and 56, Kafka's CPU 13-15 µs an order
// against 19-22; 2ms measured the same as 1ms. An idle sale pays the 1ms.
const produceLinger = time.Millisecond

// apiProducer is the Kafka client an api produces purchases with, in `seckill api` and in
// `seckill dev`: purchases placed by partition backlog (events.Topics.Partitioner), each batch
// waiting up to linger to fill.
func apiProducer(brokers []string, topics events.Topics, linger time.Duration) (*kgo.Client, error) {
	return events.NewClient(brokers, kgo.ProducerLinger(linger), topics.Partitioner())
}
