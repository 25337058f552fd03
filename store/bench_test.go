package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// BenchmarkConfirmOrders measures orders/s into PostgreSQL for a batch of 500 against one order
// per transaction (the row-at-a-time baseline), side by side:
//
//	go test -run '^$' -bench ConfirmOrders ./store/
func BenchmarkConfirmOrders(b *testing.B) {
	for _, size := range []int{1, 500} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			s := storetest.MustOpen(b, storetest.PostgresURL(b))
			ctx := context.Background()
			c := store.Campaign{ID: storetest.Name("bench"), Name: "bench", Stock: 1 << 40, PerUserLimit: 1 << 40, CreatedAtMs: time.Now().UnixMilli()}
			if err := s.CreateCampaign(ctx, c); err != nil {
				b.Fatal(err)
			}
			evs := make([]events.Event, b.N)
			for i := range evs {
				evs[i] = events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: time.Now(),
					OrderID: events.NewOrderID(c.ID), CampaignID: c.ID, UserID: fmt.Sprintf("u%d", i%10000), Quantity: 1}
			}
			b.ResetTimer()
			for i := 0; i < len(evs); i += size {
				if _, err := s.ConfirmOrders(ctx, evs[i:min(i+size, len(evs))]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "orders/s")
		})
	}
}
