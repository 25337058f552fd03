package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// paidAgain is a store that holds every order of a batch paid already (a redelivery's): the
// batch has confirmations for Redis and nothing to announce.
type paidAgain struct{ Persister }

func (paidAgain) ConfirmOrders(_ context.Context, evs []events.Event) ([]store.Result, error) {
	res := make([]store.Result, len(evs))
	for i := range res {
		res[i] = store.Result{Status: events.Paid, Duplicate: true}
	}
	return res, nil
}

// flakyRedis fails every call while down, and otherwise answers that it holds nothing.
type flakyRedis struct{ down atomic.Bool }

func (r *flakyRedis) ConfirmAll(context.Context, []string) (map[string]string, error) {
	if r.down.Load() {
		return nil, errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	}
	return nil, nil
}

func (r *flakyRedis) Reservations(context.Context, []string) (map[string]lua.Reservation, error) {
	if r.down.Load() {
		return nil, errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
	}
	return nil, nil
}

// TestRedisOutageLoggedOnce: while Redis does not answer, every batch's read of its reservations
// and its confirmations fail, and each warned: two WARN lines a batch, some every 100 ms under
// load, for one outage that the first said all of. The outage is now logged when it starts and
// when it ends, with a new warning for a new outage. (Within ten seconds: the bubble's clock
// does not move.)
func TestRedisOutageLoggedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs strings.Builder
		r := &flakyRedis{}
		h := &handler{cfg: Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, store: paidAgain{}, redis: r}
		batch := func() {
			t.Helper()
			var recs []*kgo.Record
			for range 3 {
				id := events.NewID()
				rec, err := events.Record("requested", events.Event{Type: events.OrderRequested, Version: events.Version, EventID: id,
					OccurredAt: time.Now(), OrderID: "camp." + id, CampaignID: "camp", UserID: "u-" + id, Quantity: 1})
				if err != nil {
					t.Fatal(err)
				}
				recs = append(recs, rec)
			}
			if err := h.handle(t.Context(), t.Context(), recs); err != nil {
				t.Fatal(err)
			}
		}
		for _, step := range []struct {
			story   string
			down    bool
			batches int
			want    string // the levels logged
		}{
			{"a batch while redis answers", false, 1, ""},
			{"redis goes down", true, 1, "WARN"},
			{"two more batches while it is down", true, 2, ""},
			{"redis answers again", false, 1, "INFO"},
			{"a batch after", false, 1, ""},
			{"redis goes down again", true, 1, "WARN"},
		} {
			r.down.Store(step.down)
			for range step.batches {
				batch()
			}
			var levels []string
			for l := range strings.Lines(logs.String()) {
				level, _, _ := strings.Cut(l[strings.Index(l, "level=")+len("level="):], " ")
				levels = append(levels, level)
			}
			if got := strings.Join(levels, " "); got != step.want {
				t.Errorf("%s: logged %q, want %q:\n%s", step.story, got, step.want, logs.String())
			}
			logs.Reset()
		}
	})
}

// TestRedisCallCutShortByShutdownIsNoOutage: a call that a stopping consumer (or a lost
// partition) cut short failed with its context's error, not Redis's, and was logged as the start
// of a Redis outage.
func TestRedisCallCutShortByShutdownIsNoOutage(t *testing.T) {
	var logs strings.Builder
	h := &handler{cfg: Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}}
	h.redisAnswered(fmt.Errorf("confirm: %w", context.Canceled), 3, "confirm reservations")
	if logs.Len() > 0 {
		t.Errorf("logged a shutdown's cut calls:\n%s", logs.String())
	}
}
