package api

import (
	"math"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/seckill/seckill/events"
)

// Limit is a token bucket: Rate requests a second on average, Burst at once. The zero Limit
// limits nothing.
type Limit struct {
	Rate  float64
	Burst int
}

// limiter keeps one token bucket per key (a buyer, an IP address): two generations of buckets,
// the current one and the one before. A key found in the older is moved to the current; every
// period the older is dropped whole and the current becomes the older. A bucket dropped that
// way was untouched for at least a period, which is at least the time a bucket takes to fill up
// again, and a full bucket is the same as none: forgetting it changes no answer. No bucket is
// ever dropped to make room, so a client that churns keys stays limited on each of them; memory
// is bounded by time instead: what two periods of new keys hold.
//
// A bucket is 16 bytes in the map beside its key: 36 bytes a key with the map's own, measured,
// plus the key's bytes (a *rate.Limiter and its entry were 99). 100,000 buyers of a flash crowd
// cost about 5 MB, returned a period or two after they leave. A timer turns the generations
// over while any are held, so the memory comes back on an idle server too.
type limiter struct {
	limit  Limit
	what   string        // "buyer" or "address", for the message
	period time.Duration // how often the generations turn over

	mu        sync.Mutex
	cur, prev map[string]bucket
	turnedAt  time.Time // when cur became the current generation
	timer     *time.Timer
	closed    bool // no timer is started again: the generations turn over in allow alone
}

// bucket is a token bucket: tokens left at the time at (Unix nanoseconds).
type bucket struct {
	tokens float64
	at     int64
}

// minPeriod is the shortest turn-over period, so that a key active all the time is moved at most
// once every few seconds.
const minPeriod = 5 * time.Second

func newLimiter(l Limit, what string) *limiter {
	if l.Rate > 0 && l.Burst < 1 {
		l.Burst = 1
	}
	period := minPeriod
	if l.Rate > 0 {
		period = max(period, time.Duration(float64(l.Burst)/l.Rate*float64(time.Second)))
	}
	return &limiter{limit: l, what: what, period: period,
		cur: map[string]bucket{}, prev: map[string]bucket{}}
}

// off reports whether the limiter lets everything through.
func (l *limiter) off() bool { return l == nil || l.limit.Rate <= 0 }

// allow takes a token from key's bucket. When there is none, it reports how long until there
// will be.
func (l *limiter) allow(key string, now time.Time) (bool, time.Duration) {
	if l.off() {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if since := now.Sub(l.turnedAt); since >= 2*l.period {
		l.turn(now)
		l.turn(now)
	} else if since >= l.period {
		l.turn(now)
	}
	burst, ns := float64(l.limit.Burst), now.UnixNano()
	b, ok := l.cur[key]
	if !ok {
		if b, ok = l.prev[key]; ok {
			delete(l.prev, key)
		} else {
			b = bucket{tokens: burst, at: ns}
		}
		if l.timer == nil && !l.closed {
			l.timer = time.AfterFunc(l.period, l.tick)
		}
	}
	if ns > b.at {
		b.tokens = min(burst, b.tokens+l.limit.Rate*float64(ns-b.at)/1e9)
		b.at = ns
	}
	if b.tokens < 1 {
		l.cur[key] = b
		return false, time.Duration((1 - b.tokens) / l.limit.Rate * float64(time.Second))
	}
	b.tokens--
	l.cur[key] = b
	return true, 0
}

// turn drops the older generation and makes the current one the older. l.mu is held.
func (l *limiter) turn(now time.Time) {
	if len(l.prev) > 0 || len(l.cur) > 0 {
		l.prev, l.cur = l.cur, map[string]bucket{}
	}
	l.turnedAt = now
}

// tick turns the generations over on time, and stops once they are empty.
func (l *limiter) tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed { // stopped by close while this tick waited for the lock
		return
	}
	now := time.Now()
	if now.Sub(l.turnedAt) >= l.period {
		l.turn(now)
	}
	if len(l.cur) == 0 && len(l.prev) == 0 {
		l.timer = nil
		return
	}
	l.timer.Reset(max(l.period-now.Sub(l.turnedAt), time.Millisecond))
}

// close stops the timer, whose turn-overs would otherwise go on for up to three periods after
// the server closed.
func (l *limiter) close() {
	if l.off() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
}

// size returns the number of buckets held.
func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.cur) + len(l.prev)
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
		if s.ipLimit.off() || !strings.HasPrefix(c.Request().URL.Path, "/v1/") {
			return next(c) // and no RealIP, which reads the forwarding headers, for nothing
		}
		if err := s.ipLimit.charge(c, clientKey(c.RealIP())); err != nil {
			return err
		}
		return next(c)
	}
}

// clientKey is what the per-address limits count by: the client's prefix (clientPrefix), or
// the address as given when it is not an IP.
func clientKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	return clientPrefix(a).String()
}

// soldOut remembers, for a short while, that a campaign has fewer units left than some
// quantity, so that this process refuses the buyers of a sold-out campaign without asking Redis.
// Stock comes back only through a release, so the memory lasts ttl, or until this process
// releases units of the campaign itself.
type soldOut struct {
	ttl time.Duration // <= 0: remember nothing

	mu sync.Mutex
	m  map[string]soldOutMark
	// clears counts the clears, written under mu: a refusal Redis gave before one is not
	// marked, for the units given back may be the ones it lacked. One count for all campaigns:
	// clears come a batch of the results topic at a time, which few refusals straddle, and a
	// refusal not marked costs the next buyer one Redis call.
	clears atomic.Uint64
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

// since returns what mark needs to tell a refusal that came before a clear: read it before
// asking Redis.
func (f *soldOut) since() uint64 { return f.clears.Load() }

// mark records that Redis refused qty units of campaign as sold out, when asked at since.
func (f *soldOut) mark(campaign string, qty int, now time.Time, since uint64) {
	if f.ttl <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.clears.Load() != since {
		return
	}
	m, ok := f.m[campaign]
	if ok && now.Before(m.until) && qty > m.below {
		// Fewer than qty left says nothing of fewer than m.below: renewed by it, the mark
		// would refuse those buyers past the ttl of the refusal that did.
		return
	}
	f.m[campaign] = soldOutMark{below: qty, until: now.Add(f.ttl)}
}

// clear forgets what is known of campaign, after this process gave units back.
func (f *soldOut) clear(campaign string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, campaign)
	f.clears.Add(1)
}

// retryAfter sets the Retry-After header of an answer that a retry may change.
func retryAfter(c echo.Context, d time.Duration) {
	c.Response().Header().Set("Retry-After", strconv.Itoa(max(int(math.Ceil(d.Seconds())), 1)))
}
