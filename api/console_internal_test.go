package api

import "testing"

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
