package api

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestReleaseWhenQuiet checks that memory is released once per quiet spell, never while
// requests keep coming, and again after the next burst.
func TestReleaseWhenQuiet(t *testing.T) {
	var a activity
	var releases atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		releaseWhenQuiet(ctx, &a, 500*time.Millisecond, func() { releases.Add(1) })
	}()
	// Busy: a request every 50 ms for a second and a half.
	for range 30 {
		a.add()
		time.Sleep(50 * time.Millisecond)
	}
	if n := releases.Load(); n != 0 {
		t.Fatalf("%d releases while busy", n)
	}
	time.Sleep(1500 * time.Millisecond) // quiet for 3 times the delay: one release, not three
	if n := releases.Load(); n != 1 {
		t.Fatalf("%d releases after a quiet spell, want 1", n)
	}
	a.add() // another burst, then quiet again
	time.Sleep(1500 * time.Millisecond)
	if n := releases.Load(); n != 2 {
		t.Fatalf("%d releases after a second quiet spell, want 2", n)
	}
	cancel()
	<-done
	// Negative never releases, and returns at once.
	releaseWhenQuiet(context.Background(), &a, -1, func() { t.Error("released with a negative delay") })
}
