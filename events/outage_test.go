package events_test

import (
	"errors"
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
		log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			},
		}))
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
