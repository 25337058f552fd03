package bench

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"sort"
	"strings"
	"time"
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
	p, err := parseProfile(raw)
	if err != nil {
		return Profile{}, err
	}
	idx := len(p.sampleTypes) - 1
	if sampleType != "" {
		idx = -1
		for i, st := range p.sampleTypes {
			if st.typ == sampleType {
				idx = i
			}
		}
	}
	if idx < 0 {
		var have []string
		for _, st := range p.sampleTypes {
			have = append(have, st.typ)
		}
		return Profile{}, fmt.Errorf("profile has no sample type %q (it has %s)", sampleType, strings.Join(have, ", "))
	}
	out := Profile{Kind: p.sampleTypes[idx].typ, Unit: p.sampleTypes[idx].unit}
	flat, cum := map[string]int64{}, map[string]int64{}
	seen := map[string]bool{}
	for _, s := range p.samples {
		if idx >= len(s.values) {
			continue
		}
		v := s.values[idx]
		if v == 0 {
			continue
		}
		out.Total += v
		clear(seen)
		for li, locID := range s.locations {
			loc := p.locations[locID]
			for fi, fnID := range loc {
				name := p.functions[fnID]
				if name == "" {
					name = "?"
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

// The rest of this file reads the profile.proto format of github.com/google/pprof: the few
// fields Top needs, with a minimal protobuf decoder, so that reading a profile does not need a
// new dependency (or the go tool at run time).

type sampleType struct{ typ, unit string }

type sample struct {
	locations []uint64
	values    []int64
}

type profile struct {
	sampleTypes []sampleType
	samples     []sample
	locations   map[uint64][]uint64 // location id -> function ids, innermost (inlined) first
	functions   map[uint64]string   // function id -> name
}

var errProto = errors.New("malformed pprof profile")

func parseProfile(raw []byte) (*profile, error) {
	if len(raw) >= 2 && raw[0] == 0x1f && raw[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("read profile: %w", err)
		}
		if raw, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("read profile: %w", err)
		}
	}
	var (
		strs    []string
		stTypes [][2]int64 // string indexes
		fnNames = map[uint64]int64{}
		p       = &profile{locations: map[uint64][]uint64{}, functions: map[uint64]string{}}
	)
	err := eachField(raw, func(field int, wire int, v uint64, b []byte) error {
		switch field {
		case 1: // sample_type
			var st [2]int64
			err := eachField(b, func(f, _ int, v uint64, _ []byte) error {
				if f == 1 || f == 2 {
					st[f-1] = int64(v)
				}
				return nil
			})
			stTypes = append(stTypes, st)
			return err
		case 2: // sample
			var s sample
			err := eachField(b, func(f, w int, v uint64, b []byte) error {
				switch f {
				case 1:
					return appendVarints(&s.locations, w, v, b)
				case 2:
					var u []uint64
					if err := appendVarints(&u, w, v, b); err != nil {
						return err
					}
					for _, x := range u {
						s.values = append(s.values, int64(x))
					}
				}
				return nil
			})
			p.samples = append(p.samples, s)
			return err
		case 4: // location
			var id uint64
			var fns []uint64
			err := eachField(b, func(f, _ int, v uint64, b []byte) error {
				switch f {
				case 1:
					id = v
				case 4: // line
					return eachField(b, func(f, _ int, v uint64, _ []byte) error {
						if f == 1 {
							fns = append(fns, v)
						}
						return nil
					})
				}
				return nil
			})
			p.locations[id] = fns
			return err
		case 5: // function
			var id uint64
			var name int64
			err := eachField(b, func(f, _ int, v uint64, _ []byte) error {
				switch f {
				case 1:
					id = v
				case 2:
					name = int64(v)
				}
				return nil
			})
			fnNames[id] = name
			return err
		case 6: // string_table
			strs = append(strs, string(b))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	str := func(i int64) string {
		if i >= 0 && i < int64(len(strs)) {
			return strs[i]
		}
		return ""
	}
	for _, st := range stTypes {
		p.sampleTypes = append(p.sampleTypes, sampleType{typ: str(st[0]), unit: str(st[1])})
	}
	for id, name := range fnNames {
		p.functions[id] = str(name)
	}
	if len(p.sampleTypes) == 0 {
		return nil, fmt.Errorf("%w: no sample types", errProto)
	}
	return p, nil
}

// appendVarints appends a repeated varint field, packed (wire type 2) or not.
func appendVarints(dst *[]uint64, wire int, v uint64, b []byte) error {
	if wire == 0 {
		*dst = append(*dst, v)
		return nil
	}
	for len(b) > 0 {
		x, n := uvarint(b)
		if n <= 0 {
			return errProto
		}
		*dst = append(*dst, x)
		b = b[n:]
	}
	return nil
}

// eachField calls fn with each field of a protobuf message: its number, wire type, and value
// (varints and fixed-size values in v, length-delimited ones in b).
func eachField(msg []byte, fn func(field, wire int, v uint64, b []byte) error) error {
	for len(msg) > 0 {
		key, n := uvarint(msg)
		if n <= 0 {
			return errProto
		}
		msg = msg[n:]
		field, wire := int(key>>3), int(key&7)
		var v uint64
		var b []byte
		switch wire {
		case 0:
			v, n = uvarint(msg)
			if n <= 0 {
				return errProto
			}
			msg = msg[n:]
		case 1:
			if len(msg) < 8 {
				return errProto
			}
			for i := 7; i >= 0; i-- {
				v = v<<8 | uint64(msg[i])
			}
			msg = msg[8:]
		case 2:
			l, n := uvarint(msg)
			if n <= 0 || uint64(len(msg)-n) < l {
				return errProto
			}
			b = msg[n : n+int(l)]
			msg = msg[n+int(l):]
		case 5:
			if len(msg) < 4 {
				return errProto
			}
			v = uint64(msg[0]) | uint64(msg[1])<<8 | uint64(msg[2])<<16 | uint64(msg[3])<<24
			msg = msg[4:]
		default:
			return fmt.Errorf("%w: wire type %d", errProto, wire)
		}
		if err := fn(field, wire, v, b); err != nil {
			return err
		}
	}
	return nil
}

func uvarint(b []byte) (uint64, int) { return binary.Uvarint(b) }
