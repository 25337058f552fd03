package compensator_test

import (
	"testing"
	"time"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/store"
)

// BenchmarkSweepExpiries times one sweep of a page of 1,000 orders left unpaid past their
// pay_by, on the real store, Redis and Kafka: each expiry is the store's write, Redis's
// give-back, the wait for Kafka to take its OrderExpired, and the store's mark. I6 gives them
// pay_by plus a sweep interval.
//
//	go test -run '^$' -bench SweepExpiries -benchtime 3x ./compensator
func BenchmarkSweepExpiries(b *testing.B) {
	const page = 1000
	for b.Loop() {
		b.StopTimer()
		e := newEnvPaying(b, 3*page, 3, time.Millisecond)
		e.brokers = kafkatest.Real(b)
		e.topics = kafkatest.Topics(b, e.brokers)
		e.confirm(b, e.reserve(b, page, time.Hour))
		c := e.compensator(b, compensator.Config{})
		time.Sleep(5 * time.Millisecond) // past every pay_by
		b.StartTimer()
		if n, err := c.SweepOnce(e.ctx, store.Fence{}); err != nil || n != page {
			b.Fatalf("swept %d of %d: %v", n, page, err)
		}
	}
}
