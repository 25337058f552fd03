package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// NewClient returns a Kafka client with seckill's producer guarantees, plus opts: every record
// is acknowledged by all in-sync replicas, and the producer is idempotent (franz-go's default),
// so a retried produce never writes an event twice. Records do not linger and are not
// compressed (opts may say otherwise).
func NewClient(brokers []string, opts ...kgo.Opt) (*kgo.Client, error) {
	base := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Every produce here has someone waiting on it: a buyer, or a batch's offset commit.
		// franz-go's 10ms linger was on every one of them; records still batch while the
		// request before them is in flight (one per broker: the producer is idempotent).
		// Measured on the test broker, 256 goroutines producing synchronously: linger 10ms
		// 58k/s p99 60ms, 2ms 180k/s p99 12ms, 0 174k/s p99 6.7ms. The api's purchases linger
		// 1ms (its --produce-linger): with the whole pipeline on the machine that was cheaper.
		kgo.ProducerLinger(0),
		// Not franz-go's default snappy: a buyer's batch is a few records of a few hundred bytes,
		// which compression does not shrink, while the broker has to decompress every batch to
		// validate it. Side by side in the bench's all-accept, two rounds: 13,613 and 17,678
		// req/s without, 12,568 and 15,647 with snappy; broker CPU 23 and 17 µs a purchase
		// without, 27 and 20 with.
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client for %v: %w", brokers, err)
	}
	return cl, nil
}

// WarnUnreachable is a client option that logs a broker the client cannot connect to, at most
// once every ten seconds. franz-go retries on its own and tells nobody: without this, a
// consumer whose brokers are all down only looks idle.
func WarnUnreachable(log *slog.Logger) kgo.Opt { return kgo.WithHooks(&dialWarner{log: log}) }

type dialWarner struct {
	log    *slog.Logger
	outage Outage // never answered: a broker connected says nothing of the others
}

func (w *dialWarner) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	// A dial cut short by its caller (a role stopping, its client closed) says nothing of the broker.
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
		return
	}
	w.outage.Failed(w.log, "cannot reach a Kafka broker; retrying", "broker", net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port))), "err", err)
}

// DefaultSessionTimeout is the group session of a member that dies: its partitions wait that
// long for it before the group hands them on. A crashed member holds its partitions until then:
// franz-go's 45 s default stopped confirmations for 45 s after every kill -9 in the fault tests.
// 6 s is the shortest that a broker's default group.min.session.timeout.ms accepts; a broker
// configured lower lets the consumer ask for less (seckill consumer --session-timeout).
const DefaultSessionTimeout = 6 * time.Second

// SessionRefused names the setting behind err when it is the brokers' refusal of a group's
// session timeout (outside their group.min/max.session.timeout.ms), which ConsumePipelined
// returns at once: every join is refused the same way, and the operator must change
// --session-timeout. Any other err is returned as it is.
func SessionRefused(err error, session time.Duration) error {
	if !errors.Is(err, kerr.InvalidSessionTimeout) {
		return err
	}
	return fmt.Errorf("session timeout %v (--session-timeout): the brokers' group.min.session.timeout.ms and group.max.session.timeout.ms refuse it: %w",
		cmp.Or(session, DefaultSessionTimeout), err)
}

// ConsumerMetadataMaxAge is how often a client that follows a topic as it is written (a group
// client of NewGroupClient, the api's reader of the results) asks Kafka for the topic's
// partitions (kgo.MetadataMaxAge), and so the longest a partition added while it runs waits to
// be consumed (plus a rebalance, in a group). franz-go's default is 5 minutes; a metadata
// request every 10 s per client costs Kafka nothing worth counting.
const ConsumerMetadataMaxAge = 10 * time.Second

// NewGroupClient returns a client consuming topic in group the way every role here does:
// offsets committed by hand after the work is durable (ConsumeLoop), no rebalance while a batch
// is in hand, partitions handed on only once the batch being finished is committed, and a new
// group starting at the beginning, since events produced before its first member ran are orders
// too. session is the group session (0: DefaultSessionTimeout); gone, if not nil, is told of the
// partitions the member gives up or loses; opts come last.
func NewGroupClient(brokers []string, group, topic string, session time.Duration,
	gone func(map[string][]int32), opts ...kgo.Opt) (*kgo.Client, error) {
	if session <= 0 {
		session = DefaultSessionTimeout
	}
	h := &handoff{}
	leave := func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
		h.wait(ps)
		if gone != nil {
			gone(ps)
		}
	}
	base := []kgo.Opt{
		// ConsumePipelined finds the handoff of its client here.
		kgo.WithContext(context.WithValue(context.Background(), handoffKey{}, h)),
		kgo.OnPartitionsRevoked(leave),
		kgo.OnPartitionsLost(leave),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		// A rebalance waits until the batch in hand is committed, so a batch is rarely handled
		// twice; when it is (a crash), the handlers' idempotence makes the second time a no-op.
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(session),
		// A member learns of a rebalance from a heartbeat's answer: the survivors of a death
		// rejoin within one interval of the session's end.
		kgo.HeartbeatInterval(session / 8),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(250 * time.Millisecond),
		// The group learns of partitions added to its topic from a metadata refresh, which
		// nothing else triggers: at franz-go's 5 minutes, purchases an api placed on a new
		// partition waited up to that long, past a reservation's 2, and the sweeper failed
		// orders answered 202.
		kgo.MetadataMaxAge(ConsumerMetadataMaxAge),
	}
	return NewClient(brokers, append(base, opts...)...)
}

// handoff holds the partitions a rebalance takes from a member until the batch the member is
// finishing (ConsumePipelined) is committed. Committed after they went, the batch's offsets
// could land after the new owner's later ones and move the partition back: its records done
// again, and the group's lag above zero until the partition's next record.
type handoff struct {
	mu        sync.Mutex
	finishing <-chan struct{} // closed once the batch being finished is committed; nil when none
	log       *slog.Logger
}

type handoffKey struct{}

// finish records the batch being finished, or none (nil).
func (h *handoff) finish(done <-chan struct{}, log *slog.Logger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.finishing, h.log = done, log
}

// wait returns once no batch is being finished.
func (h *handoff) wait(gone map[string][]int32) {
	h.mu.Lock()
	done, log := h.finishing, h.log
	h.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	default:
		log.Info("a rebalance waits for the batch in hand to be committed", "partitions", gone)
		<-done
	}
}

// Record returns the Kafka record of e on topic, keyed by Key.
func Record(topic string, e Event) (*kgo.Record, error) {
	b, err := Encode(e)
	if err != nil {
		return nil, fmt.Errorf("encode %s %s: %w", e.Type, e.OrderID, err)
	}
	return &kgo.Record{Topic: topic, Key: Key(e), Value: b}, nil
}

// DeadLetter returns the DLQ record of src, which failed for reason; the headers say why and
// where it came from, and the value is src's, byte for byte (if Kafka refuses the letter as
// too large, WithoutValue is the one to send).
func DeadLetter(dlq string, src *kgo.Record, reason string) *kgo.Record {
	return &kgo.Record{
		Topic: dlq,
		Key:   src.Key,
		Value: src.Value,
		Headers: []kgo.RecordHeader{
			{Key: HeaderReason, Value: []byte(clip(reason, maxReason))},
			{Key: HeaderSourceTopic, Value: []byte(src.Topic)},
			{Key: HeaderSourcePartition, Value: []byte(strconv.Itoa(int(src.Partition)))},
			{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(src.Offset, 10))},
		},
	}
}

// WithoutValue returns the dead letter letter without its value, and with HeaderValueOmitted
// saying how many bytes were left out; letter is not changed. It is for a dead letter Kafka
// refused as too large (MESSAGE_TOO_LARGE): a record that fits the source topic's
// max.message.bytes (1,048,588 by default) is too large once the reason headers are added, for
// franz-go's 1,000,012-byte batch (kgo.ProducerBatchMaxBytes) or a DLQ topic with a lower
// max.message.bytes, and would be refused on every try. The source headers say where the
// original is.
func WithoutValue(letter *kgo.Record) *kgo.Record {
	key := letter.Key
	if len(key) > maxReason { // a garbled key may be as large as the value
		key = nil
	}
	return &kgo.Record{
		Topic: letter.Topic,
		Key:   key,
		Headers: append(slices.Clip(letter.Headers),
			kgo.RecordHeader{Key: HeaderValueOmitted, Value: []byte(strconv.Itoa(len(letter.Value)))}),
	}
}

// maxReason bounds a dead letter's reason (and the key WithoutValue keeps): a reason quotes
// the event's ids, which a garbled record may make as large as itself, four times over once
// quoted, and the letter must fit without its value.
const maxReason = 1024

// clip returns s cut to at most n bytes, marked with "…" when cut; a character the cut split is
// dropped.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-len("…")], "") + "…"
}

// ValueOmitted returns how many bytes of its source's value the dead letter r goes without
// (see WithoutValue): 0 when it carries the value whole.
func ValueOmitted(r *kgo.Record) int {
	n, _ := strconv.Atoi(Header(r, HeaderValueOmitted))
	return n
}

// Acked hands rec to produce (a client's Produce, or TryProduce, which refuses at once when
// the client's buffer is full) and waits until Kafka has it, at most within. Not ProduceSync:
// a record already sent can outlive its context inside the client, and the caller (a buyer, a
// payment service) must never wait on a broker that does not answer.
func Acked(ctx context.Context, produce func(context.Context, *kgo.Record, func(*kgo.Record, error)), rec *kgo.Record, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	done := make(chan error, 1)
	produce(ctx, rec, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no acknowledgement within %v: %w", within, context.Cause(ctx))
	}
}

// Header returns the value of the record header key, or "".
func Header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Lag returns how many records of topic the group has not committed yet, summed over
// partitions; a partition the group never committed counts from its log start.
func Lag(ctx context.Context, adm *kadm.Client, topic, group string) (int64, error) {
	ends, err := EndOffsets(ctx, adm, topic)
	if err != nil {
		return 0, fmt.Errorf("lag of %s on %s: %w", group, topic, err)
	}
	return LagBehind(ctx, adm, ends, group)
}

// EndOffsets returns the end offsets of topic's partitions: where its next records will go.
func EndOffsets(ctx context.Context, adm *kadm.Client, topic string) (kadm.ListedOffsets, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	return ends, nil
}

// StartOffsets returns the start offsets of topic's partitions: where their oldest records
// still kept are. Records before them are gone (retention, or kafka-delete-records), so a
// partition whose start is its end holds nothing to read, whatever its end offset.
func StartOffsets(ctx context.Context, adm *kadm.Client, topic string) (kadm.ListedOffsets, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("start offsets of %s: %w", topic, err)
	}
	return starts, nil
}

// startOf returns where end's partition starts in starts, or 0 if starts does not hold it.
func startOf(starts kadm.ListedOffsets, end kadm.ListedOffset) int64 {
	if s, ok := starts.Lookup(end.Topic, end.Partition); ok {
		return s.Offset
	}
	return 0
}

// LagBehind returns how many records before ends group has yet to commit: what it must still
// do to have done everything produced before ends were read, however busy the topic is since.
func LagBehind(ctx context.Context, adm *kadm.Client, ends kadm.ListedOffsets, group string) (int64, error) {
	var topic string
	ends.Each(func(o kadm.ListedOffset) { topic = o.Topic })
	starts, err := StartOffsets(ctx, adm, topic)
	if err != nil {
		return 0, fmt.Errorf("lag of %s on %s: %w", group, topic, err)
	}
	committed, err := CommittedOffsets(ctx, adm, group)
	if err != nil {
		return 0, fmt.Errorf("lag of %s on %s: %w", group, topic, err)
	}
	var lag int64
	ends.Each(func(end kadm.ListedOffset) {
		at := startOf(starts, end)
		if c, ok := committed.Lookup(end.Topic, end.Partition); ok && c.Err == nil && c.At >= at {
			at = c.At
		}
		lag += max(0, end.Offset-at)
	})
	return lag, nil
}

// CommittedOffsets returns the offsets group has committed: none for a group that never did.
func CommittedOffsets(ctx context.Context, adm *kadm.Client, group string) (kadm.OffsetResponses, error) {
	committed, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		err = nil // a group that never committed (kfake says so; Kafka answers with no offsets)
	}
	if err != nil {
		return nil, fmt.Errorf("committed offsets of %s: %w", group, err)
	}
	return committed, nil
}

// Ends is, per partition, the end offset a reader of a range of a topic's records has still to
// reach. A partition is done, and leaves Ends, once the reader's position reaches its end:
// it read the record before the end, or one past it (the end's own records compacted or
// deleted), or Kafka deleted the rest of the range, which no record tells (DropDeleted).
type Ends map[int32]int64

// Take reports whether rec is in the range, and ends rec's partition once the position reaches
// its end. A record past the end was written after the range was taken.
func (e Ends) Take(rec *kgo.Record) bool {
	end, ok := e[rec.Partition]
	if !ok {
		return false
	}
	if rec.Offset+1 >= end {
		delete(e, rec.Partition)
	}
	return rec.Offset < end
}

// DropDeleted ends the partitions whose log start has reached their end offset: retention or
// kafka-delete-records deleted the rest of their range, and no record of it will ever come.
// A reader waiting for one waited for ever; it must call this while it waits (every second).
// Records of these partitions the client fetched and Take has not seen yet are dropped with
// them (Take refuses them): Kafka deleted them too.
func (e Ends) DropDeleted(ctx context.Context, adm *kadm.Client, topic string) error {
	starts, err := StartOffsets(ctx, adm, topic)
	if err != nil {
		return err
	}
	starts.Each(func(o kadm.ListedOffset) {
		if end, ok := e[o.Partition]; ok && o.Offset >= end {
			delete(e, o.Partition)
		}
	})
	return nil
}

// LetGo stops cl fetching the partitions of topic in fetching that are done (not in e), and
// returns the others. A reader of a busy topic would otherwise fetch what is written to its
// done partitions since, only for Take to discard it, at every fetch until the last one is done.
//
// They are paused (PauseFetchPartitions), which works for any client not in a group. Removing
// them (RemoveConsumePartitions) does not work for a client of ConsumeTopics: franz-go (v1.22)
// then drops the topic from those the client adds partitions of, so a partition removed before
// the client's first assignment left it consuming none. A removal also drops the records
// buffered for every partition, to be fetched again. What the client buffered for a paused
// partition it drops at the next poll: past the partition's end.
func (e Ends) LetGo(cl *kgo.Client, topic string, fetching []int32) []int32 {
	var done []int32
	fetching = slices.DeleteFunc(fetching, func(p int32) bool {
		_, reading := e[p]
		if !reading {
			done = append(done, p)
		}
		return !reading
	})
	if len(done) > 0 {
		cl.PauseFetchPartitions(map[string][]int32{topic: done})
	}
	return fetching
}

// ReadTopic returns every record of topic, from the start of each partition to its end as it
// was when ReadTopic began, in partition and offset order. A partition whose records were all
// deleted (its start is its end), or are deleted while it reads, is not waited for.
func ReadTopic(ctx context.Context, brokers []string, topic string) ([]*kgo.Record, error) {
	return readTopic(ctx, brokers, topic, func() {})
}

// readTopic is ReadTopic, calling tookOffsets once it has the topic's start and end offsets,
// before it reads: a test's hook to change the topic at that point, as retention may. opts
// are the client's, for a test's hooks.
func readTopic(ctx context.Context, brokers []string, topic string, tookOffsets func(), opts ...kgo.Opt) ([]*kgo.Record, error) {
	cl, err := NewClient(brokers, opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := EndOffsets(ctx, adm, topic)
	if err != nil {
		return nil, err
	}
	starts, err := StartOffsets(ctx, adm, topic)
	if err != nil {
		return nil, err
	}
	want := Ends{}
	offsets := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if start := startOf(starts, o); o.Offset > start {
			want[o.Partition] = o.Offset
			offsets[o.Partition] = kgo.NewOffset().At(start)
		}
	})
	tookOffsets()
	if len(want) == 0 {
		return nil, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets})
	fetching := slices.Collect(maps.Keys(offsets))
	var recs []*kgo.Record
	last := time.Now()
	for len(want) > 0 {
		// Bounded: a partition whose rest of the range Kafka deleted has no record to give, and
		// only its log start tells it is done.
		poll, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(poll)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", topic, err)
		}
		for _, e := range fs.Errors() {
			var lost *kgo.ErrDataLoss
			switch {
			case errors.Is(e.Err, context.DeadlineExceeded): // the poll's bound
			case errors.As(e.Err, &lost):
				// Informational: the log was truncated (an unclean leader election), and
				// franz-go resumes the partition at ResetTo by itself. What was read from there
				// comes again, as the log has it now.
				slog.Warn("read: the broker lost records, reading them again", "topic", topic, "partition", e.Partition, "err", e.Err)
				if _, reading := want[e.Partition]; reading {
					recs = slices.DeleteFunc(recs, func(r *kgo.Record) bool {
						return r.Partition == e.Partition && r.Offset >= lost.ResetTo
					})
				}
			default:
				return nil, fmt.Errorf("read %s partition %d: %w", topic, e.Partition, e.Err)
			}
		}
		fs.EachRecord(func(r *kgo.Record) {
			if want.Take(r) {
				recs = append(recs, r)
			}
		})
		// Every second, not only when idle: the done partitions' new records may keep coming.
		if time.Since(last) >= time.Second {
			last = time.Now()
			if err := want.DropDeleted(ctx, adm, topic); err != nil {
				return nil, fmt.Errorf("read %s: %w", topic, err)
			}
		}
		fetching = want.LetGo(cl, topic, fetching)
	}
	slices.SortFunc(recs, func(a, b *kgo.Record) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	return recs, nil
}

// FlushAndClose delivers what the producer still holds (order announcements are handed to it
// without waiting), for at most 10 seconds, then closes it.
func FlushAndClose(cl *kgo.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl.Flush(ctx)
	cl.Close()
}
