package api

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
)

// campaignTTL is how long an api answers GET /v1/campaigns/{id} from the campaign's stored row
// and paid units as it last read them. At a sale's start every buyer's page polls its campaign:
// read each time, each poll was two PostgreSQL queries, 157–203 µs a poll against 19–26 µs kept
// (BenchmarkGetCampaign, side by side), and the polls took the store from the consumers' writes
// of the sale's orders. The units left come from Redis on every request; what the cache may hold
// back for this long is a change made at another api or by the seckill command (a close, an
// extension, added stock) and the count of units sold and paid, which the store itself learns
// behind the sale.
const campaignTTL = time.Second

// storedCampaign is what the store says of a campaign: its row and its paid units.
type storedCampaign struct {
	camp store.Campaign
	paid int64
}

// campaignCache keeps each campaign's storedCampaign for campaignTTL, and that a campaign was
// not found for as long: a crowd polling, or buying, a campaign not created yet (a page out
// before its sale, a link with a typo) would otherwise reach the store at every request.
// Concurrent misses of one campaign share one read; a store down is not kept.
type campaignCache struct {
	read  func(ctx context.Context, id string) (storedCampaign, error)
	group singleflight.Group
	// unknown budgets the reads of ids the cache does not hold as a campaign: ids of no
	// campaign are anyone's to make up, and each new one was a store read, up to the
	// per-address limit (2,000 a second by default) for every client.
	unknown *rate.Limiter
	mu      sync.Mutex
	m       map[string]cachedCampaign
	// gen counts forgets: a read that started before one keeps nothing, for it may have read
	// the campaign before the change that was forgotten.
	gen uint64
	// sweepAt is when keep next drops the entries that ended: once a campaignTTL rather than at
	// every keep, for ids of no campaign are anyone's to choose, and a sweep of the entries of
	// thousands of them at each miss would cost their square.
	sweepAt time.Time
}

type cachedCampaign struct {
	storedCampaign
	err   error // the campaign was not found
	until time.Time
}

// campaignReadTimeout bounds a shared read: it runs on for the requests still waiting when the
// one that started it goes away.
const campaignReadTimeout = 5 * time.Second

func newCampaignCache(read func(ctx context.Context, id string) (storedCampaign, error)) *campaignCache {
	return &campaignCache{read: read, m: map[string]cachedCampaign{}, unknown: rate.NewLimiter(unknownReads, unknownReads)}
}

// unknownReads is how many store reads a second an api spends on ids it does not know to be
// campaigns: a new campaign's first view, and made-up ids. A sale has a handful of campaigns,
// each read once a campaignTTL once known, so this is spent only by ids that come and go; past
// it, an unknown id is answered 503 (try again) without asking the store, and a campaign of
// this api's own making is known at once (forget keeps it out of the budget).
const unknownReads = 100

// knownFor is how long after its entry expired a campaign still counts as known: a sale's
// page is looked at far more often than that while the sale lasts, and the entries are only
// those of real campaigns.
const knownFor = 10 * time.Minute

// errUnknownBudget refuses a lookup past unknownReads.
var errUnknownBudget = events.Errorf(events.Unavailable, "too many lookups of unknown campaigns right now; try again shortly")

// get returns campaign id's storedCampaign, read at most campaignTTL ago.
func (c *campaignCache) get(ctx context.Context, id string) (storedCampaign, error) {
	c.mu.Lock()
	e, ok := c.m[id]
	c.mu.Unlock()
	if ok && time.Now().Before(e.until) {
		return e.storedCampaign, e.err
	}
	known := ok && e.err == nil
	ch := c.group.DoChan(id, func() (any, error) {
		if !known && !c.unknown.Allow() {
			return storedCampaign{}, errUnknownBudget
		}
		c.mu.Lock()
		gen := c.gen
		c.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), campaignReadTimeout)
		defer cancel()
		sc, err := c.read(rctx, id)
		if err == nil || events.ErrorCode(err) == events.CampaignNotFound {
			c.keep(id, sc, err, gen)
		}
		return sc, err
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return storedCampaign{}, r.Err
		}
		return r.Val.(storedCampaign), nil
	case <-ctx.Done():
		return storedCampaign{}, ctx.Err()
	}
}

// keep stores sc, or notFound, read from generation gen, for campaignTTL, and drops the
// entries nobody asked for since theirs ended: the map holds the ids of no campaign looked at
// in the last two campaignTTLs, and the campaigns looked at in the last knownFor.
func (c *campaignCache) keep(id string, sc storedCampaign, notFound error, gen uint64) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if !now.Before(c.sweepAt) {
		for k, e := range c.m {
			// An id of no campaign goes once it expires; a campaign's entry stays knownFor
			// longer, due for a read but known, so a flood of made-up ids, which spends the
			// budget of unknown ids, does not lock out a sale this api has shown.
			if !now.Before(e.until) && (e.err != nil || !now.Before(e.until.Add(knownFor))) {
				delete(c.m, k)
			}
		}
		c.sweepAt = now.Add(campaignTTL)
	}
	c.m[id] = cachedCampaign{storedCampaign: sc, err: notFound, until: now.Add(campaignTTL)}
}

// forget drops what is kept of campaign id, changed through this api: its next GET reads the
// store, outside the budget of unknown ids, for this api knows it is a campaign.
func (c *campaignCache) forget(id string) {
	c.group.Forget(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	// Known, and due for a read: expired now, not at the zero time, which the sweep in keep
	// would read as expired long ago and drop, back into the budget of unknown ids.
	c.m[id] = cachedCampaign{until: time.Now()}
}
