package compensator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/failpoint"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// Store is the part of the store the compensator needs.
type Store interface {
	Order(ctx context.Context, id string) (store.Order, error)
	FailOrderFenced(ctx context.Context, e events.Event, reason string, f store.Fence) (store.Order, error)
	RefundOrder(ctx context.Context, orderID string) (store.Order, bool, error)
	PayOrder(ctx context.Context, orderID, paymentID string, now time.Time) (store.Order, bool, error)
	ExpireOrder(ctx context.Context, orderID string, now time.Time) (store.Order, error)
	MarkUnpaid(ctx context.Context, orderID string) error
	MarkRefunded(ctx context.Context, orderID string) error
	MarkPaidAnnounced(ctx context.Context, orderID string) error
}

// Redis is the part of Redis the compensator needs.
type Redis interface {
	Reservation(ctx context.Context, orderID string) (lua.Reservation, error)
	Release(ctx context.Context, orderID string) (lua.Outcome, error)
	Confirm(ctx context.Context, orderID string) (lua.Outcome, error)
	Refund(ctx context.Context, orderID string) (lua.Outcome, error)
	Expire(ctx context.Context, orderID string) (lua.Outcome, error)
}

var (
	_ Store = (*store.Store)(nil)
	_ Redis = (*lua.Redis)(nil)
)

// Producer sends events to the results topic without waiting for room in its buffer: a
// *kgo.Client's TryProduce refuses a record at once (ErrMaxBuffered) when it holds
// MaxBufferedRecords already, where Produce would wait for Kafka.
type Producer interface {
	TryProduce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
}

// Resolver moves single reservations to their final state. It is safe to call concurrently
// and repeatedly for the same order from any number of processes.
type Resolver struct {
	Store    Store
	Redis    Redis
	Producer Producer
	Results  string // the results topic
	// Logger receives what cannot be returned to the caller: an announcement Kafka refused after
	// the outcome was stored. Default: slog.Default().
	Logger *slog.Logger
}

func (r *Resolver) logger() *slog.Logger { return cmp.Or(r.Logger, slog.Default()) }

// Fail resolves the order of e as failed for reason, unless the consumer confirmed it first, and
// returns the order's final row. source labels the metrics.
func (r *Resolver) Fail(ctx context.Context, e events.Event, reason, source string) (store.Order, error) {
	return r.FailFenced(ctx, e, reason, source, store.Fence{})
}

// FailFenced is Fail for the holder of a lease lock: the store refuses the write with
// store.ErrStaleFence once a later holder has written.
func (r *Resolver) FailFenced(ctx context.Context, e events.Event, reason, source string, f store.Fence) (store.Order, error) {
	o, _, err := r.fail(ctx, e, reason, source, f)
	return o, err
}

// fail is FailFenced that also reports whether this call gave the order's units back in Redis:
// a bulk run counts an order it released only then, not one another run released first.
func (r *Resolver) fail(ctx context.Context, e events.Event, reason, source string, f store.Fence) (store.Order, bool, error) {
	o, err := r.Store.FailOrderFenced(ctx, e, reason, f)
	if err != nil {
		return o, false, err
	}
	switch o.Status {
	case events.Failed:
		out, err := r.Redis.Release(ctx, o.OrderID)
		if err != nil {
			return o, false, err
		}
		compensations.WithLabelValues(source, outcome(out, lua.StateReleased)).Inc()
		// Sent again on a retry, so the results topic is at least once; readers key on order_id.
		ev := e.New(events.OrderFailed, time.Now())
		ev.Reason = o.Reason
		return o, out.Changed, r.publish(ctx, ev)
	case events.Confirmed, events.Paid:
		// The consumer won; make sure the sweeper stops seeing the reservation as pending.
		out, err := r.Redis.Confirm(ctx, o.OrderID)
		compensations.WithLabelValues(source, outcome(out, lua.StateConfirmed)).Inc()
		return o, false, err
	case events.Refunded:
		// A refund that stopped between the store and Redis; finish it.
		changed, err := r.refundReservation(ctx, o, source)
		if err == nil {
			// As refundOnce: the row was read before MarkRefunded, and its empty reason
			// would tell the caller (Compensate's answer) the units are not back yet.
			o.Reason = events.ReasonOperator
		}
		return o, changed, err
	case events.Expired:
		// An expiry that stopped between the store and Redis, or a reservation made again
		// under the id of an order that expired long ago (its record trimmed after the
		// retention, and the Idempotency-Key's record with it, so the key came back as new):
		// either way its units go back, once.
		changed, err := r.giveBack(ctx, o, r.Redis.Expire, source, lua.StateExpired, events.OrderExpired)
		return o, changed, err
	}
	return o, false, nil
}

// Compensate is the operator's command: it releases a reservation that will not become an order,
// or refunds a confirmed one. Calling it again changes nothing; it returns the final row.
func (r *Resolver) Compensate(ctx context.Context, orderID string) (store.Order, error) {
	o, err := r.Store.Order(ctx, orderID)
	if events.ErrorCode(err) == events.OrderNotFound {
		res, rerr := r.Redis.Reservation(ctx, orderID)
		if errors.Is(rerr, lua.ErrNoReservation) {
			return o, err
		}
		if rerr != nil {
			return o, rerr
		}
		if storedBefore(res.State) {
			// The consumer may have stored it between the two reads.
			var lost bool
			if o, lost, err = r.lost(ctx, orderID); lost {
				return o, events.Errorf(events.OrderNotFound, "order %q is %s in Redis but not in the store, restored from a backup that lacks it: run `seckill replay` first", orderID, res.State)
			}
		} else {
			// Fail announces what it did; a refund is still due when the consumer stored the
			// order first, between our read and the write.
			o, err = r.Fail(ctx, reservationEvent(res), events.ReasonOperator, "operator")
			if err != nil || (o.Status != events.Confirmed && o.Status != events.Paid) {
				return o, err
			}
			return r.refund(ctx, o)
		}
	}
	if err != nil {
		return o, err
	}
	switch {
	case o.Status == events.Confirmed || o.Status == events.Paid:
		return r.refund(ctx, o)
	case o.Status == events.Refunded && o.Reason != "":
		// Finished: MarkRefunded gave it its reason once Redis had its units back and Kafka its
		// OrderRefunded, on which the payment service gives the payment back; an operator's
		// second click must not announce it again.
		return o, nil
	case o.Status == events.Failed || o.Status == events.Refunded: // finish what may have stopped half way
		return r.Fail(ctx, orderEvent(o), o.Reason, "operator")
	}
	return o, nil
}

// storedBefore reports whether Redis holds a reservation in a state it reaches only after the
// store committed its order: confirmed (the consumer confirms after its commit), refunded or
// expired (a refund or an expiry writes the store first). Pending and released are the states
// failing an order expects: its release moves pending to released.
func storedBefore(state string) bool {
	return state == lua.StateConfirmed || state == lua.StateRefunded || state == lua.StateExpired
}

// lost reads the order of a reservation Redis holds in a state storedBefore reports, and
// reports whether the store lost it: the store has it, or was restored from a backup that lacks
// it. A lost order must not be failed: it would end twice, failed in the store and announced so
// to a buyer told confirmed (or refunded), and as it ended in Redis, whose release gives back
// pending reservations only, with its unit sold or already given back; and the failed row,
// final, would keep a replay from bringing it back as it ended.
func (r *Resolver) lost(ctx context.Context, orderID string) (store.Order, bool, error) {
	o, err := r.Store.Order(ctx, orderID)
	if events.ErrorCode(err) == events.OrderNotFound {
		return o, true, nil
	}
	return o, false, err
}

// Pay records the payment of a confirmed order within its window and announces it (announcePaid);
// paying again with the same payment id returns the paid order and announces it again, as the
// first announcement may have been lost (Kafka refused it, or the process died before the
// produce). Until Kafka has it, the sweeper announces it too (store.UnannouncedPayments), but a
// store restored before either loses it: a refused announcement's answer asks the payment service
// to pay again until it answers 200. Refusals are *events.Error (store.PayOrder); a pending order
// is events.OrderNotConfirmed.
func (r *Resolver) Pay(ctx context.Context, orderID, paymentID string) (store.Order, error) {
	o, _, err := r.Store.PayOrder(ctx, orderID, paymentID, time.Now())
	if events.ErrorCode(err) == events.OrderNotFound {
		_, rerr := r.Redis.Reservation(ctx, orderID)
		switch {
		case errors.Is(rerr, lua.ErrMalformed):
			// Redis holds the order, in a record no retry makes readable: not confirmed, as
			// below, and for an operator to look at (seckill audit names such records).
			r.logger().Warn("pay: the order's reservation record in Redis is malformed", "order_id", orderID, "err", rerr)
			fallthrough
		case rerr == nil:
			return o, events.Errorf(events.OrderNotConfirmed, "order %q is not confirmed yet; try again shortly", orderID)
		case !errors.Is(rerr, lua.ErrNoReservation):
			return o, events.Wrap(events.Unavailable, rerr, "the order cannot be read right now; try again shortly")
		}
	}
	if err != nil {
		return o, err
	}
	// The store alone holds the payment until Kafka has it: restored from a backup meanwhile,
	// it loses it, and only the payment service, paying again, can bring it back.
	return o, r.announcePaid(ctx, o, "pay again with the same payment_id until it answers 200")
}

// announcePaid announces the OrderPaid of paid order o, waiting until Kafka has it
// (publishAcked, whose error says then), and only then records in the store that it is
// announced: store.UnannouncedPayments lists the order until this has run to its end, so an
// announcement Kafka refused, or lost with its process, is made by the sweeper.
func (r *Resolver) announcePaid(ctx context.Context, o store.Order, then string) error {
	// The announcement, a retry's and the sweeper's too, carries the time the store took the
	// payment: a replay after a restore records the payment again as of that time
	// (consumer.recordPaid), inside the window, where a clock reading taken after the commit
	// may be past pay_by.
	ev := orderEvent(o).New(events.OrderPaid, time.UnixMilli(o.UpdatedAtMs))
	ev.PaymentID = o.PaymentID
	if err := r.publishAcked(ctx, ev, "paid", then); err != nil {
		return err
	}
	return r.Store.MarkPaidAnnounced(ctx, o.OrderID)
}

// announceTimeout bounds publishAcked's wait for Kafka.
const announceTimeout = 5 * time.Second

// errNotAnnounced is an announcement Kafka refused or did not take within announceTimeout.
var errNotAnnounced = errors.New("the announcement did not reach Kafka")

// publishAcked announces e and waits until Kafka has it, for an announcement that nothing else
// brings back once lost. OrderPaid is one: Redis keeps a paid order as confirmed, so a replay
// after a store restore learns of the payment from the results topic alone. OrderRefunded is
// another: the payment service gives the payment back when it reads it. Refused or not taken
// in time, it is an events.Unavailable error (wrapping errNotAnnounced) that tells the caller
// the order is status and what then announces it again.
func (r *Resolver) publishAcked(ctx context.Context, e events.Event, status, then string) error {
	rec, err := events.Record(r.Results, e)
	if err != nil {
		return err
	}
	if err := events.Acked(ctx, r.Producer.TryProduce, rec, announceTimeout); err != nil {
		return events.Wrap(events.Unavailable, fmt.Errorf("%w: %w", errNotAnnounced, err),
			"order %s is %s, but its announcement did not reach Kafka: %s", e.OrderID, status, then)
	}
	return nil
}

// Expire ends an order left unpaid past its pay_by: the store records it expired (the first
// final row wins, so an order paid at the same instant stays paid), Redis gives its units back
// once, Kafka takes OrderExpired, and only then the store notes that the units are back. An
// expiry that stopped half way, or whose announcement Kafka did not take (an events.Unavailable
// error), is finished by the next call: store.ExpiringOrders lists it until the note.
func (r *Resolver) Expire(ctx context.Context, orderID string, now time.Time) (store.Order, error) {
	o, err := r.Store.ExpireOrder(ctx, orderID, now)
	if err != nil || o.Status != events.Expired || o.Reason != "" {
		return o, err
	}
	failpoint.Inject(failpoint.CompensatorMidExpiry)
	if _, err := r.giveBack(ctx, o, r.Redis.Expire, "payment_window", lua.StateExpired, events.OrderExpired); err != nil {
		return o, err
	}
	if err := r.Store.MarkUnpaid(ctx, o.OrderID); err != nil {
		return o, err
	}
	o.Reason = events.ReasonUnpaid
	return o, nil
}

// refund is refundOnce for one order an operator compensates. A dependency's failure after
// the store's commit is said so: the api's answer to a dependency's failure is that nothing
// changed, and the order is refunded. Store.Refunding lists it until its units are back and
// its refund announced. (A bulk run says this of all its orders: run it again.)
func (r *Resolver) refund(ctx context.Context, o store.Order) (store.Order, error) {
	o, _, err := r.refundOnce(ctx, o.OrderID)
	if o.Status == events.Refunded && events.ErrorCode(err) == events.Internal {
		err = events.Wrap(events.Unavailable, err, "order %s is refunded; its units go back on sale and its refund is announced once Redis and Kafka answer: the sweeper finishes it, or compensate it again", o.OrderID)
	}
	return o, err
}

// refundOnce refunds a stored order, and reports whether this call refunded it in the store:
// an order another run refunded meanwhile comes back refunded all the same, and a bulk run
// must not count it too. Its units are given back in Redis either way (the other run may have
// stopped before). An order that ended otherwise meanwhile (expired unpaid by the sweeper
// between the caller's read and this) is left as it is: no refund to announce.
func (r *Resolver) refundOnce(ctx context.Context, orderID string) (store.Order, bool, error) {
	o, refunded, err := r.Store.RefundOrder(ctx, orderID)
	if err != nil || o.Status != events.Refunded {
		return o, false, err
	}
	if _, err := r.refundReservation(ctx, o, "operator"); err != nil {
		return o, refunded, err
	}
	// The order as the store now holds it: MarkRefunded gave it the reason that says its units
	// are back, and an answer without it would say they are not.
	o.Reason = events.ReasonOperator
	return o, refunded, nil
}

// refundReservation gives a refunded order's units back in Redis, once, announces it, and once
// Kafka has the announcement records in the store that they are back, so that Store.Refunding
// lists a refund until this has run to its end: the payment service gives the payment back on
// OrderRefunded, so a refund must not be marked finished with its announcement lost. It
// reports whether this call gave the units back.
func (r *Resolver) refundReservation(ctx context.Context, o store.Order, source string) (bool, error) {
	changed, err := r.giveBack(ctx, o, r.Redis.Refund, source, lua.StateRefunded, events.OrderRefunded)
	if err != nil {
		return changed, err
	}
	return changed, r.Store.MarkRefunded(ctx, o.OrderID)
}

// giveBack moves a stored order's confirmed reservation on with move (which gives its units
// back, once), counts it as changed under source, and announces t, waiting until Kafka has it
// (publishAcked). It reports whether move gave the units back (false: an earlier call did, or
// Redis no longer has the reservation).
func (r *Resolver) giveBack(ctx context.Context, o store.Order, move func(context.Context, string) (lua.Outcome, error),
	source, changed string, t events.Type) (bool, error) {
	// Confirm first: if the consumer stopped between the store and Redis, the reservation is
	// still pending, and only a confirmed one moves on.
	if _, err := r.Redis.Confirm(ctx, o.OrderID); err != nil {
		return false, err
	}
	out, err := move(ctx, o.OrderID)
	if err != nil {
		return false, err
	}
	compensations.WithLabelValues(source, outcome(out, changed)).Inc()
	ev := orderEvent(o).New(t, time.Now())
	// The refund of a paid order names its payment: the payment service reading the results
	// topic gives it back to the payer. An order never paid has none.
	ev.PaymentID = o.PaymentID
	// At least once: the store marks the order finished (MarkUnpaid, MarkRefunded) only after
	// this returns nil, so an order whose announcement Kafka did not take stays listed, and
	// the next sweep announces it again; readers key on order_id.
	return out.Changed, r.publishAcked(ctx, ev, changed, "the sweeper announces it again once Kafka answers")
}

func (r *Resolver) publish(ctx context.Context, e events.Event) error {
	rec, err := events.Record(r.Results, e)
	if err != nil {
		return err
	}
	// OrderFailed alone comes here. The store holds the outcome already, final, and the event
	// only announces it: a lost one leaves the buyer's open event streams without the order's
	// end until they reconnect, and the other apis' sold-out flags set for up to their
	// SoldOutTTL (half a second); no money waits on it. Waiting for Kafka here would stop the
	// sweeper's releases (and everything behind them) while Kafka is down, so the client keeps
	// the record and delivers it when Kafka is back; past its buffer (50,000 records by
	// default) it refuses the record at once, and the promise logs it.
	log := r.logger()
	r.Producer.TryProduce(context.WithoutCancel(ctx), rec, func(rec *kgo.Record, err error) {
		if err != nil {
			log.Warn("announce an order's outcome", "type", e.Type, "order_id", e.OrderID, "err", err)
		}
	})
	return nil
}

func outcome(out lua.Outcome, changed string) string {
	if out.Changed {
		return changed
	}
	return "unchanged"
}

// reservationEvent describes a reservation as the OrderRequested event it stood for.
func reservationEvent(res lua.Reservation) events.Event {
	return events.Event{
		Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: time.Now().UTC(),
		OrderID: res.OrderID, CampaignID: res.Campaign, UserID: res.User, Quantity: res.Quantity, Deadline: res.Deadline,
	}
}

// orderEvent describes a stored order as an event.
func orderEvent(o store.Order) events.Event {
	return events.Event{
		Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: time.UnixMilli(o.CreatedAtMs).UTC(),
		OrderID: o.OrderID, CampaignID: o.CampaignID, UserID: o.UserID, Quantity: int(o.Quantity),
	}
}
