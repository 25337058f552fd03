package api

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

var errDown = errors.New("kafka down")

// openBreaker returns a breaker that sustained failures opened at t0.
func openBreaker(t *testing.T, t0 time.Time) *breaker {
	t.Helper()
	b := newBreaker()
	for i := range b.failedOpens {
		b.record(errDown, t0.Add(time.Duration(i-b.failedOpens+1)*time.Second))
	}
	if b.allow(t0) {
		t.Fatal("sustained failures left the breaker closed")
	}
	return b
}

// TestBreakerOpensOnSustainedFailure: a burst of produces that time out together (a cold
// broker's first batch) is one failure and leaves the breaker closed; failures spread over a few
// seconds with no success between them open it; a success in between resets the count.
func TestBreakerOpensOnSustainedFailure(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newBreaker()
	for i := range 256 { // 256 produces timing out within 50 ms
		b.record(errDown, t0.Add(time.Duration(i)*50*time.Millisecond/256))
	}
	if !b.allow(t0.Add(100 * time.Millisecond)) {
		t.Fatal("one burst of late acknowledgements opened the breaker")
	}
	b.record(errDown, t0.Add(time.Second))
	b.record(nil, t0.Add(1100*time.Millisecond)) // Kafka answers again
	b.record(errDown, t0.Add(2*time.Second))
	if !b.allow(t0.Add(2 * time.Second)) {
		t.Fatal("failures with a success between them opened the breaker")
	}
	b.record(errDown, t0.Add(3*time.Second))
	b.record(errDown, t0.Add(4*time.Second))
	if b.allow(t0.Add(4 * time.Second)) {
		t.Fatal("three failures in three seconds left the breaker closed")
	}
	// Failures further apart than the window are unrelated.
	b = newBreaker()
	for i := range 5 {
		b.record(errDown, t0.Add(time.Duration(i)*10*time.Second))
	}
	if !b.allow(t0.Add(41 * time.Second)) {
		t.Error("failures ten seconds apart opened the breaker")
	}
}

// TestBreakerOpensUnderACrowd: Kafka down under a crowd fails a produce every few milliseconds,
// for as long as it is down. Failures that never stop are the sustained failure the breaker is
// for, not one burst of late acknowledgements, however close together each is to the one before.
func TestBreakerOpensUnderACrowd(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newBreaker()
	at := t0
	for ; at.Before(t0.Add(10 * time.Second)); at = at.Add(10 * time.Millisecond) {
		b.record(errDown, at)
	}
	if b.allow(at) {
		t.Fatal("ten seconds of a failed produce every 10ms, no success between them, left the breaker closed")
	}
}

// TestBreakerProbes: open, it lets one purchase through per cooldown; a failed probe keeps it
// open, a successful one closes it.
func TestBreakerProbes(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := openBreaker(t, t0)
	if b.allow(t0.Add(500 * time.Millisecond)) {
		t.Error("allows during the cooldown")
	}
	after := t0.Add(1500 * time.Millisecond)
	if !b.allow(after) {
		t.Fatal("no probe after the cooldown")
	}
	if b.allow(after) {
		t.Error("a second purchase went through while the probe runs")
	}
	// A probe that never produced (sold out, say): the next one comes a cooldown later.
	if b.allow(after.Add(500*time.Millisecond)) || !b.allow(after.Add(1100*time.Millisecond)) {
		t.Error("probes are not one per cooldown")
	}
	after = after.Add(1100 * time.Millisecond)
	b.record(errDown, after) // the probe failed: open again
	if b.allow(after.Add(500 * time.Millisecond)) {
		t.Error("allows after a failed probe")
	}
	later := after.Add(1500 * time.Millisecond)
	if !b.allow(later) {
		t.Fatal("no second probe")
	}
	b.record(nil, later) // the probe succeeded: closed
	for range 3 {
		if !b.allow(later) {
			t.Fatal("refuses after a successful probe")
		}
	}
}

// TestBreakerGauge: seckill_breaker_open follows the breaker, so the alert sees it open.
func TestBreakerGauge(t *testing.T) {
	t0 := time.Now()
	b := openBreaker(t, t0)
	if v := testutil.ToFloat64(breakerOpen); v != 1 {
		t.Errorf("seckill_breaker_open = %v with the breaker open", v)
	}
	b.record(nil, t0.Add(2*time.Second)) // a probe succeeded
	if v := testutil.ToFloat64(breakerOpen); v != 0 {
		t.Errorf("seckill_breaker_open = %v once a probe succeeded", v)
	}
}
