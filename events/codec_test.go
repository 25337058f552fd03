package events

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// reference is what Decode did before decodeFast: encoding/json, then Validate.
func reference(b []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return Event{}, err
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// sameEvent reports whether a and b are equal, their times the same instant in zones of the
// same name and offset (a parsed offset is a new *time.Location every time).
func sameEvent(a, b Event) bool {
	sameTime := func(x, y time.Time) bool {
		xn, xo := x.Zone()
		yn, yo := y.Zone()
		return x.Equal(y) && xn == yn && xo == yo
	}
	if !sameTime(a.OccurredAt, b.OccurredAt) || !sameTime(a.Deadline, b.Deadline) {
		return false
	}
	a.OccurredAt, b.OccurredAt, a.Deadline, b.Deadline = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return a == b
}

// checkDecode fails the test unless decodeFast declines b or gives json.Unmarshal's event, and
// Decode gives the reference's answer. It reports whether decodeFast took b.
func checkDecode(t *testing.T, b []byte) bool {
	t.Helper()
	var fast Event
	took := decodeFast(b, &fast)
	if took {
		var want Event
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("decodeFast took %q, which json.Unmarshal rejects: %v", b, err)
		}
		if !sameEvent(fast, want) {
			t.Fatalf("decodeFast(%q)\n = %+v\nwant %+v (json.Unmarshal)", b, fast, want)
		}
	}
	got, gotErr := Decode(b)
	want, wantErr := reference(b)
	if (gotErr == nil) != (wantErr == nil) || !sameEvent(got, want) {
		t.Fatalf("Decode(%q) = %+v, %v\nreference  = %+v, %v", b, got, gotErr, want, wantErr)
	}
	if gotErr != nil && !strings.Contains(gotErr.Error(), wantErr.Error()) {
		t.Fatalf("Decode(%q) error %q does not carry the reference's %q", b, gotErr, wantErr)
	}
	return took
}

// TestDecodeFastGolden: the golden events, as their files have them and as Encode writes them,
// take the fast path and decode to what encoding/json says.
func TestDecodeFastGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("golden files: %v, %v", files, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !checkDecode(t, b) {
			t.Errorf("%s: decodeFast declined a golden event", f)
		}
	}
	now := time.Now().UTC()
	e := Event{Type: OrderRequested, Version: Version, EventID: NewID(), OccurredAt: now, OrderID: NewOrderID("drain"),
		CampaignID: "drain", UserID: "drain-x1y2-u123", Quantity: 1, Deadline: now.Add(2 * time.Minute)}
	b, err := Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	if !checkDecode(t, b) {
		t.Errorf("decodeFast declined %s", b)
	}
}

// TestDecodeCases: Decode agrees with the reference on testdata/decode_cases.txt, one input a
// line: well-formed events in other shapes, and the ways JSON and events go wrong.
func TestDecodeCases(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "decode_cases.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var took, n int
	for sc.Scan() {
		n++
		if checkDecode(t, bytes.Clone(sc.Bytes())) {
			took++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 50 || took < 5 {
		t.Errorf("%d cases, %d on the fast path: the file lost its cases", n, took)
	}
}

// TestEncodeFast: appendFast writes json.Marshal's bytes or declines; the golden events and
// the consumer's OrderConfirmed take it.
func TestEncodeFast(t *testing.T) {
	occurred := time.Date(2025, 11, 11, 0, 0, 0, 123456789, time.UTC)
	base := Event{Type: OrderConfirmed, Version: Version, EventID: "01jc0000000000000000000002", OccurredAt: occurred,
		OrderID: "singles-day.01jc00000000000000000000aa", CampaignID: "singles-day", UserID: "user-42", Quantity: 2}
	cases := map[string]struct {
		e    Event
		fast bool
	}{
		"confirmed":        {base, true},
		"with deadline":    {with(base, func(e *Event) { e.Deadline = occurred.Add(time.Minute) }), true},
		"with reason":      {with(base, func(e *Event) { e.Reason = ReasonExpired }), true},
		"whole seconds":    {with(base, func(e *Event) { e.OccurredAt = occurred.Truncate(time.Second) }), true},
		"zero time":        {with(base, func(e *Event) { e.OccurredAt = time.Time{} }), true},
		"local zone":       {with(base, func(e *Event) { e.OccurredAt = occurred.In(time.FixedZone("X", 3600)) }), false},
		"year 10000":       {with(base, func(e *Event) { e.OccurredAt = occurred.AddDate(8000, 0, 0) }), false},
		"html in user":     {with(base, func(e *Event) { e.UserID = "<b>&" }), false},
		"quote in reason":  {with(base, func(e *Event) { e.Reason = `say "no"` }), false},
		"unicode in user":  {with(base, func(e *Event) { e.UserID = "ü\u2028" }), false},
		"invalid utf8":     {with(base, func(e *Event) { e.UserID = "\xff" }), false},
		"negative numbers": {with(base, func(e *Event) { e.Quantity, e.Version = -5, -1 }), true},
		"empty strings":    {Event{OccurredAt: occurred}, true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := appendFast(nil, &c.e)
			if ok != c.fast {
				t.Errorf("appendFast took it: %v, want %v", ok, c.fast)
			}
			checkEncode(t, c.e)
			if ok {
				want, _ := json.Marshal(c.e)
				if !bytes.Equal(got, want) {
					t.Errorf("appendFast = %s\njson.Marshal = %s", got, want)
				}
			}
		})
	}
}

func with(e Event, f func(*Event)) Event { f(&e); return e }

// checkEncode fails the test unless Encode and json.Marshal agree on e.
func checkEncode(t *testing.T, e Event) {
	t.Helper()
	got, gotErr := Encode(e)
	want, wantErr := json.Marshal(e)
	if (gotErr == nil) != (wantErr == nil) || !bytes.Equal(got, want) {
		t.Fatalf("Encode(%+v) = %s, %v\njson.Marshal = %s, %v", e, got, gotErr, want, wantErr)
	}
}

// FuzzDecodeFast: on any input, Decode answers as encoding/json and Validate do, and the fast
// path never takes what json.Unmarshal reads otherwise.
func FuzzDecodeFast(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "decode_cases.txt")); err == nil {
		for _, line := range bytes.Split(b, []byte("\n")) {
			f.Add(line)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkDecode(t, b) })
}

// FuzzEncodeFast: Encode writes json.Marshal's bytes for any event.
func FuzzEncodeFast(f *testing.F) {
	f.Add("OrderConfirmed", 1, "01jc0000000000000000000002", int64(1762819200123456789), "c.x", "c", "u", 2, int64(0), "", 0)
	f.Add("OrderFailed", 1, "id", int64(-62135596800000000), "c.x", "c", "<u>", 1, int64(1762819200000000000), "expired", 3600)
	f.Fuzz(func(t *testing.T, typ string, version int, id string, occurred int64, order, campaign, user string, qty int, deadline int64, reason string, offset int) {
		zone := time.UTC
		if offset != 0 {
			zone = time.FixedZone(fmt.Sprint(offset), offset%(48*3600))
		}
		e := Event{Type: Type(typ), Version: version, EventID: id, OccurredAt: time.Unix(0, occurred).In(zone),
			OrderID: order, CampaignID: campaign, UserID: user, Quantity: qty, Reason: reason}
		if deadline != 0 {
			e.Deadline = time.Unix(0, deadline).UTC()
		}
		checkEncode(t, e)
	})
}

// BenchmarkCodec compares the events' codec with encoding/json's on the consumer's work: an
// OrderRequested decoded, an OrderConfirmed encoded.
//
//	go test -run '^$' -bench Codec ./events/
func BenchmarkCodec(b *testing.B) {
	now := time.Now().UTC()
	e := Event{Type: OrderRequested, Version: Version, EventID: NewID(), OccurredAt: now, OrderID: NewOrderID("bench-drain"),
		CampaignID: "bench-drain", UserID: "drain-x1y2z3-u12345", Quantity: 1, Deadline: now.Add(time.Hour)}
	raw, err := json.Marshal(e)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decode=json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reference(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode=fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Decode(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	c := e.New(OrderConfirmed, now)
	b.Run("encode=json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode=fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Encode(c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
