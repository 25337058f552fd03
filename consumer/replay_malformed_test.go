package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store/storetest"
)

// TestReplayPastAMalformedReservation: one reservation record Redis cannot parse (the scripts
// answer "malformed" for it and go on: confirm.lua "stops nothing else") must not stop a replay.
// The given-back step read a batch's records with Reservations, which failed the whole read on
// one malformed record and was retried for ever: the other order never came back.
func TestReplayPastAMalformedReservation(t *testing.T) {
	s := newReplaySale(t, storetest.MustOpen(t, storetest.SQLiteURL(t)), 10)
	bad, good := s.buy("ann"), s.buy("bob")
	if err := s.r.Client().HSet(s.ctx, lua.KeysOf(s.campaign).Res, bad.OrderID, "pending|1|soon|ann").Err(); err != nil {
		t.Fatal(err)
	}
	// Bounded: the bug was a read retried for ever.
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	s.ctx = ctx
	s.replay(consumer.From{})
	if o, err := s.st.Order(s.ctx, good.OrderID); err != nil || o.Status != events.Confirmed {
		t.Errorf("bob's order after the replay: %+v, %v; want confirmed", o, err)
	}
}
