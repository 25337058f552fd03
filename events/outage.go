package events

import (
	"log/slog"
	"sync"
	"time"
)

// warnEvery spaces the warnings of an outage: a client retries every few hundred
// milliseconds, a consumer fails a call every batch.
const warnEvery = 10 * time.Second

// Outage logs the failed calls to a dependency as outages rather than a line a call: a warning
// at the first failure, at most one every ten seconds while the failures go on, and a note at
// the first success after them. Its zero value is ready to use; its methods are safe for
// concurrent use.
type Outage struct {
	mu      sync.Mutex
	failing bool
	since   time.Time // the outage's first failure
	warned  time.Time // its last warning
	failed  int       // its failed calls
}

// Failed records a failed call, and logs msg with args (what failed, "err", the error) at WARN
// if it starts an outage or the outage's last warning is ten seconds old.
func (o *Outage) Failed(log *slog.Logger, msg string, args ...any) {
	now := time.Now()
	o.mu.Lock()
	if !o.failing {
		o.failing, o.since, o.failed = true, now, 0
		o.warned = time.Time{}
	}
	o.failed++
	due := now.Sub(o.warned) >= warnEvery
	if due {
		o.warned = now
	}
	o.mu.Unlock()
	if due {
		log.Warn(msg, args...)
	}
}

// Answered records a call that succeeded, and logs msg at INFO if it ends an outage, with how
// long the outage lasted ("after") and how many calls failed in it ("failed").
func (o *Outage) Answered(log *slog.Logger, msg string) {
	o.mu.Lock()
	ended, since, failed := o.failing, o.since, o.failed
	o.failing = false
	o.mu.Unlock()
	if ended {
		log.Info(msg, "after", time.Since(since), "failed", failed)
	}
}
