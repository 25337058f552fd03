package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestBucketsCoverEveryValueOnce(t *testing.T) {
	prevHigh := uint64(0)
	for i := 1; i < numBuckets; i++ {
		low := bucketHigh(i-1) + 1
		if low != prevHigh+1 && i > 1 {
			t.Fatalf("bucket %d starts at %d, after %d", i, low, prevHigh)
		}
		if bucketOf(low) != i || bucketOf(bucketHigh(i)) != i {
			t.Fatalf("bucket %d: [%d, %d] maps to %d and %d", i, low, bucketHigh(i), bucketOf(low), bucketOf(bucketHigh(i)))
		}
		if w := bucketHigh(i) - low + 1; low > 2*subCount && float64(w)/float64(low) > 1.0/subCount+1e-9 {
			t.Fatalf("bucket %d is %d wide at %d: coarser than 1/%d", i, w, low, subCount)
		}
		prevHigh = bucketHigh(i)
	}
	if bucketOf(maxTrackable) != numBuckets-1 {
		t.Fatalf("the largest trackable value lands in bucket %d of %d", bucketOf(maxTrackable), numBuckets)
	}
}

func TestQuantilesWithinPrecision(t *testing.T) {
	var h Histogram
	rng := rand.New(rand.NewPCG(1, 2))
	vals := make([]time.Duration, 50_000)
	for i := range vals {
		// Log-uniform from 10µs to 10s, as latencies spread.
		vals[i] = time.Duration(10_000 * math.Pow(10, rng.Float64()*6))
		h.Record(vals[i])
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		exact := vals[int(q*float64(len(vals)))-1]
		got := h.Quantile(q)
		if got < exact || float64(got-exact) > float64(exact)/subCount+1 {
			t.Errorf("q%.3f = %v, exact %v: off by more than 1/%d", q, got, exact, subCount)
		}
	}
	if h.Max() != vals[len(vals)-1] || h.Count() != uint64(len(vals)) {
		t.Errorf("max %v count %d, want %v and %d", h.Max(), h.Count(), vals[len(vals)-1], len(vals))
	}
}

func TestRecordConcurrentlyAndMerge(t *testing.T) {
	var a, b Histogram
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				a.Record(time.Duration(g*1000+i) * time.Microsecond)
			}
		}()
	}
	wg.Wait()
	b.Record(time.Hour) // beyond the trackable range: clamped, still counted
	b.Record(-time.Second)
	b.Merge(&a)
	if b.Count() != 8002 {
		t.Fatalf("count %d, want 8002", b.Count())
	}
	if b.Max() != maxTrackable {
		t.Errorf("max %v, want the clamp %v", b.Max(), time.Duration(maxTrackable))
	}
	if got := b.Quantile(0); got != 0 {
		t.Errorf("q0 = %v, want the negative duration counted as 0", got)
	}
	s := a.Summary()
	if s.P50 < 3.9 || s.P50 > 4.05 || s.P99 < 7.9 || s.P99 > 8.0 {
		t.Errorf("summary %+v: want p50 ≈ 4ms and p99 ≈ 7.92ms", s)
	}
}

func TestEmptyHistogram(t *testing.T) {
	var h Histogram
	if h.Quantile(0.99) != 0 || h.Mean() != 0 || h.Summary().Count != 0 {
		t.Fatal("an empty histogram should summarize to zeros")
	}
}
