package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ConsumeLoop polls a group client built with DisableAutoCommit and BlockRebalanceOnPoll, hands
// each batch of at most max records to handle, and commits the batch's offsets after handle
// returns nil: at-least-once, so handle must be idempotent. handle gets two contexts: work, for
// its I/O, which is not canceled so a batch in hand finishes (the drain), and stop, canceled
// with ctx, which tells retry loops to give up. ConsumeLoop returns nil when ctx is canceled,
// and handle's error if it fails while ctx is live.
func ConsumeLoop(ctx context.Context, cl *kgo.Client, max int, log *slog.Logger,
	handle func(work, stop context.Context, fs kgo.Fetches) error) error {
	defer cl.AllowRebalance()
	work := context.WithoutCancel(ctx)
	for {
		fetches := cl.PollRecords(ctx, max)
		if ctx.Err() != nil && fetches.NumRecords() == 0 {
			return nil
		}
		var fatal error
		fetches.EachError(func(topic string, p int32, err error) {
			if fatal == nil && errors.Is(err, kgo.ErrClientClosed) {
				fatal = err
			}
		})
		if fatal != nil {
			return fatal
		}
		if fetches.NumRecords() > 0 {
			if err := handle(work, ctx, fetches); err != nil {
				if ctx.Err() != nil {
					return nil // stopped while a dependency was down: the batch is redelivered
				}
				return err
			}
			if err := cl.CommitRecords(work, fetches.Records()...); err != nil {
				// Not fatal: the batch is durable, and redelivering it changes nothing.
				log.Warn("offset commit failed; the batch will be redelivered", "err", err)
			}
		}
		cl.AllowRebalance()
	}
}

// Retry calls fn until it succeeds or stop is done, backing off from 100ms to 5s, and logs each
// failure: the way every role waits out a dependency that is down.
func Retry(stop context.Context, log *slog.Logger, what string, fn func() error) error {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		log.Warn(what+" failed; retrying", "attempt", attempt, "backoff", backoff, "err", err)
		select {
		case <-stop.Done():
			return fmt.Errorf("%s: %w (gave up: %w)", what, err, context.Cause(stop))
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
