package bench

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// A Histogram counts durations in log-linear buckets, as HdrHistogram does: each power of two is
// split into 128 linear sub-buckets, so any recorded value is known to within 1/128 (0.8%) from
// 1ns up to maxTrackable. Record is safe for concurrent use and allocation-free: the load
// generator's hundreds of workers record into one histogram with an atomic add.
//
// Why not github.com/HdrHistogram/hdrhistogram-go: its RecordValue is not safe for concurrent
// use (one histogram per worker, merged, would cost ~30 KB × workers × timeline intervals), and
// the hundred lines here are all the load generator needs.
type Histogram struct {
	counts [numBuckets]atomic.Uint64
	total  atomic.Uint64
	sum    atomic.Uint64 // nanoseconds; 2^64 ns is 584 years
	max    atomic.Uint64
}

const (
	subBits      = 7
	subCount     = 1 << subBits
	maxTrackable = 1<<37 - 1 // ~137 s: longer latencies are recorded as this
	numBuckets   = (37-subBits)*subCount + subCount
)

func bucketOf(v uint64) int {
	if v < 2*subCount {
		return int(v)
	}
	e := bits.Len64(v) - (subBits + 1)
	return (e+1)*subCount + int(v>>e) - subCount
}

// bucketHigh returns the largest value that falls in bucket i.
func bucketHigh(i int) uint64 {
	if i < 2*subCount {
		return uint64(i)
	}
	e := i/subCount - 1
	m := uint64(i%subCount + subCount)
	return (m+1)<<e - 1
}

// Record counts one duration; negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	v = min(v, maxTrackable)
	h.counts[bucketOf(v)].Add(1)
	h.total.Add(1)
	h.sum.Add(v)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			break
		}
	}
}

// Count returns how many durations were recorded.
func (h *Histogram) Count() uint64 { return h.total.Load() }

// Max returns the largest recorded duration.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Mean returns the average recorded duration.
func (h *Histogram) Mean() time.Duration {
	n := h.total.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load() / n)
}

// Quantile returns the duration below or at which a fraction q (0 to 1) of the recorded
// durations fall, rounded up to its bucket's upper bound (never below the true value, and at
// most 0.8% above it).
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.total.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	rank = max(rank, 1)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return time.Duration(min(bucketHigh(i), h.max.Load()))
		}
	}
	return h.Max()
}

// Merge adds the counts of o to h.
func (h *Histogram) Merge(o *Histogram) {
	for i := range o.counts {
		if c := o.counts[i].Load(); c > 0 {
			h.counts[i].Add(c)
		}
	}
	h.total.Add(o.total.Load())
	h.sum.Add(o.sum.Load())
	for {
		m, v := h.max.Load(), o.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			break
		}
	}
}

// Latency is the summary of a histogram, in milliseconds, as the results store it.
type Latency struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

// Summary returns the histogram's percentiles.
func (h *Histogram) Summary() Latency {
	return Latency{
		Count: h.Count(), Mean: ms(h.Mean()), P50: ms(h.Quantile(0.5)), P90: ms(h.Quantile(0.9)),
		P99: ms(h.Quantile(0.99)), P999: ms(h.Quantile(0.999)), Max: ms(h.Max()),
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
