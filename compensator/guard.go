package compensator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// guard watches Redis for lost data and rebuilds it from the store.
//
// The epoch key holds "<run id>:<random>" of the Redis server that the last rebuild wrote to. A
// restart (the run id changes), a failover to a replica (another run id) or an empty Redis (no
// epoch) all mean recent writes may be gone, so every campaign is frozen and rebuilt. A restart
// that lost nothing costs a freeze of a few seconds; guessing which restarts lost writes is what
// this refuses to do.
func (c *Compensator) guard(ctx context.Context) error {
	t := time.NewTicker(c.cfg.GuardInterval)
	defer t.Stop()
	for {
		if err := c.CheckRedis(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("redis guard", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// CheckRedis does one round of the guard: it rebuilds Redis from the store if Redis lost data
// (unless another compensator is at it), else puts on sale what the store has and Redis lacks.
// Run is what calls it, every GuardInterval; `seckill dev` calls it once before it serves.
func (c *Compensator) CheckRedis(ctx context.Context) error {
	intact, err := c.checkEpoch(ctx)
	if err != nil || !intact {
		return err
	}
	return c.reconcile(ctx, time.Now())
}

// checkEpoch rebuilds Redis if its epoch is not its own server's, unless another compensator is
// rebuilding already. It reports whether the epoch was intact: Redis has every campaign it was
// given.
func (c *Compensator) checkEpoch(ctx context.Context) (intact bool, err error) {
	runID, epoch, err := c.rebuilder.Identity(ctx, c.cfg.Topics.Prefix)
	if err != nil {
		return false, err
	}
	if strings.HasPrefix(epoch, runID+":") {
		return true, nil
	}
	lock, err := c.locker.TryLock(ctx, c.cfg.Topics.Prefix+".rebuild", 10*time.Second)
	if errors.Is(err, lua.ErrLockHeld) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return false, lock.Hold(ctx, func(ctx context.Context) error {
		// Another compensator may have finished a rebuild between the check and the lock.
		if _, epoch, err := c.rebuilder.Identity(ctx, c.cfg.Topics.Prefix); err != nil || strings.HasPrefix(epoch, runID+":") {
			return err
		}
		if epoch == "" {
			c.cfg.Logger.Info("redis holds no epoch for this deployment (a first start, or a redis that lost its data): rebuilding every campaign from the store",
				"run_id", runID)
		} else {
			c.cfg.Logger.Warn("redis restarted or was replaced since the last rebuild: freezing every campaign to rebuild it from the store",
				"run_id", runID, "epoch", epoch)
		}
		start := time.Now()
		n, err := c.Rebuild(ctx)
		if err != nil {
			return err
		}
		c.cfg.Logger.Info("redis rebuilt from the store; campaigns back on sale", "campaigns", n, "took", time.Since(start).Round(time.Millisecond))
		return c.rebuilder.SetEpoch(ctx, c.cfg.Topics.Prefix, runID+":"+events.NewID())
	})
}

// reconcile puts on sale every campaign the store has and Redis was never given: one whose
// creation stopped between its two steps (an api that died, a Redis that did not answer). Only
// those: a campaign that was on sale and is missing from Redis was lost with Redis's data, and
// only a rebuild, behind its freeze, may put it back (the epoch this round found intact may be
// gone a moment later). Loading changes nothing where Redis has the campaign. A campaign that
// has ended is left alone.
func (c *Compensator) reconcile(ctx context.Context, now time.Time) error {
	cs, err := c.snapshots.Campaigns(ctx)
	if err != nil {
		return err
	}
	for _, camp := range cs {
		if camp.OnSale || camp.EndsAtMs > 0 && camp.EndsAtMs <= now.UnixMilli() {
			continue
		}
		lc := RedisCampaign(camp)
		loaded, err := c.rebuilder.LoadCampaign(ctx, lc)
		if err != nil {
			return err
		}
		if err := c.snapshots.MarkOnSale(ctx, camp.ID); err != nil {
			return err
		}
		if loaded {
			c.cfg.Logger.Warn("campaign was in the store but never put on sale: put on sale", "campaign", camp.ID, "remaining", lc.Remaining)
		}
	}
	return nil
}

// retired reports whether camp ended more than the retention ago: Redis holds nothing of it.
func (c *Compensator) retired(camp store.Campaign, now time.Time) bool {
	return camp.EndsAtMs > 0 && now.After(time.UnixMilli(camp.EndsAtMs).Add(c.cfg.Retention))
}

// RedisCampaign is the campaign c as Redis sells it: its units not yet sold, its limit and window.
func RedisCampaign(c store.Campaign) lua.Campaign {
	lc := lua.Campaign{ID: c.ID, Remaining: c.Stock - c.Sold, Limit: c.PerUserLimit, StartsAt: time.UnixMilli(c.StartsAtMs)}
	if c.EndsAtMs > 0 {
		lc.EndsAt = time.UnixMilli(c.EndsAtMs)
	}
	return lc
}

// Rebuilder is the part of Redis a rebuild writes.
type Rebuilder interface {
	LoadCampaign(ctx context.Context, c lua.Campaign) (bool, error)
	Identity(ctx context.Context, prefix string) (runID, epoch string, err error)
	SetEpoch(ctx context.Context, prefix, epoch string) error
	Freeze(ctx context.Context, campaigns ...string) error
	Restore(ctx context.Context, c lua.Campaign, confirmed []lua.Reservation) error
}

// Snapshotter is the part of the store a rebuild reads.
type Snapshotter interface {
	Campaigns(ctx context.Context) ([]store.Campaign, error)
	Holdings(ctx context.Context, campaign string) (map[string]int64, error)
	Confirmed(ctx context.Context, campaign string) ([]store.Order, error)
	MarkOnSale(ctx context.Context, id string) error
}

var (
	_ Rebuilder   = (*lua.Redis)(nil)
	_ Snapshotter = (*store.Store)(nil)
)

// Rebuild freezes every campaign, waits until the store holds every order whose event reached
// Kafka, and restores each campaign's Redis state from the store: remaining = stock - sold, the
// buyers' holdings, and the records of confirmed orders (so refunds still give stock back). It
// returns how many campaigns it restored.
func (c *Compensator) Rebuild(ctx context.Context) (int, error) {
	cs, err := c.snapshots.Campaigns(ctx)
	if err != nil {
		return 0, err
	}
	var ids []string
	for _, camp := range cs {
		if !c.retired(camp, time.Now()) {
			ids = append(ids, camp.ID)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if err := c.rebuilder.Freeze(ctx, ids...); err != nil {
		return 0, err
	}
	// Purchases reserved before the loss may still be producing their events; once the grace
	// has passed, each either reached Kafka or was failed in the store by the api.
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(c.cfg.RebuildGrace):
	}
	if err := c.waitConsumed(ctx); err != nil {
		return 0, err
	}
	// Read campaigns again: sold moved while the consumer caught up.
	if cs, err = c.snapshots.Campaigns(ctx); err != nil {
		return 0, err
	}
	for _, camp := range cs {
		if !slices.Contains(ids, camp.ID) {
			continue // created after the freeze: loaded fresh by its creation
		}
		holdings, err := c.snapshots.Holdings(ctx, camp.ID)
		if err != nil {
			return 0, err
		}
		orders, err := c.snapshots.Confirmed(ctx, camp.ID)
		if err != nil {
			return 0, err
		}
		confirmed := make([]lua.Reservation, len(orders))
		for i, o := range orders {
			confirmed[i] = lua.Reservation{OrderID: o.OrderID, User: o.UserID, Quantity: int(o.Quantity)}
		}
		lc := RedisCampaign(camp)
		lc.Holdings = holdings
		if err := c.rebuilder.Restore(ctx, lc, confirmed); err != nil {
			return 0, err
		}
	}
	return len(ids), nil
}

// waitConsumed waits until the consumer group has committed every OrderRequested event.
func (c *Compensator) waitConsumed(ctx context.Context) error {
	adm := kadm.NewClient(c.cl)
	last := time.Now()
	for {
		lag, err := events.Lag(ctx, adm, c.cfg.Topics.Requested, c.cfg.Topics.ConsumerGroup())
		if err == nil && lag == 0 {
			return nil
		}
		if time.Since(last) > 5*time.Second {
			last = time.Now()
			c.cfg.Logger.Info("rebuild waits for the consumer to catch up", "lag", lag, "err", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rebuild: waiting for the consumer: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
