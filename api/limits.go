package api

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/seckill/seckill/events"
)

// Limit is a token bucket: Rate requests a second on average, Burst at once. The zero Limit
// limits nothing.
type Limit struct {
	Rate  float64
	Burst int
}

// limiter keeps one token bucket per key (a buyer, an IP address) in bounded memory.
type limiter struct {
	limit   Limit
	maxKeys int
	what    string // "buyer" or "address", for the message

	mu        sync.Mutex
	buckets   map[string]*rate.Limiter
	lastSweep time.Time
}

// sweepEvery is how often a limiter forgets the buckets that have filled up again: a full bucket
// is the same as none, so forgetting it changes no answer.
const sweepEvery = time.Minute

func newLimiter(l Limit, maxKeys int, what string) *limiter {
	if l.Rate > 0 && l.Burst < 1 {
		l.Burst = 1
	}
	return &limiter{limit: l, maxKeys: maxKeys, what: what, buckets: map[string]*rate.Limiter{}}
}

// allow takes a token from key's bucket. When there is none, it reports how long until there
// will be.
func (l *limiter) allow(key string, now time.Time) (bool, time.Duration) {
	if l == nil || l.limit.Rate <= 0 {
		return true, 0
	}
	l.mu.Lock()
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= l.maxKeys || now.Sub(l.lastSweep) > sweepEvery {
			l.sweep(now)
		}
		b = rate.NewLimiter(rate.Limit(l.limit.Rate), l.limit.Burst)
		l.buckets[key] = b
	}
	l.mu.Unlock()
	r := b.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// sweep forgets full buckets and, if that is not enough to make room, arbitrary ones: a
// forgotten bucket starts full again, so under a flood of keys the limit errs on the lenient
// side instead of growing without bound. l.mu is held.
func (l *limiter) sweep(now time.Time) {
	l.lastSweep = now
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.limit.Burst) {
			delete(l.buckets, k)
		}
	}
	for k := range l.buckets { // map order is random enough to spread the leniency
		if len(l.buckets) < l.maxKeys*9/10 {
			break
		}
		delete(l.buckets, k)
	}
}

// size returns the number of buckets held.
func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// charge takes a token for key, or answers 429 rate_limited with Retry-After.
func (l *limiter) charge(c echo.Context, key string) error {
	ok, wait := l.allow(key, time.Now())
	if ok {
		return nil
	}
	secs := int(math.Ceil(wait.Seconds()))
	c.Response().Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	return events.Errorf(events.RateLimited, "too many requests from this %s; retry after %d s", l.what, max(secs, 1))
}

// byAddress applies the per-address limit to every request under /v1, matched or not; the
// operators' endpoints are left alone, so probes and scrapes are never refused.
func (s *Server) byAddress(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !strings.HasPrefix(c.Request().URL.Path, "/v1/") {
			return next(c)
		}
		if err := s.ipLimit.charge(c, c.RealIP()); err != nil {
			return err
		}
		return next(c)
	}
}

// soldOut remembers, for a short while, that a campaign has fewer units left than some
// quantity, so that this process refuses the buyers of a sold-out campaign without asking Redis.
// Stock comes back only through a release, so the memory lasts ttl, or until this process
// releases units of the campaign itself.
type soldOut struct {
	ttl time.Duration // <= 0: remember nothing

	mu sync.Mutex
	m  map[string]soldOutMark
}

type soldOutMark struct {
	below int // the campaign had fewer than this many units left
	until time.Time
}

func newSoldOut(ttl time.Duration) *soldOut {
	return &soldOut{ttl: ttl, m: map[string]soldOutMark{}}
}

// refuses reports whether a purchase of qty units is known to be sold out.
func (f *soldOut) refuses(campaign string, qty int, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.m[campaign]
	if ok && !now.Before(m.until) {
		delete(f.m, campaign)
		return false
	}
	return ok && qty >= m.below
}

// mark records that Redis refused qty units of campaign as sold out.
func (f *soldOut) mark(campaign string, qty int, now time.Time) {
	if f.ttl <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.m[campaign]
	if !ok || !now.Before(m.until) || qty < m.below {
		m.below = qty
	}
	m.until = now.Add(f.ttl)
	f.m[campaign] = m
}

// clear forgets what is known of campaign, after this process gave units back.
func (f *soldOut) clear(campaign string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, campaign)
}

// retryAfter sets the Retry-After header of an answer that a retry may change.
func retryAfter(c echo.Context, d time.Duration) {
	c.Response().Header().Set("Retry-After", strconv.Itoa(max(int(math.Ceil(d.Seconds())), 1)))
}
