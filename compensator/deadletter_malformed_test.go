package compensator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
)

// TestDeadLetterBehindAMalformedOne: Redis holds something of Ann's order in a form no code of
// seckill writes (a hand edit, a bug of another version), and her order and then Bob's are
// dead-lettered on one partition. The compensator retried Ann's for ever, and Bob's letter,
// behind it, was never resolved: his units stayed held. Now Ann's is left as it is, with an
// error naming her order and what to run, and Bob's is released.
func TestDeadLetterBehindAMalformedOne(t *testing.T) {
	for _, tc := range []struct {
		name   string
		field  func(k lua.Keys, ann events.Event) (key, field string)
		reason string
		// annLeft: what becomes of Ann's order besides the garbled field kept as it was.
		annLeft func(t *testing.T, e *env, ann events.Event)
	}{
		{
			// Ann's reservation record itself: nothing of it can be read.
			name:   "reservation record",
			field:  func(k lua.Keys, ann events.Event) (string, string) { return k.Res, ann.OrderID },
			reason: string(events.CampaignNotFound),
		},
		{
			// Her record is sound, but her count among the campaign's buyers is not: release.lua
			// refuses to add to it. Her order is failed in the store, its units left held.
			name:   "buyer's count",
			field:  func(k lua.Keys, ann events.Event) (string, string) { return k.Buyers, ann.UserID },
			reason: events.ReasonStoreSoldOut,
			annLeft: func(t *testing.T, e *env, ann events.Event) {
				if res, err := e.r.Reservation(e.ctx, ann.OrderID); err != nil || res.State != lua.StatePending {
					t.Errorf("Ann's reservation is %q %v, want it left pending", res.State, err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 10, 5)
			evs := e.reserve(t, 2, time.Hour)
			ann, bob := evs[0], evs[1]
			const garbage = "not what seckill writes"
			key, field := tc.field(lua.KeysOf(e.campaign), ann)
			e.redis(t, "HSET", key, field, garbage)
			cl, err := events.NewClient(e.brokers)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var first []byte
			for _, ev := range []events.Event{ann, bob} {
				src, err := events.Record(e.topics.Requested, ev)
				if err != nil {
					t.Fatal(err)
				}
				if first == nil {
					first = src.Key
				}
				src.Key = first // one key, one partition: Bob's letter is behind Ann's
				if err := cl.ProduceSync(e.ctx, events.DeadLetter(e.topics.DLQ, src, tc.reason)).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}

			logs := e.resolveDeadLetters(t, cl)

			e.wantRedis(t, bob, lua.StateReleased, e.stock-int64(ann.Quantity))
			if o, err := e.st.Order(e.ctx, bob.OrderID); err != nil || o.Status != events.Failed {
				t.Errorf("Bob's order is %q %v in the store, want failed", o.Status, err)
			}
			if v, err := e.r.Client().HGet(e.ctx, key, field).Result(); err != nil || v != garbage {
				t.Errorf("Ann's %s is %q %v, want it left as it was", tc.name, v, err)
			}
			if tc.annLeft != nil {
				tc.annLeft(t, e, ann)
			}
			var named bool
			for _, line := range strings.Split(logs, "\n") {
				named = named || strings.Contains(line, `"level":"ERROR"`) && strings.Contains(line, ann.OrderID) && strings.Contains(line, "seckill compensate")
			}
			if !named {
				t.Errorf("no error naming Ann's order %s and what to run:\n%s", ann.OrderID, logs)
			}
		})
	}
}
