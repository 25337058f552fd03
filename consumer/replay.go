package consumer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
	// GivenBack counts the orders missing from the store whose reservation Redis had given back
	// (released, refunded, expired), which the replay stored failed, refunded or expired.
	GivenBack int64
}

// ReplayStore is the part of the store a replay writes to.
type ReplayStore interface {
	Persister
	RecordGivenBack(ctx context.Context, orders []store.Order) (int, error)
}

// ReplayRedis is the part of Redis a replay reads and writes.
type ReplayRedis interface {
	Confirmer
	Reservations(ctx context.Context, orderIDs []string) (map[string]lua.Reservation, error)
}

var (
	_ ReplayStore = (*store.Store)(nil)
	_ ReplayRedis = (*lua.Redis)(nil)
)

// Replay re-consumes the requested topic from from up to its end as of the call, outside any
// consumer group, into the same persister as the consumer: orders already stored change
// nothing, missing ones come back, as Redis last knew them (recordGivenBack). It writes a
// progress line to progress every second.
func Replay(ctx context.Context, cfg Config, from From, st ReplayStore, r ReplayRedis, progress io.Writer) (ReplayStats, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return ReplayStats{}, err
	}
	cl, err := events.NewClient(cfg.Brokers,
		kgo.ConsumeTopics(cfg.Topics.Requested),
		kgo.ConsumeResetOffset(from.offset()),
		kgo.FetchMaxWait(250*time.Millisecond),
	)
	if err != nil {
		return ReplayStats{}, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, cfg.Topics.Requested)
	if err != nil {
		return ReplayStats{}, fmt.Errorf("replay: end offsets: %w", err)
	}
	starts, err := startOffsets(ctx, adm, cfg.Topics.Requested, from)
	if err != nil {
		return ReplayStats{}, err
	}
	var stats ReplayStats
	remaining := map[int32]int64{} // partition -> end offset still to reach
	ends.Each(func(o kadm.ListedOffset) {
		start := starts[o.Partition]
		if o.Offset > start {
			remaining[o.Partition] = o.Offset
			stats.Total += o.Offset - start
		}
	})
	h := &handler{cfg: cfg, store: st, redis: r, cl: cl}
	fmt.Fprintf(progress, "replay: %d events in %s from %s\n", stats.Total, cfg.Topics.Requested, describe(from))
	last := time.Now()
	for len(remaining) > 0 {
		fetches := cl.PollRecords(ctx, cfg.BatchSize)
		if err := ctx.Err(); err != nil {
			return stats, fmt.Errorf("replay stopped after %d of %d events: %w", stats.Events, stats.Total, err)
		}
		var fatal error
		fetches.EachError(func(_ string, _ int32, err error) {
			if fatal == nil && !kgo.IsRetryableBrokerErr(err) {
				fatal = err
			}
		})
		if fatal != nil {
			return stats, fmt.Errorf("replay: fetch: %w", fatal)
		}
		var batch []*kgo.Record
		for _, rec := range fetches.Records() {
			end, ok := remaining[rec.Partition]
			if !ok || rec.Offset >= end {
				continue // written after the replay began: the live consumer has it
			}
			batch = append(batch, rec)
			if rec.Offset == end-1 {
				delete(remaining, rec.Partition)
			}
		}
		if len(batch) > 0 {
			n, err := recordGivenBack(ctx, cfg.Logger, st, r, batch)
			if err != nil {
				return stats, fmt.Errorf("replay after %d of %d events: %w", stats.Events, stats.Total, err)
			}
			stats.GivenBack += int64(n)
			if err := h.handle(ctx, ctx, batch); err != nil {
				return stats, fmt.Errorf("replay after %d of %d events: %w", stats.Events, stats.Total, err)
			}
			stats.Events += int64(len(batch))
		}
		if time.Since(last) >= time.Second {
			last = time.Now()
			fmt.Fprintf(progress, "replay: %d/%d events (%d%%), %d given back in Redis\n",
				stats.Events, stats.Total, percent(stats.Events, stats.Total), stats.GivenBack)
		}
	}
	fmt.Fprintf(progress, "replay: done, %d events; %d orders missing from the store were given back in Redis and are stored failed, refunded or expired\n",
		stats.Events, stats.GivenBack)
	return stats, nil
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
	"released": {events.Failed, events.ReasonReleasedBeforeReplay},
	"refunded": {events.Refunded, events.ReasonOperator},
	"expired":  {events.Expired, events.ReasonUnpaid},
}

// recordGivenBack stores, before the persister sees the batch, its orders the store does not
// have and whose reservation Redis has given back, and returns how many it stored.
//
// The persister confirms any order the store does not have. In normal operation the store
// has every order whose units were given back, since each give-back writes the store first
// and Redis second; a store that lost rows (restored from a backup) breaks that, and it is
// what a replay is for. Confirming such an order again would hand a buyer told "failed" a
// unit Redis has given back and may have sold to someone else, who is then refused
// store_sold_out although confirmed. So Redis, whose record outlived the store's row, says
// how the order ended, and the persister finds it final and changes nothing. An order whose
// record Redis has trimmed (a day after it ended), or that is pending or confirmed, goes to
// the persister as before.
func recordGivenBack(ctx context.Context, log *slog.Logger, st ReplayStore, r ReplayRedis, recs []*kgo.Record) (int, error) {
	evs := make([]events.Event, 0, len(recs))
	ids := make([]string, 0, len(recs))
	for _, rec := range recs {
		e, err := events.Decode(rec.Value)
		if err != nil || e.Type != events.OrderRequested {
			continue // the persister dead-letters it
		}
		evs = append(evs, e)
		ids = append(ids, e.OrderID)
	}
	var held map[string]lua.Reservation
	err := events.Retry(ctx, log, "replay: read reservations", func() (err error) {
		held, err = r.Reservations(ctx, ids)
		return err
	})
	if err != nil {
		return 0, err
	}
	var orders []store.Order
	for _, e := range evs {
		as, ok := givenBackAs[held[e.OrderID].State]
		if !ok {
			continue
		}
		orders = append(orders, store.Order{OrderID: e.OrderID, CampaignID: e.CampaignID, UserID: e.UserID, Quantity: int64(e.Quantity),
			Status: as.status, Reason: as.reason, CreatedAtMs: e.OccurredAt.UnixMilli()})
	}
	if len(orders) == 0 {
		return 0, nil
	}
	var n int
	err = events.Retry(ctx, log, "replay: record given-back orders", func() (err error) {
		n, err = st.RecordGivenBack(ctx, orders)
		return err
	})
	return n, err
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
