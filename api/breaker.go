package api

import (
	"sync"
	"sync/atomic"
	"time"
)

// breaker fails purchases fast while Kafka is down. Without it every buyer would reserve, wait
// the whole produce timeout, and have the reservation cancelled: seconds of waiting and a
// store write for nothing.
//
// It opens on a sustained failure only: failedOpens failures within window with no success
// between them, where failures within burst of the first of them count as one (a batch of
// produces that time out together is one late acknowledgement, not an outage: on a cold broker
// one such batch used to refuse 17,000 buyers). Measured from the burst's first failure, not
// from the latest: under a crowd a failure follows the one before within milliseconds for as
// long as Kafka is down, and chained so they made one burst that never ended. Open, it refuses
// purchases before they reserve for a cooldown, then lets one purchase through per cooldown as
// a probe; a successful produce closes it and a failed probe keeps it open. A probe that ends
// before it produces (sold out, say) costs nothing: the next one comes a cooldown later.
type breaker struct {
	cooldown    time.Duration
	burst       time.Duration // failures within this of a burst's first are one
	window      time.Duration // failures further apart than this are unrelated
	failedOpens int           // failures (bursts) within window that open it
	open        atomic.Bool   // fast path: a closed breaker costs one atomic load
	failing     atomic.Bool   // failures > 0 (or open): a success has something to reset

	mu        sync.Mutex
	nextProbe time.Time
	failures  int       // bursts of failures since the last success, within window
	first     time.Time // the first of them
	burstAt   time.Time // the first failure of the latest burst
}

func newBreaker() *breaker {
	return &breaker{cooldown: time.Second, burst: 250 * time.Millisecond, window: 5 * time.Second, failedOpens: 3}
}

// allow reports whether a purchase may try Kafka now.
func (b *breaker) allow(now time.Time) bool {
	if !b.open.Load() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open.Load() {
		return true
	}
	if now.Before(b.nextProbe) {
		return false
	}
	b.nextProbe = now.Add(b.cooldown)
	return true
}

// record takes the outcome of a produce.
func (b *breaker) record(err error, now time.Time) {
	if err == nil && !b.failing.Load() {
		return // the common case: a success with nothing to reset
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	defer func() { b.failing.Store(b.failures > 0) }()
	switch {
	case err == nil:
		b.failures = 0
		b.open.Store(false)
		breakerOpen.Set(0)
	case b.open.Load(): // a probe failed
		b.nextProbe = now.Add(b.cooldown)
	case b.failures > 0 && now.Sub(b.burstAt) < b.burst: // the same burst
	default:
		if b.failures == 0 || now.Sub(b.first) > b.window {
			b.failures, b.first = 0, now
		}
		b.failures++
		b.burstAt = now
		if b.failures >= b.failedOpens {
			b.nextProbe = now.Add(b.cooldown)
			b.open.Store(true)
			breakerOpen.Set(1)
		}
	}
}
