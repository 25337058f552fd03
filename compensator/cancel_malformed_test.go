package compensator_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
)

// TestCancelGoesPastAMalformedRecord: Redis holds one pending reservation's record in a form no
// code of seckill writes (a hand edit, a bug of another version). A cancel stopped at it: the
// errgroup of the pending pass gave up on the other reservations, and the refund pass never ran,
// so the campaign's buyers stayed charged; run again, the cancel stopped at the same record, and
// the sweeper refunds only refunds already stored. Now the record is left as it is, as the
// sweeper and the dead-letter handler leave it, and named in the error, and the rest is done.
func TestCancelGoesPastAMalformedRecord(t *testing.T) {
	e := newEnv(t, 100, 10)
	op := e.operator()
	evs := e.reserve(t, 12, time.Hour)
	e.confirm(t, evs[:6])
	bad := evs[6]
	const garbage = "not a record"
	e.redis(t, "HSET", lua.KeysOf(e.campaign).Res, bad.OrderID, garbage)

	for run := range 2 { // a second run does no more and names it again
		_, tally, err := op.Cancel(e.ctx, e.campaign, nil)
		if !errors.Is(err, lua.ErrMalformed) || !strings.Contains(err.Error(), bad.OrderID) {
			t.Errorf("run %d: cancel with a malformed record: %v; want an error naming order %s", run, err, bad.OrderID)
		}
		if want := map[int]int64{0: 11}[run]; tally.Released+tally.Refunded != want {
			t.Errorf("run %d: tally %+v; want %d orders released or refunded", run, tally, want)
		}
	}
	for _, ev := range append(evs[:6:6], evs[7:]...) {
		if o, err := e.st.Order(e.ctx, ev.OrderID); err != nil || (o.Status != events.Refunded && o.Status != events.Failed) {
			t.Errorf("order %s after the cancel: %q %v; want it refunded or failed", ev.OrderID, o.Status, err)
		}
	}
	if c, err := e.st.Campaign(e.ctx, e.campaign); err != nil || c.Sold != 0 {
		t.Errorf("the cancelled campaign: sold %d %v; want every confirmed order refunded", c.Sold, err)
	}
	if left, _, _ := e.r.Remaining(e.ctx, e.campaign); left != e.stock-int64(bad.Quantity) {
		t.Errorf("remaining %d after the cancel, want %d: all back but the malformed reservation's", left, e.stock-int64(bad.Quantity))
	}
	if rec, err := e.r.Client().HGet(e.ctx, lua.KeysOf(e.campaign).Res, bad.OrderID).Result(); err != nil || rec != garbage {
		t.Errorf("the malformed record is %q %v, want it left as it was", rec, err)
	}
}
