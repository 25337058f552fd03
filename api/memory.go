package api

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// After a burst the Go runtime keeps the heap it grew: the garbage until the next collection,
// which on a quiet server comes only with the forced one every two minutes, and the free pages
// until the background scavenger, which keeps about the last heap goal, gets to them. A flash
// crowd, or thousands of keep-alive connections opened at once and then parked, left tens of
// MB resident that the machine's other tenants (here Redis, PostgreSQL and Kafka) could use.
// So once the server has been quiet for a while, no request served and no connection opened,
// and the heap holds more than minFreeHeap above what was live at the last collection (free
// pages and garbage), it collects and returns the free pages to the OS (debug.FreeOSMemory),
// once per quiet spell: a collection of the live heap, a few ms of CPU when there is nothing
// else to do. GOMEMLIMIT still applies as the runtime's own bound.

// minFreeHeap is the reclaimable heap below which a quiet server keeps its memory.
const minFreeHeap = 16 << 20

// quietCheck is how often the server looks whether it has become quiet.
const quietCheck = 250 * time.Millisecond

// activity counts requests served and connections opened.
type activity struct{ n atomic.Uint64 }

func (a *activity) add() { a.n.Add(1) }

// releaseWhenQuiet calls release each time the server has seen no activity for quiet, once per
// quiet spell, until ctx is done.
func releaseWhenQuiet(ctx context.Context, a *activity, quiet time.Duration, release func()) {
	if quiet <= 0 {
		return
	}
	t := time.NewTicker(quietCheck)
	defer t.Stop()
	last, since, released := a.n.Load(), time.Now(), true
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if n := a.n.Load(); n != last {
				last, since, released = n, now, false
				continue
			}
			if released || now.Sub(since) < quiet {
				continue
			}
			released = true
			release()
		}
	}
}

// reclaimable returns the resident heap a collection and a release would give back: the free
// pages not yet returned, and the objects beyond those live at the last collection.
func reclaimable() uint64 {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
	metrics.Read(s)
	for _, v := range s {
		if v.Value.Kind() != metrics.KindUint64 {
			return 0
		}
	}
	free, objects, live := s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()
	return free + objects - min(live, objects)
}

// freeOSMemory is the release: when it is worth it, a collection, then every free page back to
// the OS.
func freeOSMemory() {
	if reclaimable() >= minFreeHeap {
		debug.FreeOSMemory()
	}
}
