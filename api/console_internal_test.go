package api

import (
	"context"
	"log/slog"
	"testing"

	"github.com/seckill/seckill/store"
)

// TestConsoleP99OfPurchasesPastTheTopBucket: while Kafka hangs, purchases wait out the produce
// timeout (3 s), past the histogram's top bucket (about 1.9 s). The console's p99 must say the
// top bucket, not 0 ("no purchase") nor a fast bucket, in the very incident an operator watches
// it for.
func TestConsoleP99OfPurchasesPastTheTopBucket(t *testing.T) {
	top := purchaseBuckets[len(purchaseBuckets)-1] * 1000
	for _, tc := range []struct {
		name       string
		fast, slow int
	}{
		{"all slow", 0, 100},
		{"5% slow", 95, 5},
	} {
		before := latencyBuckets()
		for range tc.fast {
			purchaseSeconds.Observe(0.001)
		}
		for range tc.slow {
			purchaseSeconds.Observe(3)
		}
		if got := p99Ms(before, latencyBuckets()); got != top {
			t.Errorf("%s: p99 = %v ms, want the top bucket, %v ms", tc.name, got, top)
		}
	}
}

// noCampaigns is a store without campaigns: all a snapshot asks of it.
type noCampaigns struct{ Store }

func (noCampaigns) NewestCampaigns(context.Context, int) ([]store.Campaign, error) { return nil, nil }
func (noCampaigns) UnitsByStatus(context.Context, []string) ([]store.Units, error) { return nil, nil }
func (noCampaigns) AuditVerdicts(context.Context) (map[string]store.AuditVerdict, error) {
	return nil, nil
}

// TestConsoleFirstSnapshotRatesNoInstant: the first snapshot of a loop follows its sources'
// start by microseconds. A purchase in them made a rate of hundreds of thousands a second, a
// spike that the page's chart scales to for the five minutes it keeps.
func TestConsoleFirstSnapshotRatesNoInstant(t *testing.T) {
	s := New(Config{InsecureUserHeader: true, Logger: slog.New(slog.DiscardHandler)}, noCampaigns{}, nil, nil)
	defer s.Close()
	src := s.newConsoleSources()
	defer src.close()
	reservations.WithLabelValues("reserved").Inc() // a purchase as the console opens
	if r := src.snapshot(context.Background()).Purchases["accepted"]; r > 1 {
		t.Errorf("the first snapshot says %v purchases a second, of one purchase", r)
	}
}
