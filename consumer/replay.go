package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// From is where a replay starts: a time, or the same offset in every partition.
type From struct {
	Time   time.Time
	Offset int64
}

// ParseFrom parses an RFC 3339 time, a non-negative offset, or "start".
func ParseFrom(s string) (From, error) {
	if s == "start" {
		return From{}, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
		return From{Offset: n}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return From{}, fmt.Errorf("--from %q: want an RFC 3339 time (2026-11-21T20:00:00Z), an offset (0, 1500) or start", s)
	}
	return From{Time: t}, nil
}

func (f From) offset() kgo.Offset {
	if !f.Time.IsZero() {
		return kgo.NewOffset().AfterMilli(f.Time.UnixMilli())
	}
	return kgo.NewOffset().At(f.Offset)
}

// ReplayStats counts what a replay did.
type ReplayStats struct {
	Events int64 // events read
	Total  int64 // events between the start and the end offsets when the replay began
	// Deleted counts the events of that range that Kafka deleted (retention, kafka-delete-records)
	// before the replay could read them: they are not replayed.
	Deleted int64
	// Poison counts the events the replay could not read as an order, and Refused the orders
	// the store refused (sold out, over the buyer's limit, campaign gone). The replay dead-letters
	// neither: the consumer did when it read them first, and the compensator resolved them. An
	// order the consumer stored that the store now refuses (a backup from before its campaign
	// was created lacks the campaign's row) is confirmed in Redis: dead-lettered, the
	// compensator would store it failed and announce OrderFailed to a buyer told confirmed,
	// while the release, of pending reservations only, left its unit sold. Left out, a replay
	// after the operator puts the row back confirms it.
	Poison, Refused int64
	// GivenBack counts the orders missing from the store whose reservation Redis had given back
	// (released, refunded, expired), which the replay stored failed, refunded or expired.
	GivenBack int64
	// CaughtUp counts the orders the store held confirmed or paid whose reservation Redis had
	// refunded or expired, which the replay refunded or expired in the store: before it read
	// the topic (catchUp), and in its batches (recordGivenBack, then the confirm step).
	CaughtUp int64
	// Paid counts the payments on the results topic that the store did not have, which the
	// replay recorded (recordPaid).
	Paid int64
}

// ReplayStore is the part of the store a replay reads and writes.
type ReplayStore interface {
	Persister
	Campaigns(ctx context.Context) ([]store.Campaign, error)
	Confirmed(ctx context.Context, campaign string) ([]store.Order, error)
	PayOrder(ctx context.Context, orderID, paymentID string, now time.Time) (store.Order, bool, error)
	MarkPaidAnnounced(ctx context.Context, orderID string) error
	NameRefundedPayment(ctx context.Context, orderID, paymentID string) (bool, error)
}

var _ ReplayStore = (*store.Store)(nil)

// Replay re-consumes the requested topic from from up to its end as of the call, outside any
// consumer group, into the same persister as the consumer: orders already stored change
// nothing, missing ones come back, as Redis last knew them (recordGivenBack). Before that, the
// orders the store holds confirmed or paid that Redis has refunded or expired since are moved
// on (catchUp); after it, the payments on the results topic from the same time are recorded
// (recordPaid). It writes a progress line to progress every second. It writes no dead letter:
// the consumer wrote them when it read the range first (ReplayStats.Poison, Refused).
func Replay(ctx context.Context, cfg Config, from From, st ReplayStore, r Confirmer, progress io.Writer) (ReplayStats, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return ReplayStats{}, err
	}
	// Both ranges are read before anything is written: a topic that is not there (a mistyped
	// --topic-prefix, the wrong cluster) fails the replay with the store as it was.
	requested, err := openRange(ctx, cfg, cfg.Topics.Requested, from, progress)
	if err != nil {
		return ReplayStats{}, err
	}
	defer requested.cl.Close()
	// An offset names no place in the results topic: its payments are read from its start.
	results, err := openRange(ctx, cfg, cfg.Topics.Results, From{Time: from.Time}, progress)
	if err != nil {
		return ReplayStats{}, err
	}
	defer results.cl.Close()

	stats := ReplayStats{Total: requested.total}
	caughtUp, err := catchUp(ctx, cfg, st, r, progress)
	stats.CaughtUp = int64(caughtUp)
	if err != nil {
		return stats, fmt.Errorf("replay: %d orders caught up, then: %w", caughtUp, err)
	}
	fmt.Fprintf(progress, "replay: %d orders the store held confirmed or paid were refunded or expired in Redis since, and are so in the store now\n", caughtUp)
	h := &handler{cfg: cfg, store: st, redis: r, cl: requested.cl, replay: &stats} // results go out through it
	// A stop (^C) lets the batch in hand finish, as the consumer's does: orders it stored would
	// otherwise go unconfirmed in Redis and unannounced until a replay from as far back.
	work, release := events.Drain(ctx, cfg.DrainTimeout, cfg.Logger, "the replay's batch in hand")
	defer release()
	// The orders are persisted at MaxRate, as the consumer's are: a replay during a sale shares
	// the database with it. It is alone, so the whole of it: a pace owning no partition keeps
	// its first. The payments, one store write each and few, are not paced.
	stats.Events, err = requested.read(ctx, cfg, newPace(cfg), progress,
		func() string {
			return fmt.Sprintf(", %d given back in Redis, %d caught up, %d poison, %d refused by the store", stats.GivenBack, stats.CaughtUp, stats.Poison, stats.Refused)
		},
		func(batch []*kgo.Record) error { return h.handle(work, ctx, batch) })
	if err != nil {
		return stats, err
	}
	stats.Deleted = stats.Total - stats.Events
	unpaced := cfg
	unpaced.MaxRate = 0
	_, err = results.read(ctx, cfg, newPace(unpaced), progress,
		func() string { return fmt.Sprintf(", %d payments recorded", stats.Paid) },
		func(batch []*kgo.Record) error {
			n, err := recordPaid(ctx, cfg.Logger, st, batch)
			stats.Paid += int64(n)
			return err
		})
	if err != nil {
		return stats, err
	}
	fmt.Fprintf(progress, "replay: done, %d events (%d deleted by Kafka before they could be read); %d orders missing from the store were given back in Redis and are stored failed, refunded or expired; %d stored confirmed or paid were refunded or expired; %d payments recorded; %d poison events and %d orders the store refused, not dead-lettered (each refusal is logged)\n",
		stats.Events, stats.Deleted, stats.GivenBack, stats.CaughtUp, stats.Paid, stats.Poison, stats.Refused)
	return stats, nil
}

// topicRange is a topic's records from a start up to its end as of openRange, read outside any
// consumer group by its own client, which the reader may also produce with.
type topicRange struct {
	cl        *kgo.Client
	topic     string
	remaining events.Ends
	fetching  []int32         // the partitions the client fetches (events.Ends.LetGo)
	next      map[int32]int64 // partition -> offset after the last record read: counted once
	total     int64
}

// openRange finds where topic's records from from begin and end, and prints how many there are.
// opts are added to the client's, for a test's hooks.
func openRange(ctx context.Context, cfg Config, topic string, from From, progress io.Writer, opts ...kgo.Opt) (*topicRange, error) {
	cl, err := events.NewClient(cfg.Brokers, append([]kgo.Opt{
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(from.offset()),
		kgo.FetchMaxWait(250 * time.Millisecond),
	}, opts...)...)
	if err != nil {
		return nil, err
	}
	adm := kadm.NewClient(cl)
	// EndOffsets fails on a partition's error too, a topic that is not there among them: read
	// past, a mistyped --topic-prefix replayed "0 events" and succeeded.
	ends, err := events.EndOffsets(ctx, adm, topic)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("replay: %w", err)
	}
	starts, err := startOffsets(ctx, adm, topic, from)
	if err != nil {
		cl.Close()
		return nil, err
	}
	tr := &topicRange{cl: cl, topic: topic, remaining: events.Ends{}, next: map[int32]int64{}}
	var last int64 // the highest end offset of the topic's partitions
	ends.Each(func(o kadm.ListedOffset) {
		last = max(last, o.Offset)
		tr.fetching = append(tr.fetching, o.Partition)
		start := starts[o.Partition]
		if o.Offset > start {
			tr.remaining[o.Partition] = o.Offset
			tr.total += o.Offset - start
		}
	})
	if from.Time.IsZero() && from.Offset > last {
		// No event was ever there (a typo, another cluster's offset): replayed, it read
		// nothing and succeeded, after catching the store up and recording payments.
		cl.Close()
		return nil, events.Errorf(events.Invalid, "--from %d: past the end of every partition of %s, which ends at offset %d at most: nothing was replayed", from.Offset, topic, last)
	}
	fmt.Fprintf(progress, "replay: %d events in %s from %s\n", tr.total, topic, describe(from))
	return tr, nil
}

// read hands each batch of the range to fn, at pace, writing a progress line, ended by what status
// says, to progress every second, and returns how many records it read.
//
// A partition is done once the replay's position in it reaches the end offset: it read the
// record before the end, or one past it (the end's own records compacted or deleted), or Kafka
// deleted the rest of the range (retention, kafka-delete-records moved the log start to the end
// or past it), which no record tells: the log start is listed every second. The events of the
// range it could not read are printed.
func (tr *topicRange) read(ctx context.Context, cfg Config, pace *pace, progress io.Writer, status func() string, fn func(batch []*kgo.Record) error) (read int64, err error) {
	adm := kadm.NewClient(tr.cl)
	last := time.Now()
	for len(tr.remaining) > 0 {
		// The client consumes the whole topic: during a sale, the partitions done, and those
		// whose range was empty from the start, would be fetched, thousands of records a
		// second to discard, until the last one is done, beside the live consumer.
		tr.fetching = tr.remaining.LetGo(tr.cl, tr.topic, tr.fetching)
		// Bounded: PollRecords waits for a record, and a partition whose rest of the range Kafka
		// deleted has none to give; the replay hung there.
		poll, cancel := context.WithTimeout(ctx, time.Second)
		fetches := tr.cl.PollRecords(poll, pace.batchSize())
		cancel()
		if err := ctx.Err(); err != nil {
			return read, fmt.Errorf("replay of %s stopped after %d of %d events: %w", tr.topic, read, tr.total, err)
		}
		var fatal error
		fetches.EachError(func(_ string, p int32, err error) {
			var lost *kgo.ErrDataLoss
			switch {
			case errors.As(err, &lost):
				// Informational: the log was truncated (an unclean leader election), and franz-go
				// resumes the partition at ResetTo by itself. The events from there are replayed
				// again, which the persister makes harmless, and not counted again: the events
				// Kafka deleted are those of the range the replay did not read.
				cfg.Logger.Warn("replay: the broker lost events, replaying them again", "topic", tr.topic, "partition", p, "err", err)
			case fatal == nil && !kgo.IsRetryableBrokerErr(err) && !errors.Is(err, context.DeadlineExceeded):
				fatal = err
			}
		})
		if fatal != nil {
			return read, fmt.Errorf("replay: fetch %s: %w", tr.topic, fatal)
		}
		var (
			batch []*kgo.Record
			fresh int64 // not read before a data loss's rewind
		)
		for _, rec := range fetches.Records() {
			// A record past the end was written after the replay began: the live consumer has it.
			if !tr.remaining.Take(rec) {
				continue
			}
			batch = append(batch, rec)
			if rec.Offset >= tr.next[rec.Partition] {
				tr.next[rec.Partition] = rec.Offset + 1
				fresh++
			}
		}
		if len(batch) > 0 {
			if err := pace.wait(ctx, len(batch)); err != nil {
				return read, fmt.Errorf("replay of %s stopped after %d of %d events: %w", tr.topic, read, tr.total, err)
			}
			if err := fn(batch); err != nil {
				return read, fmt.Errorf("replay of %s after %d of %d events: %w", tr.topic, read, tr.total, err)
			}
			read += fresh
		}
		if time.Since(last) >= time.Second {
			last = time.Now()
			if err := tr.dropDeleted(ctx, adm, cfg.Logger); err != nil {
				return read, fmt.Errorf("replay of %s stopped after %d of %d events: %w", tr.topic, read, tr.total, err)
			}
			fmt.Fprintf(progress, "replay: %d/%d events of %s (%d%%)%s\n", read, tr.total, tr.topic, percent(read, tr.total), status())
		}
	}
	if gone := tr.total - read; gone > 0 {
		fmt.Fprintf(progress, "replay: %d events of %s were deleted by Kafka (retention, kafka-delete-records) before the replay could read them: not replayed\n", gone, tr.topic)
		cfg.Logger.Warn("replay: events deleted by Kafka before the replay could read them", "topic", tr.topic, "events", gone)
	}
	return read, nil
}

// dropDeleted ends the partitions whose log start has reached their end offset: Kafka deleted
// the rest of their range (events.Ends.DropDeleted). A failed listing is tried again the next
// second: bounded, as the progress line waits for it. A topic Kafka no longer has is an error:
// openRange found it, so it was deleted since, and no record of the range will ever come (the
// replay printed its progress every second until ^C). A topic of that name created again is
// another topic, whose offsets are not the range's.
func (tr *topicRange) dropDeleted(ctx context.Context, adm *kadm.Client, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, metadataTimeout)
	defer cancel()
	err := tr.remaining.DropDeleted(ctx, adm, tr.topic)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("the topic was deleted while the replay read it (%d partitions of the range unread): %w", len(tr.remaining), err)
	}
	if err != nil {
		log.Warn("replay: list start offsets", "topic", tr.topic, "err", err)
	}
	return nil
}

// givenBackAs maps the states of a reservation whose units Redis gave back to the final row the
// store had before it lost it: its status and its reason, when Redis tells it. A failed
// order's reason went with the row; a refunded or expired order's units are back in Redis, and
// its reason says so (ReasonOperator, ReasonUnpaid), as the compensator records it once Redis
// has them (an empty reason is a refund still to finish).
var givenBackAs = map[string]struct {
	status events.Status
	reason string
}{
	lua.StateReleased: {events.Failed, events.ReasonReleasedBeforeReplay},
	lua.StateRefunded: {events.Refunded, events.ReasonOperator},
	lua.StateExpired:  {events.Expired, events.ReasonUnpaid},
}

// endedAs returns the orders of os whose reservation Redis gave back, by state (an order id's
// reservation's state), each as the store must hold it (givenBackAs), for
// store.RecordGivenBack.
func endedAs(os []store.Order, state func(orderID string) string) []store.Order {
	var ended []store.Order
	for _, o := range os {
		if as, ok := givenBackAs[state(o.OrderID)]; ok {
			o.Status, o.Reason = as.status, as.reason
			ended = append(ended, o)
		}
	}
	return ended
}

// stateIn reads a reservation's state in res, Redis's answer: "" when it has none.
func stateIn(res map[string]lua.Reservation) func(orderID string) string {
	return func(id string) string { return res[id].State }
}

// orderOf is the store's row of e's order, before the store decides its status.
func orderOf(e events.Event) store.Order {
	return store.Order{OrderID: e.OrderID, CampaignID: e.CampaignID, UserID: e.UserID, Quantity: int64(e.Quantity),
		CreatedAtMs: e.OccurredAt.UnixMilli()}
}

// recordEnded records orders as Redis ended them (store.RecordGivenBack), retrying while stop
// is not done; work is the context of the write.
func recordEnded(work, stop context.Context, log *slog.Logger, st Persister, orders []store.Order) (stored, moved int, err error) {
	if len(orders) == 0 {
		return 0, 0, nil
	}
	err = events.Retry(stop, log, "record orders Redis ended", func() (err error) {
		stored, moved, err = st.RecordGivenBack(work, orders)
		return err
	})
	return stored, moved, err
}

// catchUp moves on the orders the store holds confirmed or paid whose reservation Redis has
// refunded or expired (store.RecordGivenBack, a page of BatchSize orders a transaction), and
// returns how many it moved. It writes a progress line to progress every second.
//
// Each refund and expiry writes the store first and Redis second, so in normal operation Redis
// is never ahead of the store; a store restored from a backup taken before the refund or the
// expiry is, and the persister finds the order stored and changes nothing. The store would then
// count the order's units as sold while Redis has them back on sale, and the buyer's allowance
// as spent. Redis's record tells how the order ended. This is done for every campaign before
// any event is persisted, not per replayed event: the order's purchase may precede the replay's
// start, and the units these orders hold in the store must be free before a later buyer's
// order, which may have taken them in Redis, comes through the persister.
//
// Only forward transitions are made, so an order the store holds in a later state is left
// alone, and a second replay finds nothing to do. A paid order is confirmed in Redis:
// nothing here tells of a payment.
func catchUp(ctx context.Context, cfg Config, st ReplayStore, r Confirmer, progress io.Writer) (int, error) {
	var cs []store.Campaign
	err := events.Retry(ctx, cfg.Logger, "replay: read campaigns", func() (err error) {
		cs, err = st.Campaigns(ctx)
		return err
	})
	if err != nil {
		return 0, err
	}
	n, last := 0, time.Now()
	// Checked after each page, not each campaign: a sale is one campaign, and catching up its
	// orders can take minutes.
	report := func(campaign, checked, of int) {
		if time.Since(last) >= time.Second {
			last = time.Now()
			fmt.Fprintf(progress, "replay: catching up, campaign %d of %d (%d/%d of its orders), %d orders moved on\n", campaign, len(cs), checked, of, n)
		}
	}
	for i, c := range cs {
		var held []store.Order
		err := events.Retry(ctx, cfg.Logger, "replay: read confirmed orders", func() (err error) {
			held, err = st.Confirmed(ctx, c.ID)
			return err
		})
		if err != nil {
			return n, err
		}
		checked := 0
		for page := range slices.Chunk(held, cfg.BatchSize) {
			ids := make([]string, len(page))
			for i, o := range page {
				ids[i] = o.OrderID
			}
			res, err := reservations(ctx, ctx, cfg.Logger, r, ids)
			if err != nil {
				return n, err
			}
			_, moved, err := recordEnded(ctx, ctx, cfg.Logger, st, endedAs(page, stateIn(res)))
			n += moved
			if err != nil {
				return n, err
			}
			checked += len(page)
			report(i+1, checked, len(held))
		}
	}
	return n, nil
}

// recordGivenBack makes the store hold the batch's orders whose reservation Redis has given
// back as Redis ended them, before the persister sees the batch: those it lacks are stored
// failed, refunded or expired, those it holds confirmed or paid are refunded or expired, their
// units off the totals (store.RecordGivenBack). In a replay it counts both.
//
// In normal operation neither happens: each give-back writes the store first and Redis second.
// A store restored from a backup breaks that, for a replay and for the consumer alike, which
// meets the orders again when its group's offsets are reset or it died between the store's
// commit and the offsets'. The persister would confirm a lost order again, handing a buyer told
// "failed" a unit Redis has given back and may have sold to someone else; and an order the
// store holds confirmed keeps its unit counted as sold, so the buyer Redis sold it to next, in
// the same batch or one the consumer persists meanwhile, is refused store_sold_out though
// confirmed. An order whose record Redis has trimmed (a day after it ended), or that is pending
// or confirmed, goes to the persister as before: the batches of a sale, whose store write costs
// one round trip to Redis more, one HMGET per campaign.
func (h *handler) recordGivenBack(work, stop context.Context, evs []events.Event) error {
	ids := make([]string, len(evs))
	orders := make([]store.Order, len(evs))
	for i, e := range evs {
		ids[i], orders[i] = e.OrderID, orderOf(e)
	}
	var (
		held map[string]lua.Reservation
		err  error
	)
	if h.replay != nil { // there to put a restored store right: it waits for Redis
		if held, err = reservations(work, stop, h.cfg.Logger, h.redis, ids); err != nil {
			return err
		}
	} else {
		held, err = askRedis(h, "read reservations", len(ids), func() (map[string]lua.Reservation, error) { return h.redis.Reservations(work, ids) })
		if err != nil {
			// The consumer does not wait for Redis, as it does not for its confirmations: a
			// restored store meeting an outage is rarer than an outage, whose backlog, left
			// waiting, the sweeper would fail at its deadline. The confirm's answer still finds
			// an order the store holds confirmed that Redis ended (unconfirmed).
			return nil
		}
	}
	return h.recordEnded(work, stop, endedAs(orders, stateIn(held)))
}

// recordEnded records orders of a batch as Redis ended them (store.RecordGivenBack) and, in a
// replay, counts them; the consumer logs the orders it moved on, which only a store restored
// from a backup holds.
func (h *handler) recordEnded(work, stop context.Context, orders []store.Order) error {
	stored, moved, err := recordEnded(work, stop, h.cfg.Logger, h.store, orders)
	if h.replay != nil {
		h.replay.GivenBack += int64(stored)
		h.replay.CaughtUp += int64(moved)
	} else if moved > 0 {
		h.cfg.Logger.Info("moved on orders the store held confirmed that Redis had refunded or expired since (a store restored from a backup)",
			"orders", moved)
	}
	return err
}

// reservations reads the reservations of ids from Redis, retrying while Redis does not answer
// and stop is not done; work is the context of the reads.
func reservations(work, stop context.Context, log *slog.Logger, r Confirmer, ids []string) (map[string]lua.Reservation, error) {
	var res map[string]lua.Reservation
	err := events.Retry(stop, log, "replay: read reservations", func() (err error) {
		res, err = r.Reservations(work, ids)
		return err
	})
	return res, err
}

// recordPaid records the payments of recs, records of the results topic, that the store does
// not have, and returns how many it recorded.
//
// A payment pays the order in the store, then announces OrderPaid; Redis keeps a paid order as
// confirmed. A store restored from a backup taken before the payment holds the order confirmed
// (or, bought after the backup, the persister has just confirmed it again), and the sweeper would
// expire it at its pay_by and put the paid units back on sale. So each OrderPaid is recorded
// again with PayOrder, at the time the event says the payment was taken, which was inside the
// order's window. An order the store holds refunded without a payment (lost, and stored again as
// Redis ended it) gets the payment back, its refund to be announced again naming it
// (store.NameRefundedPayment). An order the store holds otherwise is left as it is: paid already,
// refunded with its payment, missing; one it holds expired, or paid by another payment, and a
// payment that paid another order (an api from before the store refused that announced it), are
// logged, as their payers may be owed a refund. A payment recorded from the topic is marked
// announced, as it is there: the sweeper does not announce it again (store.UnannouncedPayments).
func recordPaid(ctx context.Context, log *slog.Logger, st ReplayStore, recs []*kgo.Record) (int, error) {
	n := 0
	for _, rec := range recs {
		e, err := events.Decode(rec.Value)
		if err != nil || e.Type != events.OrderPaid || e.PaymentID == "" {
			continue // the results topic's other events, which the steps before dealt with
		}
		var (
			o       store.Order
			changed bool
			refusal error
		)
		err = events.Retry(ctx, log, "replay: record a payment", func() (err error) {
			o, changed, err = st.PayOrder(ctx, e.OrderID, e.PaymentID, e.OccurredAt)
			if err == nil {
				return st.MarkPaidAnnounced(ctx, e.OrderID)
			}
			if o.Status == events.Refunded && o.PaymentID == "" {
				// Paid, as the event says, then refunded: the row came back from Redis,
				// which keeps no payment, and its refund must name it again.
				changed, err = st.NameRefundedPayment(ctx, e.OrderID, e.PaymentID)
			}
			if events.ErrorCode(err) != events.Internal {
				refusal, err = err, nil // the order's state, not a failure
			}
			return err
		})
		if err != nil {
			return n, err
		}
		switch events.ErrorCode(refusal) {
		case "":
			if changed {
				n++
			}
		case events.PaymentWindowClosed, events.AlreadyPaid, events.PaymentReused, events.CampaignCancelled:
			log.Warn("replay: a payment on the results topic does not pay its order; refund the payer",
				"order_id", e.OrderID, "payment_id", e.PaymentID, "status", o.Status, "err", refusal)
		}
	}
	return n, nil
}

// startOffsets returns, per partition, the first offset the replay reads.
func startOffsets(ctx context.Context, adm *kadm.Client, topic string, from From) (map[int32]int64, error) {
	var (
		listed kadm.ListedOffsets
		err    error
	)
	if from.Time.IsZero() {
		listed, err = adm.ListStartOffsets(ctx, topic)
	} else {
		listed, err = adm.ListOffsetsAfterMilli(ctx, from.Time.UnixMilli(), topic)
	}
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("replay: start offsets: %w", err)
	}
	out := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) {
		if o.Offset < 0 { // no record at or after the time: nothing to replay here
			out[o.Partition] = math.MaxInt64
			return
		}
		out[o.Partition] = max(o.Offset, from.Offset)
	})
	return out, nil
}

func describe(f From) string {
	if !f.Time.IsZero() {
		return f.Time.Format(time.RFC3339)
	}
	return "offset " + strconv.FormatInt(f.Offset, 10)
}

func percent(n, total int64) int64 {
	if total == 0 {
		return 100
	}
	return 100 * n / total
}
