package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ConsumeLoop polls a group client built with DisableAutoCommit and BlockRebalanceOnPoll, hands
// each batch of at most max records to handle, and commits the batch's offsets after handle
// returns nil: at-least-once, so handle must be idempotent. handle gets two contexts: work, for
// its I/O, which is not canceled with ctx so a batch in hand finishes (the drain; see Drain,
// whose bound is drain), and stop, canceled with ctx, which tells retry loops to give up.
// ConsumeLoop returns nil when ctx is canceled, and handle's error if it fails while ctx is live. It is ConsumePipelined with nothing left
// to finish but the offset commit.
func ConsumeLoop(ctx context.Context, cl *kgo.Client, max int, drain time.Duration, log *slog.Logger,
	handle func(work, stop context.Context, fs kgo.Fetches) error) error {
	return ConsumePipelined(ctx, cl, func() int { return max }, drain, log, func(work, stop context.Context, fs kgo.Fetches) (func() error, error) {
		if err := handle(work, stop, fs); err != nil {
			return nil, err
		}
		return func() error { return nil }, nil
	})
}

// DefaultDrainTimeout is how long a role told to stop goes on with the work in hand before it
// gives up on it. It fits the roles' termination grace (30 s in deploy/) with the Kafka
// client's flush at Close (at most 10 s) after it.
const DefaultDrainTimeout = 15 * time.Second

// ErrDrainTimeout is the cause of a Drain's work context when the work in hand outlasted the
// drain's bound.
var ErrDrainTimeout = errors.New("the work in hand outlasted the drain")

// Drain returns work, the context of the I/O of a role's work in hand, for a role told to stop
// by stop: a stop must let a resolution or a batch that has started finish rather than cut it
// in the middle, so work is not canceled with stop. It is canceled bound (0:
// DefaultDrainTimeout) after stop is done, with ErrDrainTimeout and a WARN to log naming what,
// so that a dependency that hangs cannot hold a stop forever. The caller checks stop before
// taking new work, and calls release when it is done with work; release returns once the
// timer behind work is gone.
func Drain(stop context.Context, bound time.Duration, log *slog.Logger, what string) (work context.Context, release func()) {
	if bound <= 0 {
		bound = DefaultDrainTimeout
	}
	work, cancel := context.WithCancelCause(context.WithoutCancel(stop))
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		select {
		case <-done:
			return
		case <-stop.Done():
		}
		t := time.NewTimer(bound)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			log.Warn("stopping: gave up on the work in hand", "what", what, "drain_timeout", bound)
			cancel(fmt.Errorf("%s: %w", what, ErrDrainTimeout))
		}
	}()
	var once sync.Once
	return work, func() {
		once.Do(func() {
			close(done)
			<-exited
			cancel(nil)
		})
	}
}

// Retry calls fn until it succeeds or stop is done, backing off from 100ms to 5s: the way every
// role waits out a dependency that is down. Its failures are logged as an Outage (a warning at
// the first, at most one every ten seconds after, a note when it succeeds after them): a wait
// through an hour's outage is a few hundred lines, not one every backoff. An error fn marks
// Permanent (a wrong password, a database that does not exist) is returned at once: no wait
// mends it.
func Retry(stop context.Context, log *slog.Logger, what string, fn func() error) error {
	backoff := 100 * time.Millisecond
	var outage Outage
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			outage.Answered(log, what+" succeeded after failing")
			return nil
		}
		var p permanent
		if errors.As(err, &p) {
			return fmt.Errorf("%s: %w", what, p.error)
		}
		outage.Failed(log, what+" failed; retrying", "attempt", attempt, "backoff", backoff, "err", err)
		select {
		case <-stop.Done():
			return fmt.Errorf("%s: %w (gave up: %w)", what, err, context.Cause(stop))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// Permanent marks err as one that no retry mends, for Retry to return at once.
func Permanent(err error) error { return permanent{err} }

type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// ConsumePipelined runs a group consumer (see ConsumeLoop) whose work is done in two stages, the
// second overlapping the next batch: persist makes a batch durable (the store's commit) and
// returns finish, which completes it (confirmations, announcements); finish of batch N runs,
// and then batch N's offsets are committed, while batch N+1 is polled and persisted. Batches are
// finished one at a time in order, and a batch's offsets are committed only after its finish
// returned nil, so every committed offset covers records whose persist and finish both
// succeeded: at-least-once, so both stages must be idempotent. A finish that fails stops the
// loop before another finish starts; the batches persisted meanwhile are redelivered.
//
// A rebalance that takes partitions while a batch is being finished waits for its commit (with a
// client from NewGroupClient), so the new owner starts after the batch.
//
// A record batch no reader can decompress (kgo.ErrDecompressTooLarge: a compression bomb) is
// skipped, and persist gets in its place a record without a value at the batch's last offset,
// which Unreadable tells apart, to handle as poison: committing it moves the group past the
// batch. franz-go skips only a partition it tracks an offset of (one the group has committed,
// or this member has polled records of): the first batch a new group meets is committed past
// and left to the next assignment.
//
// max is asked before each poll for the most records of the next batch (at least 1): a member
// whose pace follows its partitions (the consumer's) batches what its current pace allows.
// When ctx is canceled, the batches in hand are finished and committed within drain (0:
// DefaultDrainTimeout); past it their I/O is canceled, and those not done are redelivered.
func ConsumePipelined(ctx context.Context, cl *kgo.Client, max func() int, drain time.Duration, log *slog.Logger,
	persist func(work, stop context.Context, fs kgo.Fetches) (finish func() error, err error)) error {
	defer cl.AllowRebalance()
	work, release := Drain(ctx, drain, log, "the batch in hand")
	defer release()
	// The watch ends with the loop, which may end while ctx is live (a closed client).
	watchCtx, stopWatching := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); watchTopics(watchCtx, cl, log) }()
	defer func() { stopWatching(); <-watched }()
	h, _ := cl.Context().Value(handoffKey{}).(*handoff)
	if h == nil {
		h = &handoff{} // not a client of NewGroupClient: no rebalance waits on it
	}
	var inflight chan error // the batch being finished; nil when none
	settle := func() error {
		if inflight == nil {
			return nil
		}
		err := <-inflight
		inflight = nil
		h.finish(nil, nil)
		return err
	}
	stopped := func(err error) error {
		if err != nil && ctx.Err() == nil {
			return err
		}
		return nil // stopped while a dependency was down: the batch is redelivered
	}
	warned := map[string]time.Time{} // fetch error -> when it was last logged
	for {
		fetches := cl.PollRecords(ctx, max())
		if ctx.Err() != nil && fetches.NumRecords() == 0 {
			return stopped(settle())
		}
		var (
			fatal      error
			unreadable []*kgo.Record
		)
		fetches.EachError(func(topic string, p int32, err error) {
			var big *kgo.ErrDecompressTooLarge
			switch {
			case errors.As(err, &big):
				// franz-go stops fetching the partition until it is moved past the batch: a
				// compression bomb a foreign producer wrote stalled it for good, and only the
				// poll heard of it, once a minute. It is poison, handed to persist as one.
				unreadable = append(unreadable, unreadableBatch(big))
			case errors.Is(err, kgo.ErrClientClosed):
				fatal = cmp.Or(fatal, err)
			case errors.Is(err, kerr.InvalidSessionTimeout):
				// The group's session timeout is outside the brokers' group.min/max.session.timeout.ms:
				// every join is refused the same way, and no wait mends a setting.
				fatal = cmp.Or(fatal, err)
			case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded): // the stop
			default:
				// franz-go goes on by itself (past data loss, a lost session, an ACL that
				// refuses the topic until mended), and only the poll hears of it: at every
				// fetch, so each error is logged once a minute.
				if k := fmt.Sprint(topic, p, err); time.Since(warned[k]) >= time.Minute {
					warned[k] = time.Now()
					log.Warn("fetch failed", "topic", topic, "partition", p, "err", err)
				}
			}
		})
		if fatal != nil {
			settle()
			return fatal
		}
		if len(unreadable) > 0 {
			fetches = withUnreadable(cl, fetches, unreadable, log)
		}
		var finish func() error
		if fetches.NumRecords() > 0 {
			f, err := persist(work, ctx, fetches)
			if err != nil {
				settle() // the batch in flight commits its own offsets if it succeeds
				return stopped(err)
			}
			finish = f
		}
		if err := settle(); err != nil {
			return stopped(err)
		}
		if finish != nil {
			done, committed := make(chan error, 1), make(chan struct{})
			recs := fetches.Records()
			h.finish(committed, log) // before AllowRebalance lets a rebalance in
			go func() {
				defer close(committed)
				err := finish()
				if err == nil {
					if cerr := cl.CommitRecords(work, recs...); cerr != nil {
						// Not fatal: the batch is durable, and redelivering it changes nothing.
						log.Warn("offset commit failed; the batch will be redelivered", "err", cerr)
					}
				}
				done <- err
			}()
			inflight = done
		}
		cl.AllowRebalance()
	}
}

// missingEvery spaces the warnings of a consumer whose topic is not there.
const missingEvery = 30 * time.Second

// watchTopics logs the topics cl consumes that Kafka does not have, until each is there or ctx
// is done. franz-go waits for a missing topic without a word (UNKNOWN_TOPIC_OR_PARTITION is one
// of the errors it retries and strips), so a consumer started before any api, which creates the
// topics, logged "consuming" and then nothing. It reads what the client learned from its own
// metadata refreshes (PartitionLeader), so it asks Kafka nothing more, and a topic it finds is
// one the client is about to consume.
func watchTopics(ctx context.Context, cl *kgo.Client, log *slog.Logger) {
	warned := map[string]time.Time{} // missing topic -> when it was last logged
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		topics := cl.GetConsumeTopics()
		found := 0
		for _, topic := range topics {
			leader, _, err := cl.PartitionLeader(topic, 0)
			switch {
			case leader >= 0:
				found++
				if _, ok := warned[topic]; ok {
					delete(warned, topic)
					log.Info("topic found; consuming it", "topic", topic)
				}
			case errors.Is(err, kerr.UnknownTopicOrPartition) && time.Since(warned[topic]) >= missingEvery:
				warned[topic] = time.Now()
				log.Warn("topic missing; waiting for it: seckill api creates the topics at its start (or check --topic-prefix and --kafka-brokers)",
					"topic", topic, "next_warning_in", missingEvery)
			}
		}
		if len(topics) > 0 && found == len(topics) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// headerUnreadable marks the record ConsumePipelined hands on in place of a batch no reader can
// decompress (Unreadable).
const headerUnreadable = "seckill-unreadable"

// unreadableBatch is the record that stands for the batch big: no value, at the batch's last
// offset, so that committing it moves the group past the batch, and a header saying why.
func unreadableBatch(big *kgo.ErrDecompressTooLarge) *kgo.Record {
	reason := fmt.Sprintf("the record batch at offsets %d to %d decompresses to more than %d bytes (kgo.MaxDecompressBatchBytes): no reader can take it",
		big.Offset, big.NextOffset-1, maxDecompress)
	return &kgo.Record{Topic: big.Topic, Partition: big.Partition, Offset: big.NextOffset - 1, LeaderEpoch: big.Epoch,
		Headers: []kgo.RecordHeader{{Key: headerUnreadable, Value: []byte(reason)}}}
}

// maxDecompress is franz-go's default kgo.MaxDecompressBatchBytes, which no client here changes.
const maxDecompress = 1 << 30

// withUnreadable moves cl past the batches recs stand for and returns fetches with recs added,
// each as the last record of its partition (the fetch stopped at its batch).
func withUnreadable(cl *kgo.Client, fetches kgo.Fetches, recs []*kgo.Record, log *slog.Logger) kgo.Fetches {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	extra := kgo.Fetch{}
	for _, r := range recs {
		log.Warn("skipping a record batch no reader can decompress; handing it on as poison",
			"topic", r.Topic, "partition", r.Partition, "next_offset", r.Offset+1, "reason", Header(r, headerUnreadable))
		if offsets[r.Topic] == nil {
			offsets[r.Topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
		extra.Topics = append(extra.Topics, kgo.FetchTopic{Topic: r.Topic, Partitions: []kgo.FetchPartition{
			{Partition: r.Partition, HighWatermark: r.Offset + 1, Records: []*kgo.Record{r}}}})
	}
	cl.SetOffsets(offsets)
	return append(fetches, extra)
}

// Unreadable returns why rec stands for a record batch that no reader can decompress, which
// ConsumePipelined hands to persist in its place: a poison event, with no value. ok is false
// for any other record.
func Unreadable(rec *kgo.Record) (reason string, ok bool) {
	if rec.Value != nil {
		return "", false
	}
	for _, h := range rec.Headers {
		if h.Key == headerUnreadable {
			return string(h.Value), true
		}
	}
	return "", false
}
