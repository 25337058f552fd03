package api

import (
	"fmt"
	"testing"
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
// of a crowd that left are freed without another request, and that the timer then stops.
func TestLimiterEmptiesWhenIdle(t *testing.T) {
	l := newLimiter(Limit{Rate: 1000, Burst: 1}, "test")
	l.period = time.Hour // no turn-over while the crowd comes, however slow the machine
	now := time.Now()
	for i := range 10_000 {
		l.allow(fmt.Sprintf("buyer-%d", i), now)
	}
	if n := l.size(); n != 10_000 {
		t.Fatalf("%d buckets, want 10000", n)
	}
	l.mu.Lock()
	l.period, l.turnedAt = 20*time.Millisecond, time.Now()
	l.timer.Reset(l.period)
	l.mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); l.size() > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d buckets still held", l.size())
		}
	}
	time.Sleep(50 * time.Millisecond)
	l.mu.Lock()
	stopped := l.timer == nil
	l.mu.Unlock()
	if !stopped {
		t.Error("the timer still runs with no buckets held")
	}
	// It starts again with the next key.
	l.allow("again", time.Now())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.timer == nil {
		t.Error("no timer with a bucket held")
	}
}
