package bench

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// A Requester appends the i-th request of a load (a whole HTTP/1.1 request) to dst. Each worker
// gets its own from NewRequester, so it may keep state (a buffer, a MAC) without locks.
type Requester func(i int64, dst []byte) []byte

// Load is one run of the load generator against one address.
type Load struct {
	// Name labels the progress line.
	Name string
	// Addr is the server's host:port.
	Addr string
	// Requests is how many requests to send. Required.
	Requests int64
	// Concurrency is the number of keep-alive connections, each with at most one request in
	// flight. Default: 256.
	Concurrency int
	// Rate, when above zero, makes the load open-loop: request i is due at start + i/Rate, and
	// its latency is measured from that due time, not from when a connection was free to send
	// it, so a stalled server shows in the tail instead of silently slowing the load down
	// (coordinated omission). Zero: closed loop, each connection sends as soon as it has its
	// answer.
	Rate float64
	// Timeout bounds each request. Default: 30s.
	Timeout time.Duration
	// Interval is the width of the timeline's buckets. Default: 250ms.
	Interval time.Duration
	// NewRequester returns the request builder of one worker. Required.
	NewRequester func() Requester
	// Progress, if set, is told how the load goes a few times a second.
	Progress *Progress
	// Started, if set, is called when the load starts, before the first request.
	Started func(start time.Time)
	// Observe, if set, runs in a goroutine of its own when the load starts, with the count of
	// answers so far: the bench starts profiles from it.
	Observe func(done func() int64, start time.Time)
}

// Point is one interval of a timeline.
type Point struct {
	T    float64 `json:"t"`    // seconds since the start, at the end of the interval
	Rate float64 `json:"rate"` // answers per second
	OK   float64 `json:"ok"`   // 2xx answers per second
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
}

// LoadResult is what a load measured.
type LoadResult struct {
	Requests    int64   `json:"requests"` // answered or failed
	Errors      int64   `json:"errors"`   // failed without an HTTP answer
	FirstError  string  `json:"first_error,omitempty"`
	Elapsed     float64 `json:"elapsed_s"`  // from the first send to the last answer
	Throughput  float64 `json:"throughput"` // answers per second
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate,omitempty"`
	Latency     Latency `json:"latency"`
	// Outcomes counts answers by status and error code: "202", "409 sold_out", "error".
	Outcomes map[string]int64 `json:"outcomes"`
	// FirstSeen is when each outcome was first answered, in seconds since the start.
	FirstSeen map[string]float64 `json:"first_seen_s"`
	Timeline  []Point            `json:"timeline"`

	hist *Histogram
}

// maxSlots bounds the timeline: 16,384 intervals of 250ms are 68 minutes.
const maxSlots = 1 << 14

type slot struct {
	hist Histogram
	ok   atomic.Int64
}

type timeline struct {
	start    time.Time
	interval time.Duration
	slots    [maxSlots]atomic.Pointer[slot]
}

func (t *timeline) at(now time.Time) *slot {
	i := int(now.Sub(t.start) / t.interval)
	i = min(max(i, 0), maxSlots-1)
	if s := t.slots[i].Load(); s != nil {
		return s
	}
	s := new(slot)
	if t.slots[i].CompareAndSwap(nil, s) {
		return s
	}
	return t.slots[i].Load()
}

func (t *timeline) points(end time.Time) []Point {
	n := min(int(end.Sub(t.start)/t.interval)+1, maxSlots)
	secs := t.interval.Seconds()
	pts := make([]Point, 0, n)
	for i := range n {
		p := Point{T: float64(i+1) * secs}
		if s := t.slots[i].Load(); s != nil {
			width := secs
			if i == n-1 { // the last interval is cut short by the end of the load
				width = end.Sub(t.start.Add(time.Duration(i) * t.interval)).Seconds()
				p.T = end.Sub(t.start).Seconds()
			}
			if width > 0 {
				p.Rate = float64(s.hist.Count()) / width
				p.OK = float64(s.ok.Load()) / width
			}
			p.P50, p.P99, p.P999 = ms(s.hist.Quantile(0.5)), ms(s.hist.Quantile(0.99)), ms(s.hist.Quantile(0.999))
		}
		pts = append(pts, p)
	}
	return pts
}

// outcomes counts answers by status and code on one worker; the keys are interned so that
// counting allocates only the first time an outcome is seen.
type outcomes struct {
	byStatus map[int]map[string]*outcome
}

type outcome struct {
	key   string
	n     int64
	first time.Duration
}

func (o *outcomes) add(status int, code []byte, at time.Duration) {
	if o.byStatus == nil {
		o.byStatus = map[int]map[string]*outcome{}
	}
	m := o.byStatus[status]
	if m == nil {
		m = map[string]*outcome{}
		o.byStatus[status] = m
	}
	c := m[string(code)] // no allocation: the compiler looks up without converting
	if c == nil {
		key := strconv.Itoa(status)
		if len(code) > 0 {
			key += " " + string(code)
		}
		c = &outcome{key: key, first: at}
		m[string(code)] = c
	}
	c.n++
}

// Run sends the load and returns what it measured. It stops early, with what it has, when ctx
// is canceled.
func (l Load) Run(ctx context.Context) (*LoadResult, error) {
	if l.Requests <= 0 || l.NewRequester == nil || l.Addr == "" {
		return nil, fmt.Errorf("load %s: Addr, Requests and NewRequester are required", l.Name)
	}
	conc := l.Concurrency
	if conc <= 0 {
		conc = 256
	}
	conc = int(min(int64(conc), l.Requests))
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	interval := l.Interval
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	var period time.Duration
	if l.Rate > 0 {
		period = time.Duration(float64(time.Second) / l.Rate)
	}

	var (
		hist     Histogram
		next     atomic.Int64
		done     atomic.Int64
		errs     atomic.Int64
		firstErr atomic.Value
		wg       sync.WaitGroup
		mu       sync.Mutex
		all      []*outcomes
	)
	tl := &timeline{interval: interval}
	start := time.Now()
	tl.start = start
	if l.Started != nil {
		l.Started(start)
	}
	stopProgress := l.Progress.start(l.Name, l.Requests, start, &done, tl)
	if l.Observe != nil {
		go l.Observe(done.Load, start)
	}
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newConn(l.Addr, timeout)
			defer c.close()
			build := l.NewRequester()
			var buf []byte
			var outs outcomes
			defer func() {
				mu.Lock()
				all = append(all, &outs)
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= l.Requests {
					return
				}
				buf = build(i, buf[:0])
				sent := time.Now()
				if period > 0 {
					due := start.Add(time.Duration(i) * period)
					if wait := due.Sub(sent); wait > 0 {
						time.Sleep(wait)
					}
					sent = due
				}
				status, body, err := c.roundTrip(buf)
				now := time.Now()
				done.Add(1)
				if err != nil {
					if errs.Add(1) == 1 {
						firstErr.Store(err.Error())
					}
					outs.add(0, []byte("error"), now.Sub(start))
					continue
				}
				lat := now.Sub(sent)
				hist.Record(lat)
				s := tl.at(now)
				s.hist.Record(lat)
				if status >= 200 && status < 300 {
					s.ok.Add(1)
				}
				var code []byte
				if status >= 400 {
					code = errorCode(body)
				}
				outs.add(status, code, now.Sub(start))
			}
		}()
	}
	wg.Wait()
	end := time.Now()
	stopProgress()

	r := &LoadResult{
		Requests: done.Load(), Errors: errs.Load(), Elapsed: end.Sub(start).Seconds(),
		Concurrency: conc, Rate: l.Rate, Latency: hist.Summary(),
		Outcomes: map[string]int64{}, FirstSeen: map[string]float64{}, Timeline: tl.points(end), hist: &hist,
	}
	if e, ok := firstErr.Load().(string); ok {
		r.FirstError = e
	}
	if r.Elapsed > 0 {
		r.Throughput = float64(r.Requests-r.Errors) / r.Elapsed
	}
	for _, o := range all {
		for _, m := range o.byStatus {
			for _, c := range m {
				r.Outcomes[c.key] += c.n
				if f, ok := r.FirstSeen[c.key]; !ok || c.first.Seconds() < f {
					r.FirstSeen[c.key] = c.first.Seconds()
				}
			}
		}
	}
	return r, ctx.Err()
}

// OutcomeKeys returns the outcome keys in order: by count, largest first.
func (r *LoadResult) OutcomeKeys() []string {
	keys := make([]string, 0, len(r.Outcomes))
	for k := range r.Outcomes {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		if r.Outcomes[keys[a]] != r.Outcomes[keys[b]] {
			return r.Outcomes[keys[a]] > r.Outcomes[keys[b]]
		}
		return keys[a] < keys[b]
	})
	return keys
}

// Count returns the number of answers whose outcome key starts with prefix ("2" for every 2xx).
func (r *LoadResult) Count(prefix string) int64 {
	var n int64
	for k, v := range r.Outcomes {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			n += v
		}
	}
	return n
}
