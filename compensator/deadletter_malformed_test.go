package compensator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
)

// TestDeadLetterOfAMalformedRecord: Redis holds Ann's reservation record in a form no code of
// seckill writes (a hand edit, a bug of another version), and her order and then Bob's are
// dead-lettered on one partition. The compensator retried Ann's for ever, and Bob's letter,
// behind it, was never resolved: his units stayed held. Now Ann's is left as it is, with an
// error naming her order, and Bob's is released.
func TestDeadLetterOfAMalformedRecord(t *testing.T) {
	e := newEnv(t, 10, 5)
	evs := e.reserve(t, 2, time.Hour)
	ann, bob := evs[0], evs[1]
	const garbage = "not a record"
	e.redis(t, "HSET", lua.KeysOf(e.campaign).Res, ann.OrderID, garbage)
	cl, err := events.NewClient(e.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var key []byte
	for _, ev := range []events.Event{ann, bob} {
		src, err := events.Record(e.topics.Requested, ev)
		if err != nil {
			t.Fatal(err)
		}
		if key == nil {
			key = src.Key
		}
		src.Key = key // one key, one partition: Bob's letter is behind Ann's
		if err := cl.ProduceSync(e.ctx, events.DeadLetter(e.topics.DLQ, src, string(events.CampaignNotFound))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	logs := e.resolveDeadLetters(t, cl)

	e.wantRedis(t, bob, lua.StateReleased, e.stock-int64(ann.Quantity))
	if o, err := e.st.Order(e.ctx, bob.OrderID); err != nil || o.Status != events.Failed {
		t.Errorf("Bob's order is %q %v in the store, want failed", o.Status, err)
	}
	if rec, err := e.r.Client().HGet(e.ctx, lua.KeysOf(e.campaign).Res, ann.OrderID).Result(); err != nil || rec != garbage {
		t.Errorf("Ann's record is %q %v, want it left as it was", rec, err)
	}
	var named bool
	for _, line := range strings.Split(logs, "\n") {
		named = named || strings.Contains(line, `"level":"ERROR"`) && strings.Contains(line, ann.OrderID) && strings.Contains(line, "seckill compensate")
	}
	if !named {
		t.Errorf("no error naming Ann's order %s and what to run:\n%s", ann.OrderID, logs)
	}
}

// TestDeadLetterOfABuyerWhoseCountIsMalformed: Redis holds Ann's reservation record as it should,
// but her count in the campaign's buyers in a form no code of seckill writes, which release.lua
// refuses to add to; her order and then Bob's are dead-lettered on one partition. As with a
// malformed record, Ann's letter must not be retried for ever with Bob's behind it: her order
// is left with its units held, and an error naming it, and Bob's is released.
func TestDeadLetterOfABuyerWhoseCountIsMalformed(t *testing.T) {
	e := newEnv(t, 10, 5)
	evs := e.reserve(t, 2, time.Hour)
	ann, bob := evs[0], evs[1]
	const garbage = "not a count"
	e.redis(t, "HSET", lua.KeysOf(e.campaign).Buyers, ann.UserID, garbage)
	cl, err := events.NewClient(e.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var key []byte
	for _, ev := range []events.Event{ann, bob} {
		src, err := events.Record(e.topics.Requested, ev)
		if err != nil {
			t.Fatal(err)
		}
		if key == nil {
			key = src.Key
		}
		src.Key = key // one key, one partition: Bob's letter is behind Ann's
		if err := cl.ProduceSync(e.ctx, events.DeadLetter(e.topics.DLQ, src, events.ReasonStoreSoldOut)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	logs := e.resolveDeadLetters(t, cl)

	e.wantRedis(t, bob, lua.StateReleased, e.stock-int64(ann.Quantity))
	if o, err := e.st.Order(e.ctx, bob.OrderID); err != nil || o.Status != events.Failed {
		t.Errorf("Bob's order is %q %v in the store, want failed", o.Status, err)
	}
	if res, err := e.r.Reservation(e.ctx, ann.OrderID); err != nil || res.State != lua.StatePending {
		t.Errorf("Ann's reservation is %q %v, want it left pending", res.State, err)
	}
	if n, err := e.r.Client().HGet(e.ctx, lua.KeysOf(e.campaign).Buyers, ann.UserID).Result(); err != nil || n != garbage {
		t.Errorf("Ann's count is %q %v, want it left as it was", n, err)
	}
	var named bool
	for _, line := range strings.Split(logs, "\n") {
		named = named || strings.Contains(line, `"level":"ERROR"`) && strings.Contains(line, ann.OrderID) && strings.Contains(line, "seckill compensate")
	}
	if !named {
		t.Errorf("no error naming Ann's order %s and what to run:\n%s", ann.OrderID, logs)
	}
}
