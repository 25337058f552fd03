package api

import (
	"errors"
	"testing"
	"time"
)

func TestBreaker(t *testing.T) {
	b := &breaker{cooldown: time.Second}
	t0 := time.Unix(1000, 0)
	if !b.allow(t0) {
		t.Fatal("a new breaker refuses")
	}
	b.record(nil, t0)
	if !b.allow(t0) {
		t.Fatal("refuses after a success")
	}
	down := errors.New("kafka down")
	b.record(down, t0)
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
	b.record(down, after) // the probe failed: open again
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
