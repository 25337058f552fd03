package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"sort"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// PprofHandler serves net/http/pprof's endpoints under /debug/pprof/, for the processes the
// bench starts (roles and baselines run behind `seckill bench role --pprof`).
func PprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Profile is the top of one pprof profile of one process during one scenario.
type Profile struct {
	Scenario string   `json:"scenario"`
	Process  string   `json:"process"`
	Kind     string   `json:"kind"` // cpu, alloc_space, alloc_objects
	Unit     string   `json:"unit"` // nanoseconds, bytes, count
	Seconds  float64  `json:"seconds"`
	Total    int64    `json:"total"`
	Flat     []TopRow `json:"top_flat"`
	Cum      []TopRow `json:"top_cum"`
	// File is where the raw profile was saved, for `go tool pprof`.
	File string `json:"file,omitempty"`
}

// TopRow is one function's share of a profile.
type TopRow struct {
	Func    string  `json:"func"`
	Flat    int64   `json:"flat"`
	FlatPct float64 `json:"flat_pct"`
	Cum     int64   `json:"cum"`
	CumPct  float64 `json:"cum_pct"`
}

// FetchProfile asks a pprof endpoint (http://host:port) for a profile over the next seconds:
// kind "cpu" for /debug/pprof/profile, or "allocs" for the delta of /debug/pprof/allocs. It
// returns the raw, gzipped protobuf.
func FetchProfile(ctx context.Context, base, kind string, seconds int) ([]byte, error) {
	path := "/debug/pprof/profile"
	if kind == "allocs" {
		path = "/debug/pprof/allocs"
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(seconds)*time.Second+30*time.Second)
	defer cancel()
	return fetch(ctx, fmt.Sprintf("%s%s?seconds=%d", base, path, seconds))
}

// fetch GETs url and returns the body of a 200 answer; any other answer is an error.
func fetch(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// Top reads a pprof profile (gzipped or plain protobuf) and returns the n functions with the
// most flat and the most cumulative weight in the sample type named sampleType ("cpu",
// "alloc_space", "alloc_objects"; "" for the profile's last, which is its default).
func Top(raw []byte, sampleType string, n int) (Profile, error) {
	p, err := profile.Parse(bytes.NewReader(raw)) // gzipped or not
	if err != nil {
		return Profile{}, fmt.Errorf("read profile: %w", err)
	}
	idx := len(p.SampleType) - 1
	if sampleType != "" {
		idx = -1
		for i, st := range p.SampleType {
			if st.Type == sampleType {
				idx = i
			}
		}
	}
	if idx < 0 {
		var have []string
		for _, st := range p.SampleType {
			have = append(have, st.Type)
		}
		return Profile{}, fmt.Errorf("profile has no sample type %q (it has %s)", sampleType, strings.Join(have, ", "))
	}
	out := Profile{Kind: p.SampleType[idx].Type, Unit: p.SampleType[idx].Unit}
	flat, cum := map[string]int64{}, map[string]int64{}
	seen := map[string]bool{}
	for _, s := range p.Sample {
		if idx >= len(s.Value) {
			continue
		}
		v := s.Value[idx]
		if v == 0 {
			continue
		}
		out.Total += v
		clear(seen)
		for li, loc := range s.Location {
			// A location's lines run from the innermost inlined function to its caller.
			for fi, line := range loc.Line {
				name := "?"
				if line.Function != nil && line.Function.Name != "" {
					name = line.Function.Name
				}
				if li == 0 && fi == 0 {
					flat[name] += v
				}
				if !seen[name] {
					seen[name] = true
					cum[name] += v
				}
			}
		}
	}
	var total float64
	rows := func(by map[string]int64) []TopRow {
		names := make([]string, 0, len(by))
		for name := range by {
			names = append(names, name)
		}
		sort.Slice(names, func(a, b int) bool {
			if by[names[a]] != by[names[b]] {
				return by[names[a]] > by[names[b]]
			}
			return names[a] < names[b]
		})
		names = names[:min(n, len(names))]
		out := make([]TopRow, len(names))
		for i, name := range names {
			out[i] = TopRow{Func: name, Flat: flat[name], Cum: cum[name]}
			if total > 0 {
				out[i].FlatPct = 100 * float64(flat[name]) / total
				out[i].CumPct = 100 * float64(cum[name]) / total
			}
		}
		return out
	}
	total = float64(out.Total)
	out.Flat, out.Cum = rows(flat), rows(cum)
	return out, nil
}
