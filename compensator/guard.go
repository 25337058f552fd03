package compensator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// guard watches Redis for lost data and rebuilds what was lost from the store.
//
// Every campaign on sale records the run id of the Redis server that last wrote it whole (its
// generation, lua.Generation). A restart (the run id changes), a failover to a replica (another
// run id) or an empty Redis (no campaign) all mean recent writes may be gone, so the campaigns
// it touched are frozen and rebuilt; on a Cluster, those of one shard, while the others sell on.
// A restart that lost nothing costs a freeze of a few seconds; guessing which restarts lost
// writes is what this refuses to do. A Cluster reshard, which moves a campaign's keys whole to
// another primary, is no loss: the guard records the new primary instead (resharded).
func (c *Compensator) guard(ctx context.Context) error {
	t := time.NewTicker(c.cfg.GuardInterval)
	defer t.Stop()
	for {
		// A round's error may be the store's too: "rounds succeed again", not "redis answers".
		switch err := c.guardRound(ctx); {
		case err == nil:
			c.guardDown.Answered(c.cfg.Logger, "redis guard: its rounds succeed again")
		case ctx.Err() == nil:
			c.guardDown.Failed(c.cfg.Logger, "redis guard: rounds failing; what redis loses meanwhile is rebuilt once one succeeds", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// guardRound is a round of the guard (CheckRedis) for a guard that may be told to stop mid-round
// by stop. A rebuild it has started runs on a context of its own, which outlives stop by the
// drain's bound at most: cut between its freeze and its restore, it would leave the campaigns
// frozen, their sales down until another round rebuilds them.
func (c *Compensator) guardRound(stop context.Context) error {
	work, release := events.Drain(stop, c.cfg.DrainTimeout, c.cfg.Logger, "the redis rebuild in hand")
	defer release()
	return c.checkRedis(work, stop)
}

// CheckRedis does one round of the guard: it rebuilds from the store every campaign whose Redis
// data may be lost (unless another compensator is at it), and puts on sale what the store has
// and Redis was never given. Run calls it every GuardInterval; `seckill dev` calls it once
// before it serves. A shard that does not answer is an error after the other shards are done.
// The end of ctx ends the round, even a rebuild half way (its campaigns stay frozen for the next
// round to rebuild).
func (c *Compensator) CheckRedis(ctx context.Context) error {
	return c.checkRedis(ctx, ctx)
}

// checkRedis is CheckRedis for a guard that may be told to stop mid-round: its reads and its
// small writes run on stop, which cuts them, and the next round of any compensator does them
// again. A rebuild runs on work, so one that has started is finished; stop only keeps one from
// starting.
func (c *Compensator) checkRedis(work, stop context.Context) error {
	cs, err := c.snapshots.Campaigns(stop)
	if err != nil {
		return err
	}
	now := time.Now()
	var watched []string // on sale and not retired: Redis must have them whole
	for _, camp := range cs {
		if camp.OnSale && !c.retired(camp, now) {
			watched = append(watched, camp.ID)
		}
	}
	gens, genErr := c.rebuilder.Generations(stop, watched)
	// After the campaigns are read: a primary that is still the same process now did not
	// restart while it held what they read.
	masters, mastersErr := c.rebuilder.Masters(stop)
	c.mastersMu.Lock()
	before := c.masters
	c.masters = masters
	c.mastersMu.Unlock()
	var lost []string
	var rehomeErrs []error
	for _, id := range watched {
		g, ok := gens[id]
		switch {
		case !ok:
		case resharded(g, before, masters):
			if _, err := c.rebuilder.Rehome(stop, id, g.Recorded, g.Server); err != nil {
				rehomeErrs = append(rehomeErrs, err)
				continue
			}
			c.cfg.Logger.Info("campaign moved whole to another primary by a reshard: nothing to rebuild",
				"campaign", id, "run_id", g.Server, "was", g.Recorded)
		case unsellable(g):
			lost = append(lost, id)
		}
	}
	// A lost campaign is counted too: the rebuild below freezes it, then may wait minutes for
	// the consumer, and this round's figure is the one scraped meanwhile. Set before the
	// rebuild: a rebuild that hangs stays counted.
	campaignsFrozen.Set(float64(len(lost)))
	var rebuildErr error
	if len(lost) > 0 {
		rebuildErr = c.rebuildLost(work, stop, lost)
	}
	return errors.Join(genErr, mastersErr, errors.Join(rehomeErrs...), rebuildErr, c.reconcile(stop, cs, now))
}

// resharded reports whether g's keys are on another primary than the one that wrote them only
// because a Cluster reshard moved them there, whole: the server that holds them (Server, read
// on it with the meta) and the one that wrote them (Recorded) both served slots at the guard's
// previous round (before), and the writer still serves slots now (now, read after g), each the
// same process (the same run id).
//
// A reshard moves keys with MIGRATE, which deletes them from the source only once the target
// holds them: neither primary lost a write. A loss puts them on another run id otherwise: a
// restart changes the primary's run id (so Recorded is no primary now, or Server was none
// before), and a failover promotes a replica, which served no slot before, in place of its
// primary, which serves none after. Like the run id check itself, this takes the rounds to be
// closer together than two failovers. A compensator that just started, with no previous round,
// rebuilds, and so does a reshard onto a primary that served no slot at the previous round (a
// node just added): a freeze for nothing, as before.
func resharded(g lua.Generation, before, now map[string]bool) bool {
	return g.Exists && !g.Frozen && g.Recorded != g.Server &&
		before[g.Recorded] && before[g.Server] && now[g.Recorded]
}

// unsellable reports whether a campaign needs a rebuild before it sells again: its data may be
// lost, or it is frozen. Only the holder of the rebuild lock freezes, and holds the lock until
// it restores, so a campaign found frozen with the lock free was left by a rebuild that died (or
// was paused past its lease) between its Freeze and its Restore: it would stay frozen for good,
// as nothing else restores it and its run id is no longer the lost one.
func unsellable(g lua.Generation) bool { return g.Lost() || g.Frozen }

// rebuildLost rebuilds the campaigns whose data Redis may have lost, or that a rebuild left
// frozen, unless another compensator is rebuilding already. Its I/O runs on work; once stop is
// done it freezes nothing, and a rebuild that has frozen goes on to its restore.
//
// The lock is held on work too, so its lease is renewed while a stopping compensator finishes,
// and no other compensator freezes the campaigns again meanwhile. A rebuild that writes after
// its lease lapsed anyway (a pause longer than the lease, which Hold's watchdog notices only at
// its next renewal) is safe: Freeze wrote this rebuild's mark in each campaign's meta, and every
// step of Restore (restore_clear.lua, restore_fill.lua, restore_ended.lua, restore.lua) first
// checks that the mark is still there and otherwise writes nothing. A later rebuild's Freeze
// replaced it, and that rebuild's restore lifted it, so the late one changes nothing
// (lua.ErrNotFrozenByThis).
func (c *Compensator) rebuildLost(work, stop context.Context, lost []string) error {
	lock, err := c.locker.TryLock(work, c.cfg.Topics.Prefix+".rebuild", 10*time.Second)
	if errors.Is(err, lua.ErrLockHeld) {
		return nil
	}
	if err != nil {
		return err
	}
	return lock.Hold(work, func(ctx context.Context) error {
		// Another compensator may have rebuilt them between the check and the lock. One whose
		// shard does not answer now is left to a later round, and its error returned once the
		// others are rebuilt: they must not sell on from what their Redis lost meanwhile.
		gens, genErr := c.rebuilder.Generations(ctx, lost)
		lost = slices.DeleteFunc(lost, func(id string) bool {
			g, ok := gens[id]
			return !ok || !unsellable(g)
		})
		if len(lost) == 0 || stop.Err() != nil {
			return genErr
		}
		switch g := gens[lost[0]]; {
		case !g.Exists:
			c.cfg.Logger.Info("redis lacks campaigns that are on sale (a first start, or a redis that lost its data): rebuilding them from the store",
				"campaigns", len(lost), "run_id", g.Server)
		case !g.Lost():
			c.cfg.Logger.Warn("campaigns left frozen by a rebuild that stopped half way: rebuilding them from the store",
				"campaigns", len(lost))
		default:
			c.cfg.Logger.Warn("redis restarted or failed over since these campaigns were written: freezing them to rebuild them from the store",
				"campaigns", len(lost), "run_id", g.Server, "was", g.Recorded)
		}
		start := time.Now()
		if err := c.Rebuild(ctx, lost); err != nil {
			return errors.Join(genErr, err)
		}
		c.cfg.Logger.Info("redis rebuilt from the store; campaigns back on sale", "campaigns", len(lost), "took", time.Since(start).Round(time.Millisecond))
		return genErr
	})
}

// reconcile puts on sale every campaign of cs that the store has and Redis was never given: one
// whose creation stopped between its two steps (an api that died, a Redis that did not answer).
// Only those: a campaign that was on sale and is missing from Redis was lost with Redis's data,
// and only a rebuild, behind its freeze, may put it back. Loading changes nothing where Redis
// has the campaign. A campaign that has ended is left alone. One whose shard does not answer
// is an error once the others are done: it must not keep them off sale while it is down.
func (c *Compensator) reconcile(ctx context.Context, cs []store.Campaign, now time.Time) error {
	var errs []error
	for _, camp := range cs {
		if camp.OnSale || camp.Over(now.UnixMilli()) {
			continue
		}
		lc := RedisCampaign(camp)
		loaded, err := c.rebuilder.LoadCampaign(ctx, lc)
		if err == nil {
			err = c.snapshots.MarkOnSale(ctx, camp.ID)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if loaded {
			c.cfg.Logger.Warn("campaign was in the store but never put on sale: put on sale", "campaign", camp.ID, "remaining", lc.Remaining)
		}
	}
	return errors.Join(errs...)
}

// retired reports whether camp ended more than the retention ago: Redis holds nothing of it.
func (c *Compensator) retired(camp store.Campaign, now time.Time) bool {
	return camp.EndsAtMs > 0 && now.After(time.UnixMilli(camp.EndsAtMs).Add(c.cfg.Retention))
}

// RedisCampaign is the campaign c as Redis sells it: its units not yet sold, its limit and window.
func RedisCampaign(c store.Campaign) lua.Campaign {
	lc := lua.Campaign{ID: c.ID, Remaining: c.Stock - c.Sold, Limit: c.PerUserLimit, StartsAt: time.UnixMilli(c.StartsAtMs),
		Stock: c.Stock, Version: c.Version}
	if c.EndsAtMs > 0 {
		lc.EndsAt = time.UnixMilli(c.EndsAtMs)
	}
	return lc
}

// Rebuilder is the part of Redis a rebuild writes.
type Rebuilder interface {
	LoadCampaign(ctx context.Context, c lua.Campaign) (bool, error)
	Generations(ctx context.Context, campaigns []string) (map[string]lua.Generation, error)
	Masters(ctx context.Context) (map[string]bool, error)
	Rehome(ctx context.Context, campaign, from, to string) (bool, error)
	Freeze(ctx context.Context, campaigns ...string) (string, error)
	Restore(ctx context.Context, mark string, c lua.Campaign, records []lua.Reservation) error
}

// Snapshotter is the part of the store a rebuild reads.
type Snapshotter interface {
	Campaigns(ctx context.Context) ([]store.Campaign, error)
	WhileHeld(ctx context.Context, campaign string, endedSince time.Time, fn func(store.Held) error) error
	MarkOnSale(ctx context.Context, id string) error
}

var (
	_ Rebuilder   = (*lua.Redis)(nil)
	_ Snapshotter = (*store.Store)(nil)
)

// Rebuild freezes the campaigns ids, waits until the store holds every order whose event
// reached Kafka, and restores each campaign's Redis state from the store: remaining = stock -
// sold, the buyers' holdings, the records of confirmed orders (so refunds still give stock
// back), and those of the orders that ended within the retention (so a keyed retry of one finds
// it ended instead of reserving its units again).
//
// The rebuild lock keeps a second compensator out only while this one renews its lease: one
// paused past it (a GC pause, a stalled VM) may wake up to find another rebuilding, or done. The
// freeze's mark settles which one writes each campaign: the last to freeze, and only until it
// restores (lua.ErrNotFrozenByThis for the other).
func (c *Compensator) Rebuild(ctx context.Context, ids []string) error {
	// A freeze that failed for some campaigns froze the others with its mark, which only this
	// rebuild may lift: they are restored, and the others are not this rebuild's.
	mark, freezeErr := c.rebuilder.Freeze(ctx, ids...)
	if mark == "" {
		return freezeErr
	}
	// Purchases reserved before the loss may still be producing their events; once the grace
	// has passed, each either reached Kafka or was failed in the store by the api.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(c.cfg.RebuildGrace):
	}
	if err := c.WaitConsumed(ctx); err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	// Each campaign is read now (sold moved while the consumer caught up) and restored while the
	// store holds its lock: an expiry, a refund or a cancel of it that commits meanwhile lands
	// on the restored sale, not on the frozen one the restore then overwrites.
	//
	// One campaign that cannot be restored, or is no longer this rebuild's, does not keep the
	// others frozen: each holds this rebuild's mark until it is restored, and none but this
	// rebuild may lift it, so returning at the first left the rest to a later round, which froze
	// them again and waited out the grace and the consumer once more.
	errs := []error{freezeErr}
	for _, id := range ids {
		// Redis trims an ended order's record a retention after it ended: those before are not
		// restored.
		err := c.snapshots.WhileHeld(ctx, id, time.Now().Add(-c.cfg.Retention), func(h store.Held) error {
			lc := RedisCampaign(h.Campaign)
			lc.Holdings = h.Holdings
			return c.rebuilder.Restore(ctx, mark, lc, records(h))
		})
		if errors.Is(err, lua.ErrNotFrozenByThis) {
			// Another rebuild froze it since (our lease ran out while we worked) and restores
			// it, or its keys left Redis (the sweeper dropped it, retired meanwhile). Not a
			// failure of ours to report; the other campaigns may still be ours.
			c.cfg.Logger.Warn("campaign no longer frozen by this rebuild; leaving it", "campaign", id)
			continue
		}
		if err != nil && events.ErrorCode(err) != events.CampaignNotFound {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// records are the reservation records Redis keeps of what h holds: one per confirmed or paid
// order, and one per order that gave its units back (h holds those that ended within the
// retention: Redis had trimmed the others), in the state release.lua left it in.
func records(h store.Held) []lua.Reservation {
	out := make([]lua.Reservation, 0, len(h.Orders)+len(h.Ended))
	for _, o := range h.Orders {
		out = append(out, lua.Reservation{OrderID: o.OrderID, User: o.UserID, Quantity: int(o.Quantity), State: lua.StateConfirmed})
	}
	for _, o := range h.Ended {
		state := lua.StateReleased // a failed order's
		switch o.Status {
		case events.Refunded:
			state = lua.StateRefunded
		case events.Expired:
			state = lua.StateExpired
		}
		out = append(out, lua.Reservation{OrderID: o.OrderID, User: o.UserID, Quantity: int(o.Quantity),
			State: state, Ended: time.UnixMilli(o.UpdatedAtMs)})
	}
	return out
}

// WaitConsumed waits until the consumer group has committed every OrderRequested event produced
// before it was called. Not a lag of zero: with the other campaigns selling, the topic is never
// still, and the rebuild of one shard's campaigns waited 20 s for a moment without a purchase.
func (c *Compensator) WaitConsumed(ctx context.Context) error {
	adm := kadm.NewClient(c.cl)
	last := time.Now()
	var ends kadm.ListedOffsets
	for {
		var lag int64
		var err error
		if ends == nil {
			ends, err = events.EndOffsets(ctx, adm, c.cfg.Topics.Requested)
		}
		if err == nil {
			lag, err = events.LagBehind(ctx, adm, ends, c.cfg.Topics.ConsumerGroup())
		}
		if err == nil && lag == 0 {
			return nil
		}
		if time.Since(last) > 5*time.Second {
			last = time.Now()
			c.cfg.Logger.Info("waiting for the consumer to catch up", "lag", lag, "err", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the consumer: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
