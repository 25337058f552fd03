package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/failpoint"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// Config configures a Consumer.
type Config struct {
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Topics are the topic names. Default: events.NewTopics(events.DefaultPrefix).
	Topics events.Topics
	// Group is the consumer group. Default: the requested topic's name + ".consumer".
	Group string
	// BatchSize is the most events persisted in one transaction. Default: 500.
	BatchSize int
	// MaxRate is the most events the whole group persists per second, the design's controlled
	// pace: Kafka holds a burst and the database takes it at a rate it sustains beside
	// everything else. Each member takes the share of it that its partitions of the requested
	// topic are of all the topic's partitions. 0: as fast as the database takes them.
	MaxRate int
	// SessionTimeout is how long the partitions of a consumer that died stay with it before the
	// group hands them to the others. Default: events.DefaultSessionTimeout.
	SessionTimeout time.Duration
	// DrainTimeout is how long a stopping consumer goes on finishing the batch in hand before it
	// gives up on it (the batch is redelivered). Default: events.DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Logger receives progress and errors. Default: slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Topics == (events.Topics{}) {
		c.Topics = events.NewTopics(events.DefaultPrefix)
	}
	if c.Group == "" {
		c.Group = c.Topics.ConsumerGroup()
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 500
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
		return errors.New("consumer: no Kafka brokers")
	}
	if c.MaxRate < 0 {
		return fmt.Errorf("consumer: max rate %d: want 0 (unpaced) or more events per second", c.MaxRate)
	}
	return nil
}

// Persister is the part of the store the consumer writes to.
type Persister interface {
	ConfirmOrders(ctx context.Context, evs []events.Event) ([]store.Result, error)
	RecordGivenBack(ctx context.Context, orders []store.Order) (stored, moved int, err error)
}

// Confirmer reads reservations in Redis and marks them confirmed.
type Confirmer interface {
	// ConfirmAll returns the orders it did not confirm, with their reservation's state.
	ConfirmAll(ctx context.Context, orderIDs []string) (map[string]string, error)
	Reservations(ctx context.Context, orderIDs []string) (map[string]lua.Reservation, error)
}

var (
	_ Persister = (*store.Store)(nil)
	_ Confirmer = (*lua.Redis)(nil)
)

// Consumer is the group consumer of OrderRequested events.
type Consumer struct {
	cfg  Config
	h    *handler
	cl   *kgo.Client
	pace *pace
}

// New returns a Consumer; it joins its group when Run starts polling.
func New(cfg Config, st Persister, r Confirmer) (*Consumer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pace := newPace(cfg)
	gone := func(ps map[string][]int32) {
		forgetLag(ps)
		pace.gone(ps)
	}
	opts := []kgo.Opt{
		events.WarnUnreachable(cfg.Logger),
		// A fetch answered with whatever had arrived (Kafka's 1 byte) made batches of a few
		// orders under load, and the broker, this process and PostgreSQL paid per batch. Waiting
		// for a full batch (256 KB: some 800 events of ~320 bytes; a batch is 500) or 100ms, side
		// by side in the bench's all-accept-unpaced, two rounds each: consumer 17-20 µs an order
		// against 26, Kafka 19-26 against 31-41, PostgreSQL 17-19 against 22-24. A quiet sale's
		// order is confirmed up to 100ms later.
		kgo.FetchMinBytes(256 << 10), kgo.FetchMaxWait(100 * time.Millisecond),
	}
	if cfg.MaxRate > 0 {
		// franz-go fetches the partitions an assignment adds only after this callback, so their
		// first batch is paced by the new share. With BlockRebalanceOnPoll the callback also
		// waits for the batch in hand, as a revocation does: an unpaced consumer goes without.
		opts = append(opts, kgo.OnPartitionsAssigned(pace.assigned))
	}
	cl, err := events.NewGroupClient(cfg.Brokers, cfg.Group, cfg.Topics.Requested, cfg.SessionTimeout, gone, opts...)
	if err != nil {
		return nil, err
	}
	return &Consumer{cfg: cfg, cl: cl, pace: pace, h: &handler{cfg: cfg, store: st, redis: r, cl: cl}}, nil
}

// Close leaves the group and closes the Kafka client.
func (c *Consumer) Close() { c.cl.Close() }

// Ping reports whether Kafka answers.
func (c *Consumer) Ping(ctx context.Context) error { return c.cl.Ping(ctx) }

// Run polls and persists until ctx is canceled; the batch in hand when it is canceled is
// finished and committed first, within DrainTimeout. It returns nil after a clean stop.
func (c *Consumer) Run(ctx context.Context) error {
	log := c.cfg.Logger.With("role", "consumer", "group", c.cfg.Group)
	log.Info("consuming", "topic", c.cfg.Topics.Requested, "batch_size", c.cfg.BatchSize, "max_rate", c.cfg.MaxRate)
	err := events.ConsumePipelined(ctx, c.cl, c.pace.batchSize, c.cfg.DrainTimeout, log, func(work, stop context.Context, fs kgo.Fetches) (func() error, error) {
		if err := c.pace.wait(stop, fs.NumRecords()); err != nil {
			return nil, err // stopping: the batch is redelivered
		}
		finish, err := c.h.persist(work, stop, fs.Records())
		if err != nil {
			return nil, err
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if n := len(p.Records); n > 0 {
				lag.WithLabelValues(strconv.Itoa(int(p.Partition))).Set(float64(p.HighWatermark - p.Records[n-1].Offset - 1))
			}
		})
		return finish, nil
	})
	return events.SessionRefused(err, c.cfg.SessionTimeout)
}

// forgetLag drops the lag of partitions this consumer no longer owns: their figure would stay
// at their last batch's for good, beside the new owner's, and hold up the lag that the alerts
// and the dashboard read (the highest of a partition's figures).
func forgetLag(gone map[string][]int32) {
	for _, ps := range gone {
		for _, p := range ps {
			lag.DeleteLabelValues(strconv.Itoa(int(p)))
		}
	}
}

// handler persists batches; the group consumer and Replay share it.
type handler struct {
	cfg   Config
	store Persister
	redis Confirmer
	cl    *kgo.Client // produces to the results and dead-letter topics
	// replay, set by Replay, counts the poison events and the store's refusals instead of
	// dead-lettering them: the consumer did when it read them first, and the compensator
	// resolved them (or the sweeper did, at the reservation's deadline). It also counts the
	// orders recordGivenBack stores and moves on, and makes it wait for Redis.
	replay *ReplayStats
	// redisDown logs Redis's failures to answer a batch's reads and confirmations as outages: a
	// warning for each, not two a batch.
	redisDown events.Outage
	// redisBusy holds the ops (askRedis) whose last call is still waiting for Redis.
	redisBusy sync.Map
	// counted holds, in a replay, the places in the log of the poison events and refusals
	// counted: a data loss's rewind reads some of the range again (topicRange.read), and each is
	// counted once, as the events read are.
	counted map[logPlace]bool
}

// logPlace is a record's partition and offset in the requested topic.
type logPlace struct {
	partition int32
	offset    int64
}

// deadLetter adds rec's dead letter to out, counted by kind (events.ReasonPoison, or the store's
// reason) and explained by reason, or, in a replay, counts it there.
func (h *handler) deadLetter(out []*kgo.Record, rec *kgo.Record, kind, reason string) []*kgo.Record {
	if h.replay != nil {
		at := logPlace{rec.Partition, rec.Offset}
		if h.counted[at] {
			return out
		}
		if h.counted == nil {
			h.counted = map[logPlace]bool{}
		}
		h.counted[at] = true
		if kind == events.ReasonPoison {
			h.replay.Poison++
		} else {
			h.replay.Refused++
			h.cfg.Logger.Info("replay: the store refused an order; left out of the store, not dead-lettered",
				"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "reason", reason)
		}
		return out
	}
	deadLettered.WithLabelValues(kind).Inc()
	return append(out, events.DeadLetter(h.cfg.Topics.DLQ, rec, reason))
}

// handle makes a batch durable: orders in the store, refusals in the DLQ, confirmations in
// Redis and on the results topic. It retries the store while stop is not done; work is the
// context of the I/O itself.
func (h *handler) handle(work, stop context.Context, recs []*kgo.Record) error {
	finish, err := h.persist(work, stop, recs)
	if err != nil {
		return err
	}
	return finish()
}

// persist is handle's first stage, which the group consumer overlaps with the previous batch's
// second: it stores the batch and returns finish, which confirms the stored orders in Redis and
// sends the results and dead letters. Nothing of finish may happen before the store's commit:
// an order confirmed in Redis or announced must be in the store.
func (h *handler) persist(work, stop context.Context, recs []*kgo.Record) (finish func() error, err error) {
	evs := make([]events.Event, 0, len(recs))
	srcs := make([]*kgo.Record, 0, len(recs))
	var out []*kgo.Record
	for _, r := range recs {
		var (
			e   events.Event
			err error
		)
		if reason, ok := events.Unreadable(r); ok {
			err = errors.New(reason)
		} else if e, err = events.Decode(r.Value); err == nil && e.Type != events.OrderRequested {
			err = fmt.Errorf("event %s: type %s does not belong on %s", e.EventID, e.Type, r.Topic)
		}
		if err != nil {
			level := slog.LevelWarn
			if h.replay != nil { // the consumer warned of it when it dead-lettered it
				level = slog.LevelInfo
			}
			h.cfg.Logger.Log(work, level, "poison event", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			out = h.deadLetter(out, r, events.ReasonPoison, events.ReasonPoison+": "+err.Error())
			continue
		}
		evs = append(evs, e)
		srcs = append(srcs, r)
	}
	batchSize.Observe(float64(len(evs)))

	// First: the persister would confirm an order the store lost whose units Redis gave back.
	if err := h.recordGivenBack(work, stop, evs); err != nil {
		return nil, err
	}
	var results []store.Result
	err = events.Retry(stop, h.cfg.Logger, "persist batch", func() error {
		var err error
		results, err = h.store.ConfirmOrders(work, evs)
		return err
	})
	if err != nil {
		return nil, err
	}
	failpoint.Inject(failpoint.ConsumerAfterStoreCommit)
	return func() error { return h.finish(work, stop, evs, srcs, results, out) }, nil
}

// finish is handle's second stage: the batch's orders are in the store.
func (h *handler) finish(work, stop context.Context, evs []events.Event, srcs []*kgo.Record, results []store.Result, out []*kgo.Record) error {
	now := time.Now()
	var confirmed []string
	for i, res := range results {
		e := evs[i]
		switch {
		case res.Reason != "":
			out = h.deadLetter(out, srcs[i], res.Reason, res.Reason)
			persistedDeadLettered.Inc()
		case res.Status == events.Confirmed:
			// A redelivered confirmed order is confirmed in Redis again: the first time may
			// have crashed between the store's commit and that call.
			confirmed = append(confirmed, e.OrderID)
			// Announced again on redelivery: the first time may have died before it, and
			// readers key on order_id, so a repeat costs them nothing.
			if res.Duplicate {
				persistedDuplicate.Inc()
			} else {
				persistedConfirmed.Inc()
			}
			rec, err := events.Record(h.cfg.Topics.Results, e.New(events.OrderConfirmed, now))
			if err != nil {
				return err
			}
			out = append(out, rec)
		case res.Status == events.Paid:
			// Redelivered, paid since: nothing to announce, but confirmed in Redis like a
			// confirmed order, whose answer tells of a refund the store lacks (unconfirmed).
			confirmed = append(confirmed, e.OrderID)
			persistedDuplicate.Inc()
		default: // the compensator resolved it first
			persistedDuplicate.Inc()
		}
	}
	// Redis and Kafka are independent of each other here: one round trip's wait, not two.
	redisDone := make(chan struct{})
	var movedErr error
	go func() {
		defer close(redisDone)
		// Not fatal: the sweeper finds these orders confirmed in the store and confirms them.
		left, _ := askRedis(h, "confirm reservations", len(confirmed), func() (map[string]string, error) { return h.redis.ConfirmAll(work, confirmed) })
		if len(left) > 0 { // a redelivery's, or a restored store's: new orders are all pending
			movedErr = h.unconfirmed(work, stop, evs, left)
		}
	}()
	var err error
	if len(out) > 0 {
		err = h.produce(work, stop, out)
	}
	<-redisDone
	if err != nil {
		return err
	}
	return movedErr
}

// redisWait is how long the group consumer waits for Redis to answer a batch's read or confirm.
// go-redis applies no context's deadline to a call (only with ContextTimeoutEnabled, which no
// URL of seckill sets), and a Redis that takes connections and does not answer (paused by a
// fork, stopped, a network that drops its replies) held each call for its timeouts and retries:
// 40 s a call with the defaults, and the consumer persisted a batch a minute. Redis answers a
// batch's calls in milliseconds.
const redisWait = time.Second

// errRedisSlow is a Redis call that did not answer within redisWait.
var errRedisSlow = errors.New("no answer from redis")

// askRedis makes call, op's call to Redis over n orders, and returns its answer, or
// errRedisSlow once it has waited redisWait, which the group consumer takes as it does a Redis
// that refused the call: it persists without the read, and leaves the confirm to the sweeper.
// The outcome is logged as redisAnswered says. The call left behind ends with the Redis
// client's own timeouts; while it runs, op is not called again, and answers errRedisSlow at
// once, so a Redis that hangs costs one call at a time, not one a batch. A replay, there to put
// a restored store right, waits for Redis's answer.
func askRedis[T any](h *handler, op string, n int, call func() (T, error)) (_ T, err error) {
	defer func() { h.redisAnswered(err, n, op) }()
	if h.replay != nil {
		return call()
	}
	var none T
	if _, busy := h.redisBusy.LoadOrStore(op, true); busy {
		return none, fmt.Errorf("%s: %w: the last call still waits", op, errRedisSlow)
	}
	type answer struct {
		v   T
		err error
	}
	done := make(chan answer, 1)
	go func() {
		v, err := call()
		h.redisBusy.Delete(op) // before the answer: the next call must not find op busy
		done <- answer{v, err}
	}()
	t := time.NewTimer(redisWait)
	defer t.Stop()
	select {
	case a := <-done:
		return a.v, a.err
	case <-t.C:
		return none, fmt.Errorf("%s: %w within %v", op, errRedisSlow, redisWait)
	}
}

// redisFailing is the warning of a Redis that fails the consumer's calls, and what the consumer
// does meanwhile.
const redisFailing = "redis calls failing: persisting orders without checking for those Redis gave back, and leaving their confirmation in Redis to the sweeper"

// redisAnswered logs the outcome of a call to Redis, op, over n orders: a failure as part of an
// outage (h.redisDown), and a success, which may end one. A call over no orders did not reach
// Redis, and one cut short by its context (a shutdown, a lost partition) says nothing of it. A
// malformed record is Redis answering, and a warning of its own.
func (h *handler) redisAnswered(err error, n int, op string) {
	switch {
	case n == 0, errors.Is(err, context.Canceled): // no call, or one this consumer cut short
	case errors.Is(err, lua.ErrMalformed):
		h.redisDown.Answered(h.cfg.Logger, "redis answers again")
		h.cfg.Logger.Warn(op, "orders", n, "err", err)
	case err != nil:
		h.redisDown.Failed(h.cfg.Logger, redisFailing, "call", op, "orders", n, "err", err)
	default:
		h.redisDown.Answered(h.cfg.Logger, "redis answers again")
	}
}

// unconfirmed deals with the orders of a batch (evs), which the store holds confirmed or paid,
// that Redis's confirm left as they were (left: ConfirmAll's answer, the reservation's state by
// order id), and counts them by state.
//
// One Redis holds confirmed already is a redelivery's, or the sweeper's that got there first:
// expected. One Redis has refunded or expired is a restored store's that recordGivenBack could
// not move on before the batch, as Redis did not answer its read then, or a refund or expiry
// that overtook the batch, which the store has already: it is moved on as Redis ended it
// (store.RecordGivenBack). Any other state (released, or no reservation: Redis lost it, or
// trimmed it a day after it ended) is a disagreement this cannot settle, for an operator: one
// warning per state and batch, as a Redis that lost its data answers so for every order in
// flight.
func (h *handler) unconfirmed(work, stop context.Context, evs []events.Event, left map[string]string) error {
	disagree := map[string][]string{} // state -> order ids
	ended := map[string]string{}      // order id -> state, of those Redis refunded or expired
	for id, state := range left {
		state = cmp.Or(state, unknownState)
		leftInRedis.WithLabelValues(state).Inc()
		switch state {
		case lua.StateConfirmed:
			h.cfg.Logger.Debug("confirm: the reservation is confirmed already", "order_id", id)
		case lua.StateRefunded, lua.StateExpired:
			ended[id] = state
		default:
			disagree[state] = append(disagree[state], id)
		}
	}
	for state, ids := range disagree {
		h.cfg.Logger.Warn("confirm: the store holds orders confirmed that Redis does not; see the audit's I2",
			"state", state, "orders", len(ids), "first", ids[0])
	}
	if len(ended) == 0 {
		return nil
	}
	var orders []store.Order
	for _, e := range evs {
		if _, ok := ended[e.OrderID]; ok {
			orders = append(orders, orderOf(e))
		}
	}
	return h.recordEnded(work, stop, endedAs(orders, func(id string) string { return ended[id] }))
}

// produce writes out, the results and dead letters of a batch, retrying while stop is not
// done; each retry sends only the records not written yet, so none is announced twice.
//
// A dead letter Kafka refuses as too large (MESSAGE_TOO_LARGE: a garbled record that fit the
// requested topic, plus the reason headers) would be refused on every try, and its batch
// never committed: it goes again without its value (events.WithoutValue). A result refused
// so is retried like any other failure: it is an event of a few hundred bytes that seckill
// encodes, too large only for a topic whose max.message.bytes is set too low, which an
// operator can raise while the consumer waits; dropping it would lose the announcement of an
// order that is confirmed.
func (h *handler) produce(work, stop context.Context, out []*kgo.Record) error {
	return events.Retry(stop, h.cfg.Logger, "produce results", func() error {
		var failed []*kgo.Record
		var first error
		for _, r := range h.cl.ProduceSync(work, out...) {
			if r.Err == nil {
				continue
			}
			rec := r.Record
			if errors.Is(r.Err, kerr.MessageTooLarge) && rec.Topic == h.cfg.Topics.DLQ && len(rec.Value) > 0 {
				h.cfg.Logger.Warn("dead letter too large for Kafka; sending it without its value", "bytes", len(rec.Value),
					"source_topic", events.Header(rec, events.HeaderSourceTopic), "source_partition", events.Header(rec, events.HeaderSourcePartition),
					"source_offset", events.Header(rec, events.HeaderSourceOffset), "err", r.Err)
				rec = events.WithoutValue(rec)
			}
			failed = append(failed, rec)
			if first == nil {
				first = r.Err
			}
		}
		out = failed
		return first
	})
}
