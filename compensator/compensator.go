package compensator

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// Config configures a Compensator.
type Config struct {
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Topics are the topic names. Default: events.NewTopics(events.DefaultPrefix).
	Topics events.Topics
	// Group is the DLQ consumer group. Default: the DLQ topic's name + ".compensator".
	Group string
	// SessionTimeout is how long the dead letters of a compensator that died stay with it
	// before the group hands them to the others. Default: events.DefaultSessionTimeout.
	SessionTimeout time.Duration
	// SweepInterval is how often the sweeper looks for reservations past their deadline.
	// Default: 5s.
	SweepInterval time.Duration
	// Retention is how long Redis keeps what it no longer sells from: the records of released,
	// refunded and expired reservations (which a retry of an Idempotency-Key finds, and a
	// rebuild restores; keep it at least the api's idempotency TTL), and an ended campaign's
	// keys after its end. The store keeps the history. Default: 24h.
	Retention time.Duration
	// GuardInterval is how often the compensator checks that Redis still has its data.
	// Default: 1s.
	GuardInterval time.Duration
	// RebuildGrace is how long a rebuild waits after freezing for purchases in flight to reach
	// Kafka or fail: at least the api's produce timeout. Default: 6s.
	RebuildGrace time.Duration
	// DrainTimeout is how long a stopping compensator goes on finishing the work in hand (the
	// dead letters of the batch it holds, the orders the sweeper is resolving, the rebuild of
	// Redis the guard has started) before it gives up on it; what it gives up on is done again
	// later. Default: events.DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Logger receives progress and errors. Default: slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Topics == (events.Topics{}) {
		c.Topics = events.NewTopics(events.DefaultPrefix)
	}
	if c.Group == "" {
		c.Group = c.Topics.CompensatorGroup()
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = 5 * time.Second
	}
	if c.GuardInterval <= 0 {
		c.GuardInterval = time.Second
	}
	if c.Retention <= 0 {
		c.Retention = 24 * time.Hour
	}
	if c.RebuildGrace <= 0 {
		c.RebuildGrace = 6 * time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = events.DefaultDrainTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports whether the configuration can work.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("compensator: no Kafka brokers")
	}
	return nil
}

// Campaigns lists the campaigns the sweeper visits, and the orders it finishes.
type Campaigns interface {
	Campaigns(ctx context.Context) ([]store.Campaign, error)
	ExpiringOrders(ctx context.Context, now time.Time, after store.ExpiryKey, limit int) ([]store.Order, error)
	UnfinishedRefunds(ctx context.Context, after string, limit int) ([]store.Order, error)
	UnannouncedPayments(ctx context.Context, paidBy time.Time, after string, limit int) ([]store.Order, error)
}

// Sweeper finds reservations past their deadline, and drops from Redis what it keeps no longer.
type Sweeper interface {
	Expired(ctx context.Context, campaign string, skip, limit int) ([]string, error)
	Trim(ctx context.Context, campaign string, retention time.Duration, limit int) (int, error)
	Drop(ctx context.Context, campaign string, version int64) (bool, error)
	Sync(ctx context.Context, c lua.Campaign) (lua.Synced, error)
}

// Verdicts reads the last audit verdict of each campaign.
type Verdicts interface {
	AuditVerdicts(ctx context.Context) (map[string]store.AuditVerdict, error)
}

// Locker takes lease locks.
type Locker interface {
	TryLock(ctx context.Context, name string, lease time.Duration) (*lua.Lock, error)
}

// Fencer issues the fencing tokens of lease locks.
type Fencer interface {
	IssueFence(ctx context.Context, name string, floor int64) (store.Fence, error)
}

// Compensator consumes the dead-letter topic and runs the sweeper.
type Compensator struct {
	*Resolver
	cfg       Config
	cl        *kgo.Client
	campaigns Campaigns
	sweeper   Sweeper
	locker    Locker
	fencer    Fencer
	rebuilder Rebuilder
	snapshots Snapshotter
	verdicts  Verdicts
	dropped   sync.Map // id → version of ended campaigns whose keys this process dropped
	page      int      // how many orders a sweep reads at once of each list: the store's, and a campaign's overdue reservations (sweepPage)

	// The sweeper's place in the store's lists: where its next page of each starts (see
	// nextPage). Kept by this process only: a new lease holder starts at the top, which costs
	// it at most one pass over the lists.
	pagesMu       sync.Mutex
	refundsAfter  string
	expiringAfter store.ExpiryKey
	paidAfter     string

	mastersMu sync.Mutex
	masters   map[string]bool // run ids of the primaries at the guard's last round (resharded)

	// sweeperDown and guardDown log the failures of the sweeper's tries for its lease and of
	// the guard's rounds as outages: a warning for each, not one every few hundred milliseconds.
	sweeperDown, guardDown events.Outage
}

// New returns a Compensator over the store and Redis.
func New(cfg Config, st *store.Store, r *lua.Redis) (*Compensator, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// WarnUnreachable: without it a compensator whose brokers are down only looks idle.
	cl, err := events.NewGroupClient(cfg.Brokers, cfg.Group, cfg.Topics.DLQ, cfg.SessionTimeout, nil, events.WarnUnreachable(cfg.Logger))
	if err != nil {
		return nil, err
	}
	return &Compensator{
		Resolver:  &Resolver{Store: st, Redis: r, Producer: cl, Results: cfg.Topics.Results, Logger: cfg.Logger},
		cfg:       cfg,
		cl:        cl,
		campaigns: st,
		sweeper:   r,
		locker:    r,
		fencer:    st,
		rebuilder: r,
		snapshots: st,
		verdicts:  st,
		page:      sweepPage,
	}, nil
}

// Close delivers the outcomes announced and not yet acknowledged (the store holds them already,
// so it waits at most 10 seconds), then closes the Kafka client.
func (c *Compensator) Close() { events.FlushAndClose(c.cl) }

// Ping reports whether Kafka answers.
func (c *Compensator) Ping(ctx context.Context) error { return c.cl.Ping(ctx) }

// Run consumes the DLQ, sweeps, and guards Redis until ctx is canceled, finishing the work in
// hand first (within DrainTimeout): the dead letters of the batch it holds, resolved and
// committed, the orders the sweeper is resolving (the sweeper then lets its lease go), and the
// rebuild of Redis the guard has started, to its campaigns' unfreezing. It returns nil after a
// clean stop.
func (c *Compensator) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return c.consumeDLQ(ctx) })
	g.Go(func() error { return c.sweep(ctx) })
	g.Go(func() error { return c.guard(ctx) })
	g.Go(func() error { return c.exportAudits(ctx) })
	return g.Wait()
}

// auditEvery is how often the compensator reads the last audit verdicts for its metrics.
const auditEvery = 15 * time.Second

// exportAudits keeps seckill_audit_violations at the last recorded audit of each campaign, so
// that a violation `seckill audit` found raises an alert.
func (c *Compensator) exportAudits(ctx context.Context) error {
	t := time.NewTicker(auditEvery)
	defer t.Stop()
	for {
		vs, err := c.verdicts.AuditVerdicts(ctx)
		switch {
		case err == nil:
			for id, v := range vs {
				auditViolations.WithLabelValues(id).Set(float64(v.ViolationCount()))
			}
		case ctx.Err() == nil:
			c.cfg.Logger.Warn("read the audit verdicts for the metrics", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (c *Compensator) consumeDLQ(ctx context.Context) error {
	// Not With("topic"): the loop's own lines name the topic they are about, and a JSON line
	// holding "topic" twice is one that log pipelines reject or mangle.
	log := c.cfg.Logger.With("role", "compensator")
	log.Info("consuming dead letters", "topic", c.cfg.Topics.DLQ, "group", c.cfg.Group)
	err := events.ConsumeLoop(ctx, c.cl, 100, c.cfg.DrainTimeout, log, func(work, stop context.Context, fs kgo.Fetches) error {
		// A stop lets the whole batch in hand finish, not only the letter being resolved: its
		// offsets are committed as one, and stopping part way would leave the letters already
		// resolved uncommitted, to be resolved again by whoever takes the partition. A batch is
		// at most 100 letters of a few round trips each, within the drain's bound.
		for _, rec := range fs.Records() {
			if err := c.deadLetter(work, stop, rec); err != nil {
				return err
			}
		}
		return nil
	})
	return events.SessionRefused(err, c.cfg.SessionTimeout)
}

// deadLetter resolves one dead-lettered event, retrying while stop is not done.
func (c *Compensator) deadLetter(work, stop context.Context, rec *kgo.Record) error {
	reason := events.Header(rec, events.HeaderReason)
	// Its warnings say where the letter is, for the operator's dlq show PARTITION/OFFSET: an
	// offset alone is in every partition.
	where := c.cfg.Logger.With("topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset)
	e, err := events.Decode(rec.Value)
	if err != nil || e.Type != events.OrderRequested {
		// Without a readable order there is nothing to release here; if it held a
		// reservation, the sweeper releases it at its deadline.
		where.Warn("unreadable dead letter left to the sweeper", "reason", reason, "err", err)
		compensations.WithLabelValues("dlq", "unreadable").Inc()
		return nil
	}
	// leave logs an order no retry can resolve, because Redis holds something of it that it
	// cannot parse: retrying would hold every dead letter behind it on its partition. The
	// sweeper names it each sweep once its deadline has passed, until a person mends what is
	// named and compensates it.
	leave := func(what, left string, err error) error {
		where.Error("dead letter of an order whose "+what+" Redis cannot parse: "+left+"; mend it, then run `seckill compensate --order`",
			"order_id", e.OrderID, "campaign", e.CampaignID, "reason", reason, "err", err)
		compensations.WithLabelValues("dlq", "malformed").Inc()
		return nil
	}
	return events.Retry(stop, c.cfg.Logger, "resolve dead letter "+e.OrderID, func() error {
		// The store refused an order Redis holds confirmed, refunded or expired only if it
		// lost the order and what let it be stored (a restore from a backup without its
		// campaign's row): it is left out of the store, for a replay to store it as Redis
		// ended it once the operator has put that back.
		res, err := c.Redis.Reservation(work, e.OrderID)
		if errors.Is(err, lua.ErrMalformed) {
			return leave("reservation record", "left pending", err)
		}
		if err != nil && !errors.Is(err, lua.ErrNoReservation) {
			return err
		}
		if err == nil && storedBefore(res.State) {
			_, lost, err := c.lost(work, e.OrderID)
			if err != nil {
				return err
			}
			if lost {
				where.Warn("dead letter of an order Redis holds confirmed, refunded or expired that the store lost: "+
					"left out of the store; put back what the store refused it for, then run `seckill replay`",
					"order_id", e.OrderID, "campaign", e.CampaignID, "state", res.State, "reason", reason)
				compensations.WithLabelValues("dlq", "lost").Inc()
				return nil
			}
		}
		_, err = c.Fail(work, e, reason, "dlq")
		if errors.Is(err, lua.ErrMalformed) {
			// The record parsed, but release.lua will not add to a stock or a buyer's count
			// that is not a whole number. The order is failed in the store (written first).
			return leave("campaign's stock or buyer's count", "its units left held", err)
		}
		return err
	})
}

// sweep releases reservations past their deadline every SweepInterval, on one compensator at a
// time: the holder of the sweeper's lease lock. Two sweepers would be safe (the store decides
// every race) but would do all the work twice.
func (c *Compensator) sweep(ctx context.Context) error {
	name := c.cfg.Topics.Prefix + ".sweeper"
	lease, retry := sweeperLease(c.cfg.SweepInterval)
	for {
		lock, err := c.locker.TryLock(ctx, name, lease)
		switch {
		case err == nil:
			c.sweeperDown.Answered(c.cfg.Logger, "sweeper lock: redis answers again")
			sweeperLeaseHeld.Inc()
			err = lock.Hold(ctx, func(held context.Context) error { return c.sweepFenced(held, lock, name) })
			sweeperLeaseHeld.Dec()
			reservationsOverdue.Set(0) // the next holder reports them: a standby's figure would be stale
			if ctx.Err() == nil {
				c.cfg.Logger.Warn("sweeper lease ended", "err", err)
			}
		case errors.Is(err, lua.ErrLockHeld): // another compensator sweeps
			c.sweeperDown.Answered(c.cfg.Logger, "sweeper lock: redis answers again")
		case ctx.Err() == nil:
			c.sweeperDown.Failed(c.cfg.Logger, "sweeper lock: redis calls failing; reservations past their deadline wait for a sweeper", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
	}
}

// sweeperLease returns the sweeper's lease and how often a standby tries to take it. A holder
// killed with -9 keeps its lease to its end, and a standby takes it at most retry later, so a
// reservation past its deadline is released within one sweep interval even then (I5): with
// lease + retry under the interval. The holder renews at a third of the lease. Below a second
// renewals would race a loaded Redis, so a short interval (a test's) gets a longer lease.
func sweeperLease(interval time.Duration) (lease, retry time.Duration) {
	lease = max(interval/2, time.Second)
	return lease, lease / 4
}

// sweepFenced sweeps while lock (the lease called name) is held, under a fencing token the store
// issues for this holding: the store then refuses every earlier holder's writes, even those of
// one paused past its lease that has not noticed yet. ctx ends with the holding: at a stop, or
// when the lease is lost.
func (c *Compensator) sweepFenced(ctx context.Context, lock *lua.Lock, name string) error {
	fence, err := c.fencer.IssueFence(ctx, name, lock.Count)
	if err != nil {
		return err
	}
	// A pause between taking the lock and the token can let the lease pass to a holder that took
	// its token first: this one then has the latest token and no lease, and must not act on it.
	held, err := lock.Renew(ctx)
	if err != nil {
		return err
	}
	if !held {
		return errors.New("the lease passed on before its fencing token was issued")
	}
	c.cfg.Logger.Info("sweeping as lease holder", "fence", fence.Token)
	// A resolution is several writes (the store, Redis, the announcement, the store again): cut
	// in the middle by the end of the holding, it would wait for the next sweep to be redone.
	// So the orders in hand run on a context of their own, which outlives the holding by the
	// drain's bound at most, and the holding's end only keeps the sweep from taking another.
	// Finishing them after a lost lease is safe: a failure's writes carry this holding's fence,
	// which the store refuses once a later holder has one, and a refund's or an expiry's are
	// conditional in the store and run once in Redis, whoever runs them.
	work, release := events.Drain(ctx, c.cfg.DrainTimeout, c.cfg.Logger, "the sweeper's orders in hand")
	defer release()
	return c.sweepWhileHeld(work, ctx, fence)
}

// sweepWhileHeld sweeps every SweepInterval until stop is done; work is the context of the
// sweeps' I/O (see sweepOnce).
func (c *Compensator) sweepWhileHeld(work, stop context.Context, fence store.Fence) error {
	t := time.NewTicker(c.cfg.SweepInterval)
	defer t.Stop()
	for {
		n, err := c.sweepOnce(work, stop, fence)
		if errors.Is(err, store.ErrStaleFence) {
			return err // a later holder has taken a token: this one must stop at once
		}
		if err != nil && stop.Err() == nil {
			c.cfg.Logger.Warn("sweep failed", "err", err, "count", n)
		} else if n > 0 {
			// n counts every order the sweep resolved: reservations past their deadline, refunds
			// finished, orders expired unpaid, payments announced.
			c.cfg.Logger.Info("sweep resolved orders", "count", n)
		}
		select {
		case <-stop.Done():
			return context.Cause(stop) // why the holding ended (Lock.Hold's watchdog says), for the log
		case <-t.C:
		}
	}
}

// SweepOnce fails every reservation past its deadline that the consumer has not confirmed,
// expires every order left unpaid past its pay_by, finishes the refunds stored whose units
// Redis still holds (a cancel's among them), announces the payments whose OrderPaid Kafka may
// not have, and returns how many it resolved. fence is the sweeper lock's token (zero:
// unfenced). A campaign or an order it cannot resolve (its shard
// does not answer, Redis holds a record it cannot parse) is reported in the error once the rest
// is done: it must not keep every campaign, refund and expiry after it waiting, sweep after
// sweep. Only a stale fence or the end of ctx stops the sweep at once. Once Kafka has not taken
// an announcement the sweep waits for, the refunds, expiries and payments left are skipped (see
// unannounced).
func (c *Compensator) SweepOnce(ctx context.Context, fence store.Fence) (int, error) {
	return c.sweepOnce(ctx, ctx, fence)
}

// sweepOnce is SweepOnce for a sweeper that may be told to stop mid-sweep: once stop is done it
// takes no other campaign or order, and returns. Its I/O runs on work, so the orders in hand
// when stop comes are resolved to their end. Only those: the rest of the page may be a
// thousand orders, which the next sweep, of any holder, takes as well.
func (c *Compensator) sweepOnce(work, stop context.Context, fence store.Fence) (int, error) {
	cs, err := c.campaigns.Campaigns(work)
	if err != nil {
		return 0, err
	}
	now := time.Now()
	// Pages past the first of each list are taken while the sweep is within its interval: a
	// page of orders on a Redis shard that hangs costs its timeouts, and the next sweep must not
	// wait for a whole list of them.
	until := now.Add(c.cfg.SweepInterval)
	r := &sweepRun{stop: stop}
	overdue := 0
	defer func() { reservationsOverdue.Set(float64(overdue)) }()
	for _, camp := range cs {
		if r.over(false) {
			return r.result()
		}
		gone, err := c.retire(work, camp, now)
		if err != nil && r.halt(err) {
			return r.result()
		}
		if gone { // nothing was pending when its keys went, and nothing can be since
			continue
		}
		// An operator's change whose Redis step failed reaches the sale here.
		if camp.Version > 0 && !c.retired(camp, now) {
			if _, err := c.sweeper.Sync(work, RedisCampaign(camp)); err != nil && r.halt(err) {
				return r.result()
			}
		}
		// A page, and more while they come full and the sweep is within its interval: a
		// consumer down past the reservations' deadline leaves a sale's thousands due at once,
		// and I5 gives each one sweep. What stays pending (it failed) stays first in the list:
		// the next page is listed past those, or a page of them would end the campaign's turn
		// every sweep, the reservations behind them never released. A page with none this sweep
		// has not tried ends it too, so the sweep is never trapped in a loop; the next sweep
		// tries the failed ones again.
		tried := map[string]bool{}
		var failed atomic.Int64
		for first := true; first || time.Now().Before(until); first = false {
			ids, err := c.sweeper.Expired(work, camp.ID, int(failed.Load()), c.page)
			if err != nil {
				if r.halt(err) {
					return r.result()
				}
				break
			}
			fresh := ids[:0:0]
			for _, id := range ids {
				if !tried[id] {
					tried[id] = true
					fresh = append(fresh, id)
				}
			}
			overdue += len(fresh)
			if !resolveEach(r, fresh, false, func(id string) error {
				res, err := c.Redis.Reservation(work, id)
				if err == nil {
					_, err = c.FailFenced(work, reservationEvent(res), events.ReasonExpired, "sweeper", fence)
				}
				if err != nil {
					failed.Add(1)
				}
				return err
			}) {
				return r.result()
			}
			if len(ids) < c.page || len(fresh) == 0 {
				break
			}
		}
	}
	// A refund that stopped between the store and Redis (an operator's control cut short, a
	// cancel killed after its store step refunded the campaign's orders) holds its units, and
	// its buyer waits for its announcement, until someone runs the control again; the sweeper
	// gives them back and announces it. Finishing one twice gives nothing twice.
	if !sweepList(r, until, &c.pagesMu, &c.refundsAfter, c.page, func(after string) ([]store.Order, error) {
		return c.campaigns.UnfinishedRefunds(work, after, c.page)
	}, func(o store.Order) string { return o.OrderID }, func(o store.Order) error {
		_, err := c.refundReservation(work, o, "sweeper")
		return err
	}) {
		return r.result()
	}
	// Every order due when the sweep started that its interval leaves time for, not a page of
	// them: a sale's unpaid orders come due as fast as the consumer confirmed them, thousands a
	// second, and a page per sweep ended them many sweeps past their pay_by, where I6 gives
	// them one.
	if !sweepList(r, until, &c.pagesMu, &c.expiringAfter, c.page, func(after store.ExpiryKey) ([]store.Order, error) {
		return c.campaigns.ExpiringOrders(work, now, after, c.page)
	}, store.Order.ExpiryKey, func(o store.Order) error {
		_, err := c.Expire(work, o.OrderID, now)
		return err
	}) {
		return r.result()
	}
	// A payment whose OrderPaid Kafka refused, or whose process died before Kafka had it, is
	// in the store alone: the order streams and a replay after a restore learn of payments from
	// the results topic. The sweeper announces it once its own announcement has had paidGrace
	// to land, so as not to race it; one announced twice all the same is read by order_id.
	sweepList(r, until, &c.pagesMu, &c.paidAfter, c.page, func(after string) ([]store.Order, error) {
		return c.campaigns.UnannouncedPayments(work, now.Add(-paidGrace), after, c.page)
	}, func(o store.Order) string { return o.OrderID }, func(o store.Order) error {
		if err := c.announcePaid(work, o, "the sweeper announces it again once Kafka answers"); err != nil {
			return err
		}
		compensations.WithLabelValues("sweeper", "paid_announced").Inc()
		return nil
	})
	return r.result()
}

// paidGrace is how long after its payment the sweeper leaves a paid order's announcement to the
// payment's own call: more than the call's wait for Kafka (announceTimeout), with room for the
// store's commit before it.
const paidGrace = 2 * announceTimeout

// BulkTimeout bounds an operator's cancel or bulk compensation run by the api: it goes on when
// the admin stops waiting, and running it again finishes what it left.
const BulkTimeout = 10 * time.Minute

// sweepList resolves a store list of refunds, expiries or payments to announce page by page
// (read returns the page after a key) from where the last sweep left it (*place): one page, and
// more while the list goes on and the sweep is within until. *place follows each page (see
// nextPage), so a sweep cut short, or out of time, leaves the next where this one stopped, and
// the end of the list sends the next sweep to the top: what failed is tried again once a pass.
// An order due since the last pass is not left behind the place: expiries are listed by pay_by,
// so it is at the end (a refund or a payment listed behind it waits for the next pass). It
// reports whether the sweep goes on: false once it is over for orders it announces (see
// sweepRun.over). A read that fails keeps the place and ends this list's part of the sweep.
func sweepList[K comparable](r *sweepRun, until time.Time, mu *sync.Mutex, place *K, limit int, read func(after K) ([]store.Order, error),
	key func(store.Order) K, resolve func(store.Order) error) bool {
	var top K
	mu.Lock()
	after := *place
	mu.Unlock()
	for first := true; ; first = false {
		if r.over(true) {
			return false
		}
		if !first && !time.Now().Before(until) {
			return true
		}
		page, err := read(after)
		if err != nil {
			return !r.halt(err)
		}
		if !resolveEach(r, page, true, resolve) {
			return false // at the same place: see nextPage
		}
		after = nextPage(page, limit, key)
		mu.Lock()
		*place = after
		mu.Unlock()
		if after == top {
			return true
		}
	}
}

// nextPage returns the key after which the next page of a store list starts, once a sweep
// went through page (of at most limit orders, in key order), and key gives an order's key. A
// page is read from where the last one ended, not from the top: the orders that keep failing
// (a Redis shard down under a large campaign) stay listed, and a page of them read again and
// again kept every order behind them, on healthy shards, waiting for good. A short page is the
// end of the list, and the next page starts at the top again: what failed is retried once per
// pass. A keyset cursor, not an offset: orders leave the lists as they are finished, and an
// offset would skip those that moved up. A sweep cut short (told to stop, a stale fence, Kafka
// not taking its announcements) keeps its place instead: it skipped orders of the page, which
// the unannounced skip promises to the next sweep.
func nextPage[K any](page []store.Order, limit int, key func(store.Order) K) K {
	if len(page) < limit {
		var top K
		return top
	}
	return key(page[len(page)-1])
}

// sweepPage is how many unfinished refunds, and how many orders to expire, a sweep reads from
// the store at once.
const sweepPage = 1000

// sweepParallel is how many orders of a page the sweeper resolves at once. Each is a few round
// trips in turn, to the store, Redis and Kafka (whose announcements of expiries and refunds it
// waits for): one at a time, a page of 1,000 expiries took 2.8–2.9 s on the test services, so
// an unpaid wave of a few thousand orders ended many seconds past its pay_by plus a sweep
// interval (I6). The orders are independent, and each write is the store's conditional update
// or a script of Redis's, fenced with the sweeper's token.
const sweepParallel = 16

// sweepRun is one sweep's account: how many orders it resolved, what failed, and whether it
// must end.
type sweepRun struct {
	stop context.Context
	mu   sync.Mutex
	n    int
	errs []error
	// stale says that a write was refused for a stale fence: a later holder has a token, and
	// this sweep must end at once.
	stale bool
	// unannounced says that Kafka refused, or did not take within announceTimeout, an
	// announcement this sweep waited for. Kafka is then most likely down for the rest of it,
	// and each refund and expiry left would wait announceTimeout in turn: a page of them would
	// hold the sweep, and the reservations of the next one, for an hour or more. Those left
	// are skipped instead: the store lists them until Kafka has their announcement, so the
	// next sweep takes them.
	unannounced bool
}

// halt keeps err for the answer and says whether the sweep must end now: at a stale fence or
// a stop. A campaign or an order that cannot be resolved does not keep the others waiting.
func (r *sweepRun) halt(err error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
	r.stale = r.stale || errors.Is(err, store.ErrStaleFence)
	r.unannounced = r.unannounced || errors.Is(err, errNotAnnounced)
	return r.stale || r.stop.Err() != nil
}

// over says that the sweep takes no more orders of a kind: none once it was told to stop or
// met a stale fence, and none whose announcement it waits for (announcing: refunds, expiries
// and payments) once Kafka did not take one. The releases of overdue reservations, whose
// OrderFailed is not waited for, go on.
func (r *sweepRun) over(announcing bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stale || r.stop.Err() != nil || (announcing && r.unannounced)
}

// resolved counts an order the sweep resolved.
func (r *sweepRun) resolved() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
}

func (r *sweepRun) result() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n, errors.Join(r.errs...)
}

// resolveEach resolves the items of a page, sweepParallel at once, and reports whether the
// sweep goes on. None is started once the run is over (see over for announcing); those
// started finish. The check follows the wait for a free slot, and a resolution records its
// error before it frees its slot, so nothing starts after a halt.
func resolveEach[T any](r *sweepRun, items []T, announcing bool, resolve func(T) error) bool {
	var wg sync.WaitGroup
	slots := make(chan struct{}, sweepParallel)
	for _, it := range items {
		slots <- struct{}{}
		if r.over(announcing) {
			<-slots
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := resolve(it); err != nil {
				r.halt(err)
				return
			}
			r.resolved()
		})
	}
	wg.Wait()
	return !r.over(announcing)
}

// retire drops from Redis what selling no longer needs: records of reservations released or
// refunded more than the retention ago (a page per sweep), and the keys of a campaign that
// ended more than the retention ago (a cancel's refunds left unfinished are finished without
// them: their announcement is what the buyers wait for, and the sale's units are of no use). It
// reports whether the campaign's keys are gone: the sweeper then spends no call on it, so a
// sweep's work does not grow with the campaigns of the past.
func (c *Compensator) retire(ctx context.Context, camp store.Campaign, now time.Time) (bool, error) {
	if c.retired(camp, now) {
		// Remembered by version: an operator may reopen a retired campaign (Extend) and a
		// rebuild put it back in Redis, with no sweep seeing it on sale before it retires again.
		// Its keys must go again then.
		if v, ok := c.dropped.Load(camp.ID); ok && v.(int64) == camp.Version {
			return true, nil
		}
		// At the version read at the sweep's start: an extend that reopened the sale since,
		// and reached Redis, keeps its keys.
		dropped, err := c.sweeper.Drop(ctx, camp.ID, camp.Version)
		if dropped {
			c.dropped.Store(camp.ID, camp.Version) // one script call per old campaign, not per sweep
			c.cfg.Logger.Debug("ended campaign's keys left redis", "campaign", camp.ID)
		}
		return dropped, err
	}
	_, err := c.sweeper.Trim(ctx, camp.ID, c.cfg.Retention, 1000)
	return false, err
}
