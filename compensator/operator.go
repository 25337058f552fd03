package compensator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// CampaignStore is the part of the store an operator's campaign controls need.
type CampaignStore interface {
	ChangeCampaign(ctx context.Context, id string, change func(*store.Campaign) error) (store.Campaign, []store.Order, error)
	Campaign(ctx context.Context, id string) (store.Campaign, error)
	Confirmed(ctx context.Context, campaign string) ([]store.Order, error)
	Refunding(ctx context.Context, campaign string) ([]store.Order, error)
}

// CampaignRedis is the part of Redis an operator's campaign controls need.
type CampaignRedis interface {
	Sync(ctx context.Context, c lua.Campaign) (lua.Synced, error)
	Pending(ctx context.Context, campaign string, limit int) ([]string, error)
	Now(ctx context.Context, campaign string) (int64, error)
}

var (
	_ CampaignStore = (*store.Store)(nil)
	_ CampaignRedis = (*lua.Redis)(nil)
)

// Operator carries out an operator's controls of a campaign: close, extend, add stock, cancel,
// and compensate its orders in bulk. The store changes first and is the truth: Redis follows
// at once (Sync), and the sweeper brings it along within a sweep if that step fails. Every
// control is idempotent, so a retry after an error finishes the work.
type Operator struct {
	*Resolver
	Campaigns CampaignStore
	Sales     CampaignRedis
}

// Tally counts what a bulk compensation did to each order.
type Tally struct {
	Released  int64 `json:"released"`  // pending reservations released
	Refunded  int64 `json:"refunded"`  // confirmed or paid orders refunded
	Unchanged int64 `json:"unchanged"` // orders already final, or confirmed by the consumer first
}

// Progress is told how many of the orders a long control has handled, and of how many.
type Progress func(done, total int)

// Close ends the campaign's sale now, by Redis's clock. Closing an ended campaign changes
// nothing.
func (o *Operator) Close(ctx context.Context, id string) (store.Campaign, error) {
	now, err := o.saleNow(ctx, id)
	if err != nil {
		return store.Campaign{}, err
	}
	return o.change(ctx, id, func(c *store.Campaign) error {
		if c.Over(now) {
			return errOver
		}
		// Before its start, the end is the start: an empty window, which Redis never opens and
		// which Extend can widen again from the planned start.
		c.EndsAtMs = max(now, c.StartsAtMs)
		return nil
	})
}

// Extend moves the campaign's end later, to ends, which must be in the future by the sale's
// clock (Redis's, as Close); it may reopen a closed campaign, never a cancelled one. It never
// shortens a sale: an operator who meant to lengthen it would have it end early, and Close
// ends one now.
func (o *Operator) Extend(ctx context.Context, id string, ends time.Time) (store.Campaign, error) {
	now, err := o.saleNow(ctx, id)
	if err != nil {
		return store.Campaign{}, err
	}
	return o.change(ctx, id, func(c *store.Campaign) error {
		switch ms := ends.UnixMilli(); {
		case ms <= now:
			return events.Errorf(events.Invalid, "ends_at must be in the future")
		case ms <= c.StartsAtMs:
			return events.Errorf(events.Invalid, "ends_at must be after the campaign's start")
		case ms == c.EndsAtMs:
			return errUnchanged
		case c.EndsAtMs == 0:
			return events.Errorf(events.Invalid, "campaign %q has no end to move later; to end its sale now, close it", id)
		case ms < c.EndsAtMs:
			return events.Errorf(events.Invalid, "ends_at must be later than the campaign's end, %s; to end its sale now, close it",
				time.UnixMilli(c.EndsAtMs).UTC().Format(time.RFC3339Nano))
		default:
			c.EndsAtMs = ms
		}
		return nil
	})
}

// AddStock puts n more units of the campaign on sale. Unlike the other controls, running it
// again adds again: a caller that cannot tell whether a call was taken retries with RaiseStock.
func (o *Operator) AddStock(ctx context.Context, id string, n int64) (store.Campaign, error) {
	return o.change(ctx, id, func(c *store.Campaign) error {
		if n < 1 || n > events.MaxUnits-c.Stock { // not c.Stock+n, which wraps for an n near 2^63
			return events.Errorf(events.Invalid, "add must be a whole number from 1 to %d", events.MaxUnits-c.Stock)
		}
		c.Stock += n
		return nil
	})
}

// RaiseStock puts units of the campaign on sale until its stock is total. Unlike AddStock it
// is idempotent: run again after an error or a timeout, it adds nothing more and brings Redis
// along. A total below the stock is refused (another raise may have gone past it).
func (o *Operator) RaiseStock(ctx context.Context, id string, total int64) (store.Campaign, error) {
	return o.change(ctx, id, func(c *store.Campaign) error {
		switch {
		case total == c.Stock:
			return errUnchanged
		case total < c.Stock: // said so: the operator may not know another raise went past
			return events.Errorf(events.Invalid, "a total of %d cannot go below its stock now, %d: stock is only ever raised", total, c.Stock)
		case total > events.MaxUnits:
			return events.Errorf(events.Invalid, "stock must be a whole number from %d to %d", c.Stock, events.MaxUnits)
		}
		c.Stock = total
		return nil
	})
}

// Cancel closes the campaign for good and refunds every confirmed or paid order in the store,
// in one transaction (store.ChangeCampaign), then releases every pending reservation and gives
// the refunded orders' units back in Redis, announcing each refund. Cancelling again finishes
// what an interrupted cancel left and changes nothing else; so does the sweeper, which finishes
// every refund stored with its units still held (store.UnfinishedRefunds). The tally counts the
// orders the store step refunded, whether or not this run gave their units back.
func (o *Operator) Cancel(ctx context.Context, id string, progress Progress) (store.Campaign, Tally, error) {
	now, err := o.saleNow(ctx, id)
	if err != nil {
		return store.Campaign{}, Tally{}, err
	}
	c, refunded, err := o.changeRefunding(ctx, id, func(c *store.Campaign) error {
		if c.CancelledAtMs > 0 {
			return errOver
		}
		c.CancelledAtMs = now
		if !c.Over(now) {
			c.EndsAtMs = max(now, c.StartsAtMs) // as Close
		}
		return nil
	})
	// With the cancel stored, its orders are given back even if Redis did not take the closed
	// sale (the sweeper closes it within a sweep): that needs only the store and each order's
	// own script.
	behind := errors.Is(err, errSaleBehind)
	if err != nil && !behind {
		return c, Tally{}, err
	}
	ours := make(map[string]bool, len(refunded))
	for _, ord := range refunded {
		ours[ord.OrderID] = true
	}
	t, cerr := o.compensateCampaign(ctx, id, true, true, ours, progress)
	t.Refunded += int64(len(refunded))
	if cerr != nil {
		// Not joined with a sale behind, whose "nothing needs running again" would be what the
		// caller reads first: only running the cancel again resolves the orders left, and its
		// change of the campaign brings Redis along then too.
		return c, t, cerr
	}
	c, cerr = o.Campaigns.Campaign(ctx, id) // sold, as the refunds left it
	return c, t, errors.Join(err, cerr)
}

// saleNow returns the instant by Redis's clock, in milliseconds. Redis, not the store, tells a
// late purchase (reserve.lua compares its own TIME with the sale's end), so an end taken from
// this process's clock would leave Redis selling for as long as its clock is behind ours, after
// the operator was told the sale was closed.
func (o *Operator) saleNow(ctx context.Context, id string) (int64, error) {
	now, err := o.Sales.Now(ctx, id)
	if err != nil {
		return 0, events.Wrap(events.Unavailable, err, "campaign %q was not changed: the sale's clock cannot be read right now; try again shortly", id)
	}
	return now, nil
}

// errSaleBehind is a control stored in the store whose Redis step failed: the sweeper brings
// the sale along within a sweep.
var errSaleBehind = errors.New("the sale in redis is behind the store")

// errUnchanged tells change that a control has nothing to change.
var errUnchanged = errors.New("unchanged")

// errOver tells change that a control that ends the sale (close, cancel) has nothing to change:
// the sale is over already, as a cancelled campaign's is, so a cancelled campaign takes it.
var errOver = errors.New("over already")

// change applies a control in the store, then in Redis. A cancelled campaign refuses every
// control but one that ends the sale, whether or not it would change anything: an extend to
// its end, or a raise to its stock, answered success as if its sale could go on.
// Redis is brought along even when the store had the change already, so that a retry finishes
// a control whose Redis step failed.
func (o *Operator) change(ctx context.Context, id string, fn func(*store.Campaign) error) (store.Campaign, error) {
	c, _, err := o.changeRefunding(ctx, id, fn)
	return c, err
}

// changeRefunding is change, and returns the orders the change refunded: those of a campaign it
// cancelled.
func (o *Operator) changeRefunding(ctx context.Context, id string, fn func(*store.Campaign) error) (store.Campaign, []store.Order, error) {
	var current store.Campaign
	c, refunded, err := o.Campaigns.ChangeCampaign(ctx, id, func(c *store.Campaign) error {
		current = *c
		err := fn(c)
		if current.CancelledAtMs > 0 && err != errOver {
			return events.Errorf(events.CampaignCancelled, "campaign %q was cancelled; it cannot change", id)
		}
		return err
	})
	if errors.Is(err, errUnchanged) || errors.Is(err, errOver) {
		c, err = current, nil
	}
	if err != nil {
		return c, nil, err
	}
	// The change is stored: its Redis step is work in hand, finished even when the caller stops
	// waiting now (an operator's ^C, an admin who hung up), or the sale would go on under the
	// old settings until the sweeper's next round. Redis's own timeouts bound each call.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), events.DefaultDrainTimeout)
	defer cancel()
	if _, err := o.Sales.Sync(sctx, RedisCampaign(c)); err != nil {
		// Not "run this again": the sweeper brings the sale along, and an add-stock run again
		// adds again.
		return c, refunded, events.Wrap(events.Unavailable, fmt.Errorf("%w: %w", errSaleBehind, err),
			"campaign %q was changed in the store, and its sale follows within seconds: nothing needs running again", id)
	}
	return c, refunded, nil
}

// ErrStopped is the error of a bulk compensation (CompensateCampaign, Cancel) whose context was
// done before it took its every order: it finished those in hand, and running it again does
// the rest.
var ErrStopped = errors.New("stopped")

// bulkWorkers bounds the orders a bulk compensation resolves at once.
const bulkWorkers = 8

// CompensateCampaign releases the campaign's pending reservations (pending) and refunds its
// confirmed and paid orders (confirmed), as they are when it starts, each as Compensate would;
// running it again changes nothing more. A reservation the consumer confirms meanwhile is left
// confirmed (counted unchanged), unless confirmed orders are refunded too: those are read after
// the pending ones are done, and one found in both is counted once, by the refund. Refunding
// also finishes the refunds stored before (by a run cut short, or by a cancel's store step)
// whose units Redis still holds, and counts them unchanged: an order is counted refunded by the
// run whose call moved it to refunded in the store (store.RefundOrder says which), and released
// by the run that gave its units back in Redis, so that two runs at once do not both count it.
// An order whose reservation record Redis cannot parse (lua.ErrMalformed) is left as it is and
// counted nowhere; the run goes on, and its error names each such order once the rest is done.
func (o *Operator) CompensateCampaign(ctx context.Context, id string, pending, confirmed bool, progress Progress) (Tally, error) {
	return o.compensateCampaign(ctx, id, pending, confirmed, nil, progress)
}

// compensateCampaign is CompensateCampaign, counting nowhere the orders in ours: a cancel's
// store step refunded them, and the cancel counts them.
func (o *Operator) compensateCampaign(ctx context.Context, id string, pending, confirmed bool, ours map[string]bool, progress Progress) (Tally, error) {
	var t Tally
	count := func(order string, n *int64) {
		if !ours[order] {
			atomic.AddInt64(n, 1)
		}
	}
	var done atomic.Int64
	tick := func(total int) {
		if progress != nil {
			progress(int(done.Add(1)), total)
		}
	}
	// stoppedAt is the error of a run stopped before its every order was taken, or nil.
	stoppedAt := func(total int) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w with %d of %d orders done, those in hand finished (run it again to do the rest): %w", ErrStopped, done.Load(), total, err)
		}
		return nil
	}
	// resolve reports false for an order it left to the refund pass, which counts it.
	run := func(n, total int, resolve func(ctx context.Context, i int) (bool, error)) error {
		// A stop (an operator's ^C, the api's bulk timeout) starts no more orders and lets those
		// in hand finish: cut in the middle, an order was refunded in the store with its units
		// still held in Redis, and the run failed with its announcement's error, not the stop.
		work, release := events.Drain(ctx, 0, o.logger(), "the orders in hand of campaign "+id)
		defer release()
		g, gctx := errgroup.WithContext(work)
		g.SetLimit(bulkWorkers)
		stopped := false
		for i := range n {
			if stopped = ctx.Err() != nil; stopped {
				break
			}
			g.Go(func() error {
				resolved, err := resolve(gctx, i)
				if err == nil && resolved {
					tick(total)
				}
				return err
			})
		}
		if err := g.Wait(); err != nil || !stopped {
			return err
		}
		return stoppedAt(total) // counting those in hand, finished
	}
	// An order whose Redis record cannot be parsed is left as it is, as the sweeper and the
	// dead-letter handler leave it, and named once the rest is done: stopping at it stopped the
	// run at the same record every time it was run again, and a cancel then refunded nobody.
	var leftMu sync.Mutex
	var left []error
	// failed ends a worker's order on err: the run goes on past a malformed record, left and
	// named, and stops at any other error.
	failed := func(err error) (bool, error) {
		if !errors.Is(err, lua.ErrMalformed) {
			return false, err
		}
		leftMu.Lock()
		defer leftMu.Unlock()
		left = append(left, err)
		return true, nil
	}
	end := func(err error) (Tally, error) {
		if len(left) > 0 {
			err = errors.Join(err, fmt.Errorf("%d orders left as they are, their reservation records in Redis malformed: "+
				"mend each record, then run `seckill compensate --order` for it: %w", len(left), errors.Join(left...)))
		}
		return t, err
	}
	var held []string
	var err error
	if pending {
		// Every reservation, whatever its deadline: more than a campaign's keys can hold is
		// not a concern (one id is tens of bytes).
		if held, err = o.Sales.Pending(ctx, id, 1<<30); err != nil {
			return t, err
		}
	}
	var orders []store.Order
	if confirmed && !pending {
		if orders, err = o.refundable(ctx, id); err != nil {
			return t, err
		}
	}
	total := len(held) + len(orders)
	handedOn := make([]bool, len(held)) // each worker writes its own
	err = run(len(held), total, func(ctx context.Context, i int) (bool, error) {
		res, err := o.Redis.Reservation(ctx, held[i])
		if errors.Is(err, lua.ErrNoReservation) {
			count(held[i], &t.Unchanged) // trimmed after its release: long final
			return true, nil
		}
		if err != nil {
			return failed(err)
		}
		ord, released, err := o.fail(ctx, reservationEvent(res), events.ReasonOperator, "operator", store.Fence{})
		if err != nil {
			return failed(err)
		}
		switch {
		case ord.Status == events.Failed && released:
			count(held[i], &t.Released)
		case confirmed && (ord.Status == events.Confirmed || ord.Status == events.Paid):
			// Stored by the consumer before its confirm reached Redis: the refund pass reads
			// it from the store, and counts it there.
			handedOn[i] = true
			return false, nil
		default:
			// Refunded in the store before this run (Fail finished its Redis half), or final.
			count(held[i], &t.Unchanged)
		}
		return true, nil
	})
	if err != nil || !confirmed {
		return end(err)
	}
	if pending {
		if err := stoppedAt(total); err != nil {
			return end(err)
		}
		// Read now, so that the orders the consumer confirmed while the pending ones were
		// released are refunded too.
		if orders, err = o.refundable(ctx, id); err != nil {
			return end(err)
		}
		// Those the pending pass handed on are in total already; one no longer listed (another
		// run refunded it meanwhile, to the end) is done, changed by that run.
		handed := map[string]bool{}
		for i, id := range held {
			if handedOn[i] {
				handed[id] = true
			}
		}
		for _, ord := range orders {
			if handed[ord.OrderID] {
				delete(handed, ord.OrderID)
			} else {
				total++
			}
		}
		for id := range handed {
			count(id, &t.Unchanged)
			tick(total)
		}
	}
	err = run(len(orders), total, func(ctx context.Context, i int) (bool, error) {
		ord := orders[i]
		if ord.Status == events.Refunded {
			// Its refund was stored before this run, and Redis holds its units until this
			// gives them back.
			if _, err := o.refundReservation(ctx, ord, "operator"); err != nil {
				return failed(err)
			}
			count(ord.OrderID, &t.Unchanged)
			return true, nil
		}
		// Counted by the store's change, not by Redis's: the compensator's sweep finishes a
		// stored refund whose Redis half is still to run (Store.UnfinishedRefunds), and may
		// give its units back first. Counted even when its Redis half failed here: it is
		// refunded, and no later run counts it.
		_, refunded, err := o.refundOnce(ctx, ord.OrderID)
		switch {
		case refunded:
			count(ord.OrderID, &t.Refunded)
		case err == nil:
			count(ord.OrderID, &t.Unchanged)
		}
		if err != nil {
			return failed(err)
		}
		return true, nil
	})
	return end(err)
}

// refundable returns the campaign's orders a refund of its confirmed ones resolves: those
// confirmed or paid, and those whose refund stopped before Redis gave their units back.
func (o *Operator) refundable(ctx context.Context, id string) ([]store.Order, error) {
	orders, err := o.Campaigns.Confirmed(ctx, id)
	if err != nil {
		return nil, err
	}
	unfinished, err := o.Campaigns.Refunding(ctx, id)
	if err != nil || len(unfinished) == 0 {
		return orders, err
	}
	// An order refunded by another run between the two reads is in both: keep its newer row,
	// so it is resolved and counted once.
	newer := make(map[string]bool, len(unfinished))
	for _, ord := range unfinished {
		newer[ord.OrderID] = true
	}
	kept := orders[:0]
	for _, ord := range orders {
		if !newer[ord.OrderID] {
			kept = append(kept, ord)
		}
	}
	return append(kept, unfinished...), nil
}
