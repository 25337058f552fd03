package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Progress shows how a long step goes on one line of a terminal (rewritten in place a few times
// a second), or as a line every few seconds when the output is not a terminal.
type Progress struct {
	w   io.Writer
	tty bool
	mu  sync.Mutex
}

// NewProgress returns a Progress writing to w; it draws a bar when w is a terminal.
func NewProgress(w io.Writer) *Progress {
	p := &Progress{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

// Logf prints a line of its own, above the bar.
func (p *Progress) Logf(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

func (p *Progress) line(s string, final bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K"+s)
		if final {
			fmt.Fprintln(p.w)
		}
		return
	}
	fmt.Fprintln(p.w, s)
}

// Watch shows a step of total units (total <= 0: unknown) whose count so far is done() (nil: no
// count), with detail() appended, until the returned function is called.
func (p *Progress) Watch(name string, total int64, done func() int64, detail func() string) (stop func()) {
	return p.watch(name, func() int64 { return total }, done, detail)
}

// Track shows a step whose total may grow as it goes (an operator's bulk compensation): it
// returns the function that reports done of total, and the one that ends the line.
func (p *Progress) Track(name string) (update func(done, total int), stop func()) {
	var done, total atomic.Int64
	stop = p.watch(name, total.Load, done.Load, nil)
	return func(d, t int) { done.Store(int64(d)); total.Store(int64(t)) }, stop
}

func (p *Progress) watch(name string, totalOf func() int64, done func() int64, detail func() string) (stop func()) {
	if p == nil {
		return func() {}
	}
	start := time.Now()
	every := 250 * time.Millisecond
	if !p.tty {
		every = 5 * time.Second
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	render := func() string {
		var n int64
		if done != nil {
			n = done()
		}
		el := time.Since(start)
		total := totalOf()
		var b strings.Builder
		fmt.Fprintf(&b, "%-14s ", name)
		if total > 0 {
			frac := min(float64(n)/float64(total), 1)
			const width = 28
			full := int(frac * width)
			b.WriteString("[" + strings.Repeat("#", full) + strings.Repeat(".", width-full) + "]")
			fmt.Fprintf(&b, " %3.0f%% %s/%s", 100*frac, count(n), count(total))
		} else if done != nil {
			fmt.Fprintf(&b, "%s", count(n))
		}
		fmt.Fprintf(&b, "  %s", el.Truncate(100*time.Millisecond))
		if detail != nil {
			b.WriteString("  " + detail())
		}
		return b.String()
	}
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				p.line(render(), true)
				return
			case <-t.C:
				p.line(render(), false)
			}
		}
	}()
	return func() { close(quit); wg.Wait() }
}

// start watches a load: answers so far, and the rate and p99 of the last whole interval.
func (p *Progress) start(name string, total int64, begin time.Time, done *atomic.Int64, tl *timeline) func() {
	if p == nil {
		return func() {}
	}
	return p.Watch(name, total, done.Load, func() string {
		i := int(time.Since(begin)/tl.interval) - 1
		if i < 0 || i >= maxSlots {
			return ""
		}
		s := tl.slots[i].Load()
		if s == nil {
			return "0 req/s"
		}
		return fmt.Sprintf("%s req/s  p99 %s", count(int64(float64(s.hist.Count())/tl.interval.Seconds())), fmtMs(ms(s.hist.Quantile(0.99))))
	})
}

// count formats n with thousands separators: 200,000.
func count(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fmtMs formats milliseconds with a precision that suits their size.
func fmtMs(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 1:
		return fmt.Sprintf("%.2fms", v)
	case v < 100:
		return fmt.Sprintf("%.1fms", v)
	default:
		return fmt.Sprintf("%.0fms", v)
	}
}
