package api

import (
	"sync"
	"sync/atomic"
	"time"
)

// breaker fails purchases fast while Kafka is down. Without it every buyer would reserve, wait
// the whole produce timeout, and have the reservation cancelled: seconds of waiting and a
// store write for nothing. After a failed produce it refuses purchases before they reserve
// for a cooldown, then lets one purchase through per cooldown as a probe; a successful produce
// closes it. A probe that ends before it produces (sold out, say) costs nothing: the next one
// comes a cooldown later.
type breaker struct {
	cooldown time.Duration
	open     atomic.Bool // fast path: a closed breaker costs one atomic load

	mu        sync.Mutex
	nextProbe time.Time
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
	if err == nil && !b.open.Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.nextProbe = now.Add(b.cooldown)
		b.open.Store(true)
		return
	}
	b.open.Store(false)
}
