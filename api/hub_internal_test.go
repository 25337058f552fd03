package api

import "testing"

// TestHubWakesPastASubscriberThatDoesNotListen: a stream busy elsewhere (its client reads
// nothing, and its handler waits on the write) never takes its wake-ups. The hub's reader
// must pass it by, or every stream of this api, and its sold-out flags, would wait with it;
// and an order's subscriptions must go with their streams, or the hub would keep one entry for
// every order ever followed.
func TestHubWakesPastASubscriberThatDoesNotListen(t *testing.T) {
	h := &hub{subs: map[string]map[chan struct{}]struct{}{}}
	_, leaveStuck := h.subscribe("c.order")
	listening, leave := h.subscribe("c.order")
	for range 3 { // more wake-ups than a stream holds
		h.wake("c.order")
		select {
		case <-listening:
		default:
			t.Fatal("a wake-up did not reach the listening stream")
		}
	}
	leaveStuck()
	leave()
	if len(h.subs) != 0 {
		t.Errorf("the hub keeps %d orders after their streams left", len(h.subs))
	}
}
