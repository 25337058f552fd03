package api

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestLimiterGenerations checks that buckets live two periods after their last use, no more,
// and that a bucket moved between generations keeps its tokens.
func TestLimiterGenerations(t *testing.T) {
	l := newLimiter(Limit{Rate: 1, Burst: 2}, "test")
	if l.period != minPeriod {
		t.Fatalf("period %v, want %v", l.period, minPeriod)
	}
	t0 := time.Now()
	for range 2 {
		l.allow("a", t0)
	}
	if ok, _ := l.allow("a", t0); ok {
		t.Fatal("third request of a burst of 2 allowed")
	}
	l.allow("b", t0)
	// One period on, a and b are in the older generation; a is used and moves back, empty.
	t1 := t0.Add(l.period)
	if ok, _ := l.allow("a", t1); !ok {
		t.Fatal("a refused after a period")
	}
	if n := l.size(); n != 2 {
		t.Fatalf("%d buckets, want 2", n)
	}
	// Another period on, b was untouched for two periods: forgotten; a stays.
	l.allow("c", t1.Add(l.period))
	if _, ok := l.prev["b"]; ok || l.size() != 2 {
		t.Fatalf("b held after two idle periods: %d buckets", l.size())
	}
	// Tokens survive the move: a bucket emptied just before a turn-over is still empty after it.
	l2 := newLimiter(Limit{Rate: 1, Burst: 1}, "test")
	l2.allow("a", t0)
	l2.allow("x", t0.Add(l2.period-time.Millisecond))
	l2.allow("y", t0.Add(l2.period)) // turns over: x is older
	if _, ok := l2.prev["x"]; !ok {
		t.Fatal("x not in the older generation")
	}
	if ok, _ := l2.allow("x", t0.Add(l2.period)); ok {
		t.Fatal("x's empty bucket refilled by a generation change")
	}
	// A slow rate makes a longer period: a bucket is never forgotten before it is full.
	if want := 1000 * time.Second; newLimiter(Limit{Rate: 0.001, Burst: 1}, "test").period != want {
		t.Errorf("period, want %v (burst / rate)", want)
	}
}

// TestLimiterEmptiesWhenIdle checks that the generations turn over on a timer, so the buckets
// of a crowd that left are freed without another request, and that the timer then stops. In a
// synctest bubble the limiter's clock and timer are exact: two periods free everything.
func TestLimiterEmptiesWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(Limit{Rate: 1000, Burst: 1}, "test")
		now := time.Now()
		for i := range 10_000 {
			l.allow(fmt.Sprintf("buyer-%d", i), now)
		}
		if n := l.size(); n != 10_000 {
			t.Fatalf("%d buckets, want 10000", n)
		}
		time.Sleep(l.period) // one turn-over: the crowd is the older generation
		synctest.Wait()
		if n := l.size(); n != 10_000 {
			t.Fatalf("%d buckets after one period, want 10000", n)
		}
		time.Sleep(l.period) // two: forgotten
		synctest.Wait()
		if n := l.size(); n != 0 {
			t.Fatalf("%d buckets after two idle periods, want 0", n)
		}
		time.Sleep(l.period)
		synctest.Wait()
		l.mu.Lock()
		stopped := l.timer == nil
		l.mu.Unlock()
		if !stopped {
			t.Error("the timer still runs with no buckets held")
		}
		// It starts again with the next key, and stops once that is forgotten.
		l.allow("again", time.Now())
		l.mu.Lock()
		running := l.timer != nil
		l.mu.Unlock()
		if l.size() != 1 || !running {
			t.Error("no timer with a bucket held")
		}
		time.Sleep(3 * l.period)
		synctest.Wait()
		if l.size() != 0 {
			t.Errorf("%d buckets held", l.size())
		}
	})
}

// TestStreamCapBelowConnectionCap: every order stream holds a connection, so a stream cap at
// the connection cap (10,000 each in the deployment's api) let streams take every connection
// and left purchases refused at accept. The default is half the connection cap when that is
// below 10,000, and a cap at or above it is a setting refused at start.
func TestStreamCapBelowConnectionCap(t *testing.T) {
	for _, tc := range []struct{ conns, want int }{{0, 10_000}, {1_000_000, 10_000}, {10_000, 5_000}, {7, 3}} {
		c := Config{MaxConns: tc.conns}
		c.setDefaults()
		if c.MaxStreams != tc.want {
			t.Errorf("connection cap %d: stream cap %d by default, want %d", tc.conns, c.MaxStreams, tc.want)
		}
	}
	c := Config{MaxConns: 100, MaxStreams: 100, InsecureUserHeader: true}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "must be below the connection cap") {
		t.Errorf("a stream cap at the connection cap: %v, want it refused", err)
	}
}

// TestSoldOutMarkOfALargerQuantity: Redis's refusal of 5 units says only that fewer than 5 are
// left. Landing on a mark that refuses 1 unit, it renewed that mark's expiry, so buyers of one
// unit were refused past SoldOutTTL after the last refusal that said none was left.
func TestSoldOutMarkOfALargerQuantity(t *testing.T) {
	f := newSoldOut(500 * time.Millisecond)
	t0 := time.Now()
	f.mark("c", 1, t0, f.since())
	f.mark("c", 5, t0.Add(400*time.Millisecond), f.since())
	if !f.refuses("c", 5, t0.Add(450*time.Millisecond)) {
		t.Error("5 units not refused while the mark of 1 unit holds")
	}
	if f.refuses("c", 1, t0.Add(600*time.Millisecond)) {
		t.Error("1 unit refused 600ms after the refusal of 1 unit, past SoldOutTTL (500ms)")
	}
}

// TestLimitersStopAtClose: the limiters' timers turn their generations over while buckets are
// held, up to three periods after the last request. Close stops them: nothing of the server's
// runs after it.
func TestLimitersStopAtClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := New(Config{InsecureUserHeader: true, UserLimit: Limit{Rate: 10, Burst: 10}, IPLimit: Limit{Rate: 10, Burst: 10},
			Logger: slog.New(slog.DiscardHandler)}, nil, nil, nil)
		req := httptest.NewRequest(http.MethodGet, "/v1/orders/not-an-order", nil)
		req.Header.Set("X-User-ID", "alice")
		srv.Handler().ServeHTTP(httptest.NewRecorder(), req)
		if srv.userLimit.size() != 1 || srv.ipLimit.size() != 1 {
			t.Fatalf("buckets held: buyer %d, address %d; want 1 each", srv.userLimit.size(), srv.ipLimit.size())
		}
		srv.Close()
		for _, l := range []*limiter{srv.userLimit, srv.ipLimit} {
			l.mu.Lock()
			armed := l.timer != nil
			l.mu.Unlock()
			if armed {
				t.Errorf("the %s limiter's timer still runs after Close", l.what)
			}
		}
	})
}
