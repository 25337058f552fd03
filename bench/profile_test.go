package bench

import (
	"bytes"
	"compress/gzip"
	"io"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
)

var sink [][]byte

//go:noinline
func allocateForTheProfile() {
	for range 2000 {
		sink = append(sink, make([]byte, 4096))
	}
	sink = nil
}

func TestTopOfARealProfile(t *testing.T) {
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	allocateForTheProfile()
	runtime.GC()
	var buf bytes.Buffer
	if err := pprof.Lookup("allocs").WriteTo(&buf, 0); err != nil {
		t.Fatal(err)
	}
	// Every row: the profile holds all this process allocated since it started, and the tests
	// before this one (a Kafka client's compressor, 24 MB) may put others above ours.
	p, err := Top(buf.Bytes(), "alloc_space", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != "alloc_space" || p.Unit != "bytes" || p.Total < 2000*4096 || len(p.Flat) == 0 || len(p.Cum) == 0 {
		t.Fatalf("%+v", p)
	}
	found := false
	for _, r := range p.Cum {
		if strings.HasSuffix(r.Func, "allocateForTheProfile") {
			found = r.Cum >= 2000*4096 && r.CumPct > 0 && r.CumPct <= 100
		}
	}
	if !found {
		t.Errorf("allocateForTheProfile is not in the profile with its %d bytes: %+v", 2000*4096, p.Cum)
	}
	for i := 1; i < len(p.Flat); i++ {
		if p.Flat[i].Flat > p.Flat[i-1].Flat {
			t.Fatalf("flat rows out of order: %+v", p.Flat)
		}
	}
	// The same profile uncompressed: runtime/pprof (and /debug/pprof) gzip it, other tools may not.
	zr, err := gzip.NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	if q, err := Top(plain, "alloc_space", 10); err != nil || q.Total != p.Total {
		t.Fatalf("uncompressed: total %d (%v), want %d", q.Total, err, p.Total)
	}
	if _, err := Top(buf.Bytes(), "cpu", 10); err == nil {
		t.Error("an allocation profile answered for cpu")
	}
}

func TestParseProfileRefusesGarbage(t *testing.T) {
	for _, b := range [][]byte{nil, {0x0a, 0xff}, {0x1f, 0x8b, 0, 0}, []byte("not a profile at all")} {
		if _, err := Top(b, "", 10); err == nil {
			t.Errorf("%q parsed", b)
		}
	}
}
