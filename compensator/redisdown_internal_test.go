package compensator

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

var errRefused = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

// downRedis fails every call while down; otherwise another compensator holds the sweeper's
// lease, and Redis holds every campaign whole.
type downRedis struct {
	Rebuilder
	down atomic.Bool
}

func (r *downRedis) TryLock(context.Context, string, time.Duration) (*lua.Lock, error) {
	if r.down.Load() {
		return nil, errRefused
	}
	return nil, lua.ErrLockHeld
}

func (r *downRedis) Generations(context.Context, []string) (map[string]lua.Generation, error) {
	if r.down.Load() {
		return nil, errRefused
	}
	return nil, nil
}

func (r *downRedis) Masters(context.Context) (map[string]bool, error) {
	if r.down.Load() {
		return nil, errRefused
	}
	return nil, nil
}

// noCampaigns is a store with no campaign.
type noCampaigns struct{ Snapshotter }

func (noCampaigns) Campaigns(context.Context) ([]store.Campaign, error) { return nil, nil }

// syncBuffer is a log both loops write while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// take returns the levels of the lines logged since the last take.
func (s *syncBuffer) take() (levels, lines string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lines = s.b.String()
	s.b.Reset()
	var ls []string
	for l := range strings.Lines(lines) {
		level, _, _ := strings.Cut(l[strings.Index(l, "level=")+len("level="):], " ")
		ls = append(ls, level)
	}
	return strings.Join(ls, " "), lines
}

// TestRedisOutageLoggedOncePerLoop: while Redis does not answer, a standby sweeper warned at
// every try for the lease (every 250 ms at a sweep a second) and the guard at every round (every
// second), for one outage that their first lines said all of. Each loop now warns when the
// outage starts, and notes when Redis answers again; a new outage warns again.
func TestRedisOutageLoggedOncePerLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs syncBuffer
		r := &downRedis{}
		cfg := Config{Brokers: []string{"unused:9092"}, SweepInterval: time.Second, GuardInterval: time.Second,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		cfg.setDefaults()
		c := &Compensator{cfg: cfg, locker: r, rebuilder: r, snapshots: noCampaigns{}}
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { c.sweep(ctx) })
		wg.Go(func() { c.guard(ctx) })
		for _, step := range []struct {
			story string
			down  bool
			want  string // the levels logged, in order
		}{
			{"while redis answers", false, ""},
			{"redis goes down", true, "WARN WARN"},
			{"it stays down", true, ""},
			{"redis answers again", false, "INFO INFO"},
			{"a while after", false, ""},
			{"redis goes down again", true, "WARN WARN"},
		} {
			r.down.Store(step.down)
			time.Sleep(3 * time.Second) // within the ten seconds of an outage's next warning
			synctest.Wait()
			if got, lines := logs.take(); got != step.want {
				t.Errorf("%s: logged %q, want %q:\n%s", step.story, got, step.want, lines)
			}
		}
		cancel()
		wg.Wait()
	})
}
