package events_test

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seckill/seckill/events"
)

// TestOutage: an outage is warned of when it starts, again every ten seconds while it lasts,
// noted when a call succeeds after it, and a new outage is warned of at once.
func TestOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs strings.Builder
		log := timeless(&logs)
		var o events.Outage
		refused := errors.New("connection refused")
		o.Answered(log, "back") // no outage to end
		for _, step := range []struct {
			after time.Duration // since the step before
			fail  bool
			want  string
		}{
			{0, true, `level=WARN msg=down err="connection refused"`},
			{5 * time.Second, true, ""},
			{5*time.Second - time.Nanosecond, true, ""},
			{time.Nanosecond, true, `level=WARN msg=down err="connection refused"`},
			{2 * time.Second, false, "level=INFO msg=back after=12s failed=4"},
			{time.Second, false, ""},
			{time.Second, true, `level=WARN msg=down err="connection refused"`},
		} {
			time.Sleep(step.after)
			if step.fail {
				o.Failed(log, "down", "err", refused)
			} else {
				o.Answered(log, "back")
			}
			if got := strings.TrimSpace(logs.String()); got != step.want {
				t.Errorf("after %v more, a call that failed: %v: logged %q, want %q", step.after, step.fail, got, step.want)
			}
			logs.Reset()
		}
	})
}

// timeless is a text logger to w without the time, which a synctest bubble's clock fixes anyway.
func timeless(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// TestRetryLogsAnOutage: a dependency down for a minute and a half, retried every 5 s at most,
// is one warning when it starts, one every ten seconds after, and a note when it answers; not a
// warning an attempt (a dead letter's retries during a Redis outage wrote one every 5 s).
func TestRetryLogsAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs strings.Builder
		attempts, start := 0, time.Now()
		err := events.Retry(t.Context(), timeless(&logs), "resolve", func() error {
			if attempts++; attempts <= 20 {
				return errors.New("connection refused")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		down := time.Since(start)
		warns := strings.Count(logs.String(), "level=WARN")
		if max := 1 + int(down/(10*time.Second)); warns < 2 || warns > max {
			t.Errorf("20 failures over %v: %d warnings, want 2 to %d (the first, then one per 10 s):\n%s", down, warns, max, logs.String())
		}
		if !strings.Contains(logs.String(), `level=WARN msg="resolve failed; retrying" attempt=1 `) ||
			!strings.Contains(logs.String(), "level=INFO msg=\"resolve succeeded after failing\" after="+down.String()+" failed=20") {
			t.Errorf("want the first failure warned and the recovery noted with its 20 failures:\n%s", logs.String())
		}
	})
}
