package bench

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"path/filepath"
	"strings"
)

//go:embed report.html.tmpl
var reportTmpl string

var reportPage = template.Must(template.New("report").Funcs(template.FuncMap{
	"rate":  rate,
	"ms":    fmtMs,
	"count": count,
	"prof":  profValue,
	"pct":   func(v float64) string { return fmt.Sprintf("%.1f%%", v) },
	"json": func(v any) string {
		b, _ := json.MarshalIndent(v, "", "  ")
		return string(b)
	},
	"charts": charts,
}).Parse(reportTmpl))

// WriteHTML writes the self-contained report of r (no script, no external resource: the
// charts are inline SVG) to dir/<stamp>.html and returns the path.
func (r *Result) WriteHTML(dir, stamp string) (string, error) {
	var b bytes.Buffer
	if err := reportPage.Execute(&b, r); err != nil {
		return "", err
	}
	path := filepath.Join(dir, stamp+".html")
	return path, writeFileAtomic(path, b.Bytes())
}

// profValue formats a profile figure in its unit.
func profValue(unit string, v int64) string {
	switch unit {
	case "nanoseconds":
		return fmt.Sprintf("%.2fs", float64(v)/1e9)
	case "bytes":
		return fmt.Sprintf("%.1f MB", float64(v)/(1<<20))
	}
	return count(v)
}

// series is one line of a chart.
type series struct {
	name  string
	color string
	xs    []float64
	ys    []float64
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"}

// charts returns the SVG charts of a scenario's timelines.
func charts(s ScenarioResult) template.HTML {
	var out []string
	if l := s.Load; l != nil && len(l.Timeline) > 0 {
		var t, all, ok, p50, p99, p999 []float64
		for _, p := range l.Timeline {
			t = append(t, p.T)
			all, ok = append(all, p.Rate), append(ok, p.OK)
			p50, p99, p999 = append(p50, p.P50), append(p99, p.P99), append(p999, p.P999)
		}
		out = append(out, chart("throughput (answers/s)", false, []series{
			{name: "all answers", xs: t, ys: all}, {name: "2xx", xs: t, ys: ok},
		}))
		out = append(out, chart("latency (ms, log scale)", true, []series{
			{name: "p50", xs: t, ys: p50}, {name: "p99", xs: t, ys: p99}, {name: "p99.9", xs: t, ys: p999},
		}))
	}
	if f := s.Flash; f != nil && len(f.Persisted) > 0 {
		var t, n []float64
		for _, p := range f.Persisted {
			t, n = append(t, p.T), append(n, float64(p.Done))
		}
		out = append(out, chart("orders confirmed in PostgreSQL", false, []series{{name: "sold", xs: t, ys: n}}))
	}
	if d := s.Drain; d != nil && len(d.Timeline) > 0 {
		var t, r, lag []float64
		for _, p := range d.Timeline {
			t, r = append(t, p.T), append(r, p.Rate)
			l := float64(p.Lag)
			if p.Lag < 0 { // Kafka did not say
				l = math.NaN()
			}
			lag = append(lag, l)
		}
		out = append(out, chart("orders/s into PostgreSQL", false, []series{{name: "orders/s", xs: t, ys: r}}))
		out = append(out, chart("consumer group lag (records)", false, []series{{name: "lag", xs: t, ys: lag}}))
	}
	return template.HTML(strings.Join(out, "\n"))
}

// chart draws series as an SVG line chart, x in seconds.
func chart(title string, logY bool, ss []series) string {
	const w, h, left, right, top, bottom = 460.0, 220.0, 56.0, 12.0, 24.0, 34.0
	pw, ph := w-left-right, h-top-bottom
	xmax, ymin, ymax := 0.0, math.Inf(1), 0.0
	for _, s := range ss {
		for i := range s.xs {
			xmax = math.Max(xmax, s.xs[i])
			if y := s.ys[i]; !math.IsNaN(y) && (y > 0 || !logY) {
				ymax = math.Max(ymax, y)
				if y > 0 {
					ymin = math.Min(ymin, y)
				}
			}
		}
	}
	if xmax <= 0 {
		xmax = 1
	}
	var yticks []float64
	var ylo, yhi float64
	if logY {
		if math.IsInf(ymin, 1) {
			ymin, ymax = 0.1, 1
		}
		ylo, yhi = math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(math.Max(ymax, ymin*1.01)))
		if yhi <= ylo {
			yhi = ylo + 1
		}
		for e := ylo; e <= yhi; e++ {
			yticks = append(yticks, math.Pow(10, e))
		}
	} else {
		step := niceStep(math.Max(ymax, 1) / 4)
		yhi = step * math.Ceil(math.Max(ymax, 1)/step)
		for v := 0.0; v <= yhi+step/2; v += step {
			yticks = append(yticks, v)
		}
	}
	px := func(x float64) float64 { return left + pw*x/xmax }
	py := func(y float64) float64 {
		if logY {
			y = math.Max(y, math.Pow(10, ylo))
			return top + ph*(1-(math.Log10(y)-ylo)/(yhi-ylo))
		}
		return top + ph*(1-y/yhi)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img"><title>%s</title>`, w, h, w, h, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<text x="%.0f" y="15" class="title">%s</text>`, left, template.HTMLEscapeString(title))
	for _, v := range yticks {
		y := py(v)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" class="grid"/>`, left, left+pw, y, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="tick" text-anchor="end">%s</text>`, left-4, y+4, short(v))
	}
	xstep := niceStep(xmax / 5)
	for v := 0.0; v <= xmax+1e-9; v += xstep {
		x := px(v)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" class="grid"/>`, x, x, top, top+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="tick" text-anchor="middle">%ss</text>`, x, top+ph+14, short(v))
	}
	for i, s := range ss {
		color := s.color
		if color == "" {
			color = palette[i%len(palette)]
		}
		var pts []string
		for j := range s.xs {
			if math.IsNaN(s.ys[j]) || logY && s.ys[j] <= 0 {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.xs[j]), py(s.ys[j])))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, color, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="10" height="3" fill="%s"/><text x="%.0f" y="%.0f" class="tick">%s</text>`,
			left+8+float64(i)*90, h-8, color, left+22+float64(i)*90, h-4, template.HTMLEscapeString(s.name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// niceStep rounds a raw step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// short formats an axis value: 1.5k, 20k, 1.2M, 0.01.
func short(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v/1e6), ".0") + "M"
	case a >= 1e3:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v/1e3), ".0") + "k"
	case a >= 1 || a == 0:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0")
	}
	return fmt.Sprintf("%g", v)
}
