package compensator_test

import (
	"testing"
	"time"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
)

// TestPayOfAnOrderWithAMalformedRecord: the payment service pays an order the store does not
// hold yet, whose reservation record Redis holds in a form seckill cannot read. The order is
// not confirmed, and no retry of the payment changes that: the answer must not be a 503 that
// asks for one "shortly" as if Redis were down, but the order_not_confirmed every other
// unconfirmed order gets, and the store must not hold the payment.
func TestPayOfAnOrderWithAMalformedRecord(t *testing.T) {
	e := newEnv(t, 10, 5)
	ev := e.reserve(t, 1, time.Hour)[0]
	e.redis(t, "HSET", lua.KeysOf(e.campaign).Res, ev.OrderID, "not a record")
	res := &compensator.Resolver{Store: e.st, Redis: e.r, Producer: nopProducer{}, Results: e.topics.Results}

	_, err := res.Pay(e.ctx, ev.OrderID, "p-1")
	if code := events.ErrorCode(err); code != events.OrderNotConfirmed {
		t.Errorf("Pay answered %s (%v), want %s", code, err, events.OrderNotConfirmed)
	}
	if o, err := e.st.Order(e.ctx, ev.OrderID); err == nil {
		t.Errorf("the store holds the order after the payment: %+v", o)
	}
}
