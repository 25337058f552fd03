package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	gojson "github.com/goccy/go-json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/seckill/seckill/events"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// occurred is a fixed time with nanoseconds, so the golden files also freeze the time precision.
var occurred = time.Date(2025, 11, 11, 0, 0, 0, 123456789, time.UTC)

// golden lists one fixed event per type and the file that freezes its encoding.
var golden = []struct {
	file  string
	event events.Event
}{
	{"order_requested.json", events.Event{
		Type:       events.OrderRequested,
		Version:    events.Version,
		EventID:    "01jc0000000000000000000001",
		OccurredAt: occurred,
		OrderID:    "singles-day.01jc00000000000000000000aa",
		CampaignID: "singles-day",
		UserID:     "user-42",
		Quantity:   2,
		Deadline:   occurred.Add(30 * time.Second),
	}},
	{"order_confirmed.json", events.Event{
		Type:       events.OrderConfirmed,
		Version:    events.Version,
		EventID:    "01jc0000000000000000000002",
		OccurredAt: occurred.Add(time.Second),
		OrderID:    "singles-day.01jc00000000000000000000aa",
		CampaignID: "singles-day",
		UserID:     "user-42",
		Quantity:   2,
	}},
	{"order_failed.json", events.Event{
		Type:       events.OrderFailed,
		Version:    events.Version,
		EventID:    "01jc0000000000000000000003",
		OccurredAt: occurred.Add(time.Minute),
		OrderID:    "singles-day.01jc00000000000000000000bb",
		CampaignID: "singles-day",
		UserID:     "user-7",
		Quantity:   1,
		Reason:     events.ReasonExpired,
	}},
	{"order_refunded.json", events.Event{
		Type:       events.OrderRefunded,
		Version:    events.Version,
		EventID:    "01jc0000000000000000000004",
		OccurredAt: occurred.Add(time.Hour),
		OrderID:    "singles-day.01jc00000000000000000000aa",
		CampaignID: "singles-day",
		UserID:     "user-42",
		Quantity:   2,
	}},
	{"order_refunded_paid.json", events.Event{
		Type:       events.OrderRefunded,
		Version:    events.Version,
		EventID:    "01jc0000000000000000000007",
		OccurredAt: occurred.Add(2 * time.Hour),
		OrderID:    "singles-day.01jc00000000000000000000dd",
		CampaignID: "singles-day",
		UserID:     "user-42",
		Quantity:   1,
		PaymentID:  "pay_7mQ2",
	}},
	{"order_paid.json", events.Event{
		Type:       events.OrderPaid,
		Version:    events.Version,
		EventID:    "01jc0000000000000000000005",
		OccurredAt: occurred.Add(2 * time.Minute),
		OrderID:    "singles-day.01jc00000000000000000000aa",
		CampaignID: "singles-day",
		UserID:     "user-42",
		Quantity:   2,
		PaymentID:  "pay_3xK9",
	}},
	{"order_expired.json", events.Event{
		Type:       events.OrderExpired,
		Version:    events.Version,
		EventID:    "01jc0000000000000000000006",
		OccurredAt: occurred.Add(15 * time.Minute),
		OrderID:    "singles-day.01jc00000000000000000000cc",
		CampaignID: "singles-day",
		UserID:     "user-9",
		Quantity:   1,
	}},
}

func TestGoldenEncode(t *testing.T) {
	for _, g := range golden {
		t.Run(string(g.event.Type), func(t *testing.T) {
			got, err := events.Encode(g.event)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			path := filepath.Join("testdata", g.file)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden file (run `go test ./events -run TestGolden -update` to create it): %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("the wire format of %s changed; if that is on purpose, bump events.Version and run with -update\n got: %s\nwant: %s", g.event.Type, got, want)
			}
		})
	}
}

func TestGoldenDecode(t *testing.T) {
	for _, g := range golden {
		t.Run(string(g.event.Type), func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", g.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := events.Decode(b)
			if err != nil {
				t.Fatalf("Decode %s: %v", g.file, err)
			}
			if !equalEvents(got, g.event) {
				t.Errorf("Decode %s:\n got %+v\nwant %+v", g.file, got, g.event)
			}
		})
	}
}

// TestGoldenFields guards the field names and their omission rules, which the byte comparison
// alone would let an -update run change silently.
func TestGoldenFields(t *testing.T) {
	common := []string{"type", "version", "event_id", "occurred_at", "order_id", "campaign_id", "user_id", "quantity"}
	extra := map[string][]string{ // by file: a paid order's refund names its payment
		"order_requested.json":     {"deadline"},
		"order_failed.json":        {"reason"},
		"order_paid.json":          {"payment_id"},
		"order_refunded_paid.json": {"payment_id"},
	}
	for _, g := range golden {
		t.Run(string(g.event.Type), func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", g.file))
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			want := append(append([]string(nil), common...), extra[g.file]...)
			if len(m) != len(want) {
				t.Errorf("%s has fields %v, want exactly %v", g.file, keys(m), want)
			}
			for _, k := range want {
				if _, ok := m[k]; !ok {
					t.Errorf("%s lacks field %q", g.file, k)
				}
			}
			if m["type"] != string(g.event.Type) || m["version"] != float64(events.Version) {
				t.Errorf("%s: type %v version %v", g.file, m["type"], m["version"])
			}
		})
	}
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// equalEvents compares events field by field, times by instant, since a decoded time's location
// need not be the encoded one's.
func equalEvents(a, b events.Event) bool {
	at, bt := a, b
	at.OccurredAt, bt.OccurredAt = time.Time{}, time.Time{}
	at.Deadline, bt.Deadline = time.Time{}, time.Time{}
	return at == bt && a.OccurredAt.Equal(b.OccurredAt) && a.Deadline.Equal(b.Deadline)
}

// valid returns the JSON of a valid OrderRequested event with the fields in patch replaced, and
// those patched to nil removed.
func valid(t *testing.T, patch map[string]any) []byte {
	t.Helper()
	m := map[string]any{
		"type":        "OrderRequested",
		"version":     events.Version,
		"event_id":    "01jc0000000000000000000001",
		"occurred_at": "2025-11-11T00:00:00Z",
		"order_id":    "c1.01jc00000000000000000000aa",
		"campaign_id": "c1",
		"user_id":     "u1",
		"quantity":    1,
	}
	for k, v := range patch {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecode(t *testing.T) {
	e, err := events.Decode(valid(t, nil))
	if err != nil {
		t.Fatalf("Decode of a valid event: %v", err)
	}
	if e.Type != events.OrderRequested || e.OrderID != "c1.01jc00000000000000000000aa" || e.Quantity != 1 ||
		!e.OccurredAt.Equal(time.Date(2025, 11, 11, 0, 0, 0, 0, time.UTC)) || !e.Deadline.IsZero() {
		t.Errorf("Decode = %+v", e)
	}
}

// TestDecodeTakesTheBounds: the largest quantity and the longest user id the api admits decode.
func TestDecodeTakesTheBounds(t *testing.T) {
	user := strings.Repeat("😀", events.MaxUserLen)
	e, err := events.Decode(valid(t, map[string]any{"quantity": events.MaxUnits, "user_id": user}))
	if err != nil || e.Quantity != events.MaxUnits || e.UserID != user {
		t.Errorf("Decode at the bounds = %+v, %v", e, err)
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input []byte
		want  string // in the error text
	}{
		{"empty", []byte(``), "decode event"},
		{"malformed json", []byte(`{"type":"OrderRequested",`), "decode event"},
		{"not an object", []byte(`[1,2,3]`), "decode event"},
		{"null", []byte(`null`), "unknown type"},
		{"wrong field type", valid(t, map[string]any{"quantity": "1"}), "decode event"},
		{"bad time", valid(t, map[string]any{"occurred_at": "yesterday"}), "decode event"},
		{"time zone of 24 hours", valid(t, map[string]any{"occurred_at": "2025-11-11T00:00:00+24:00"}), "RFC 3339"},
		{"deadline zone of 24 hours", valid(t, map[string]any{"deadline": "2025-11-11T00:00:00-24:00"}), "RFC 3339"},
		{"unknown type", valid(t, map[string]any{"type": "OrderShipped"}), "unknown type"},
		{"type in other case", valid(t, map[string]any{"type": "orderrequested"}), "unknown type"},
		{"missing type", valid(t, map[string]any{"type": nil}), "unknown type"},
		{"version 0", valid(t, map[string]any{"version": 0}), "unsupported version"},
		{"missing version", valid(t, map[string]any{"version": nil}), "unsupported version"},
		{"negative version", valid(t, map[string]any{"version": -1}), "unsupported version"},
		{"newer version", valid(t, map[string]any{"version": events.Version + 1}), "unsupported version"},
		{"missing order id", valid(t, map[string]any{"order_id": nil}), "required"},
		{"missing campaign id", valid(t, map[string]any{"campaign_id": ""}), "required"},
		{"missing user id", valid(t, map[string]any{"user_id": nil}), "required"},
		{"quantity 0", valid(t, map[string]any{"quantity": 0}), "quantity"},
		{"missing quantity", valid(t, map[string]any{"quantity": nil}), "quantity"},
		{"negative quantity", valid(t, map[string]any{"quantity": -3}), "quantity"},
		// The store refuses what follows on every retry (PostgreSQL's text takes no NUL; a sum
		// of quantities past int64 fails bigint), so Decode must: poison, not a stalled partition.
		{"quantity past MaxUnits", valid(t, map[string]any{"quantity": events.MaxUnits + 1}), "quantity"},
		{"quantity of 2^63-1", valid(t, map[string]any{"quantity": int64(math.MaxInt64)}), "quantity"},
		{"user id with a NUL byte", valid(t, map[string]any{"user_id": "mallory\x00"}), "user_id"},
		{"user id with a newline", valid(t, map[string]any{"user_id": "a\nb"}), "user_id"},
		{"user id with a bidi override", valid(t, map[string]any{"user_id": "a\u202eb"}), "user_id"},
		{"user id of invalid UTF-8", []byte(`{"type":"OrderRequested","version":1,"order_id":"c.x","campaign_id":"c","user_id":"u\ud800","quantity":1}`), "user_id"},
		{"user id too long", valid(t, map[string]any{"user_id": strings.Repeat("a", events.MaxUserLen+1)}), "user_id"},
		{"order id of another campaign", valid(t, map[string]any{"order_id": "c2.01jc00000000000000000000aa"}), "does not belong"},
		{"order id without campaign", valid(t, map[string]any{"order_id": "01jc00000000000000000000aa"}), "does not belong"},
		{"order id with campaign prefix", valid(t, map[string]any{"order_id": "c1x.01jc00000000000000000000aa"}), "does not belong"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := events.Decode(tc.input)
			if err == nil {
				t.Fatalf("Decode(%s) = %+v, want an error", tc.input, e)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Decode(%s) = %v, want an error about %q", tc.input, err, tc.want)
			}
			if e != (events.Event{}) {
				t.Errorf("Decode returned %+v with its error, want the zero event", e)
			}
		})
	}
}

func TestDecodeWrapsJSONError(t *testing.T) {
	_, err := events.Decode([]byte(`{"type":`))
	var syntax *gojson.SyntaxError // the codec's own: Decode keeps its error in the chain
	if !errors.As(err, &syntax) {
		t.Errorf("Decode error %v (%T) does not wrap a *json.SyntaxError", err, err)
	}
}

func TestEventNew(t *testing.T) {
	req := golden[0].event
	req.Reason = "left over"
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600))
	got := req.New(events.OrderConfirmed, now)
	if got.Type != events.OrderConfirmed || got.Version != events.Version {
		t.Errorf("New: type %s version %d", got.Type, got.Version)
	}
	if got.OrderID != req.OrderID || got.CampaignID != req.CampaignID || got.UserID != req.UserID || got.Quantity != req.Quantity {
		t.Errorf("New did not keep the order facts: %+v", got)
	}
	if got.EventID == req.EventID || len(got.EventID) != 26 {
		t.Errorf("New: event id %q, want a fresh one", got.EventID)
	}
	if !got.OccurredAt.Equal(now) || got.OccurredAt.Location() != time.UTC {
		t.Errorf("New: occurred_at %v, want %v in UTC", got.OccurredAt, now)
	}
	if !got.Deadline.IsZero() || got.Reason != "" {
		t.Errorf("New carried over deadline %v or reason %q", got.Deadline, got.Reason)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("New returned an invalid event: %v", err)
	}
}

func TestNewID(t *testing.T) {
	const n = 10000
	seen := make(map[string]bool, n)
	for range n {
		id := events.NewID()
		if len(id) != 26 {
			t.Fatalf("NewID() = %q, %d characters, want 26", id, len(id))
		}
		if strings.Trim(id, "0123456789abcdefghjkmnpqrstvwxyz") != "" {
			t.Fatalf("NewID() = %q has characters outside lowercase Crockford base32", id)
		}
		if seen[id] {
			t.Fatalf("NewID() returned %q twice", id)
		}
		seen[id] = true
	}
}

// TestNewIDTimeOrdered: an id made a millisecond after another sorts after it. In a bubble,
// a millisecond is exactly one.
func TestNewIDTimeOrdered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		prev := events.NewID()
		for range 20 {
			time.Sleep(time.Millisecond)
			id := events.NewID()
			if id <= prev {
				t.Fatalf("NewID() = %q after %q, 1ms later: want a greater id", id, prev)
			}
			prev = id
		}
	})
}

func TestOrderIDRoundTrip(t *testing.T) {
	for _, c := range []string{"c", "singles-day", "A_1", strings.Repeat("x", 64)} {
		id := events.NewOrderID(c)
		got, ok := events.CampaignOf(id)
		if !ok || got != c {
			t.Errorf("CampaignOf(NewOrderID(%q) = %q) = %q, %v", c, id, got, ok)
		}
		if !strings.HasPrefix(id, c+".") {
			t.Errorf("NewOrderID(%q) = %q, want the campaign as prefix", c, id)
		}
	}
	if a, b := events.NewOrderID("c"), events.NewOrderID("c"); a == b {
		t.Errorf("NewOrderID returned %q twice", a)
	}
}

func TestCampaignOfRejects(t *testing.T) {
	for _, id := range []string{
		"",
		"nodot",
		".01jc00000000000000000000aa",           // empty campaign
		"c1.",                                   // empty rest
		"-c.01jc00000000000000000000aa",         // campaign starts with '-'
		"c 1.01jc00000000000000000000aa",        // space in campaign
		"c/1.01jc00000000000000000000aa",        // slash in campaign
		"c1.01jc.0000",                          // a second dot
		"c1.01jc 0000",                          // space in the rest
		"c1.01jc{0000}",                         // braces would break the Redis hash tag
		"c1." + strings.Repeat("a", 65),         // rest too long
		strings.Repeat("c", 65) + ".01jc0000aa", // campaign too long
		"c1.ünïcode",
	} {
		if c, ok := events.CampaignOf(id); ok {
			t.Errorf("CampaignOf(%q) = %q, true; want false", id, c)
		}
	}
}

func TestValidCampaignID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{"c", true},
		{"singles-day", true},
		{"Sale_2025", true},
		{"9lives", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{"-leading-dash", false},
		{"_leading_underscore", false},
		{"has.dot", false},
		{"has space", false},
		{"has/slash", false},
		{"{tag}", false},
		{"colon:id", false},
		{"ünïcode", false},
		{"trailing\n", false},
	} {
		if got := events.ValidCampaignID(tc.id); got != tc.want {
			t.Errorf("ValidCampaignID(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}

func TestErrorCodeAndMessage(t *testing.T) {
	notFound := events.Errorf(events.CampaignNotFound, "campaign %q not found", "c1")
	for _, tc := range []struct {
		name    string
		err     error
		code    events.Code
		message string
	}{
		{"nil", nil, "", "internal error"},
		{"plain error", errors.New("connection refused"), events.Internal, "internal error"},
		{"seckill error", notFound, events.CampaignNotFound, `campaign "c1" not found`},
		{"wrapped once", fmt.Errorf("read campaign: %w", notFound), events.CampaignNotFound, `campaign "c1" not found`},
		{"wrapped twice", fmt.Errorf("api: %w", fmt.Errorf("read campaign: %w", notFound)), events.CampaignNotFound, `campaign "c1" not found`},
		{"first in chain wins", fmt.Errorf("outer: %w", &events.Error{Code: events.SoldOut, Message: "gone: " + notFound.Error()}), events.SoldOut, `gone: campaign_not_found: campaign "c1" not found`},
		{"joined", errors.Join(errors.New("other"), events.Errorf(events.LimitExceeded, "limit 2")), events.LimitExceeded, "limit 2"},
		{"formatted without %w", fmt.Errorf("read campaign: %v", notFound), events.Internal, "internal error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := events.ErrorCode(tc.err); got != tc.code {
				t.Errorf("ErrorCode(%v) = %q, want %q", tc.err, got, tc.code)
			}
			if got := events.ErrorMessage(tc.err); got != tc.message {
				t.Errorf("ErrorMessage(%v) = %q, want %q", tc.err, got, tc.message)
			}
		})
	}
}

func TestErrorString(t *testing.T) {
	err := events.Errorf(events.OrderNotFound, "order %q not found", "c1.x")
	if got, want := err.Error(), `order_not_found: order "c1.x" not found`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestTopics(t *testing.T) {
	got := events.NewTopics(events.DefaultPrefix)
	want := events.Topics{Prefix: "seckill", Requested: "seckill.orders.requested", Results: "seckill.orders.results", DLQ: "seckill.orders.dlq"}
	if got != want {
		t.Errorf("NewTopics(%q) = %+v, want %+v", events.DefaultPrefix, got, want)
	}
	if got.ConsumerGroup() != "seckill.orders.requested.consumer" || got.CompensatorGroup() != "seckill.orders.dlq.compensator" {
		t.Errorf("groups %q, %q", got.ConsumerGroup(), got.CompensatorGroup())
	}
	if all := got.All(); len(all) != 3 || all[0] != want.Requested || all[1] != want.Results || all[2] != want.DLQ {
		t.Errorf("All() = %v", all)
	}
	if k := string(events.Key(golden[0].event)); k != "singles-day/user-42" {
		t.Errorf("Key = %q, want campaign/user", k)
	}
}

func FuzzDecode(f *testing.F) {
	for _, g := range golden {
		b, err := events.Encode(g.event)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"type":"OrderRequested","version":1,"order_id":"c.x","campaign_id":"c","user_id":"u","quantity":1,"occurred_at":"2025-01-01T00:00:00+05:30"}`))
	f.Add([]byte(`{"type":"OrderFailed","version":1,"order_id":"c.x","campaign_id":"c","user_id":"\u00ff\ud800","quantity":9007199254740993}`))
	f.Add([]byte(`{"type":"OrderRefunded","version":1,"order_id":"c.x","campaign_id":"c","user_id":"u","quantity":1,"occurred_at":"0000-01-01T00:00:00+01:00","deadline":"9999-12-31T23:59:59-23:59"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	// The odd shapes a JSON reader trips on: padding, trailing data, duplicate keys, numbers
	// written otherwise, escapes, one per line.
	cases, err := os.ReadFile("testdata/decode_cases.txt")
	if err != nil {
		f.Fatal(err)
	}
	for line := range strings.SplitSeq(string(cases), "\n") {
		f.Add([]byte(line))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := events.Decode(b)
		if err != nil {
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("Decode accepted an event Validate rejects: %v", err)
		}
		again, err := events.Encode(e)
		if err != nil {
			t.Fatalf("Encode of a decoded event %+v: %v", e, err)
		}
		e2, err := events.Decode(again)
		if err != nil {
			t.Fatalf("Decode of re-encoded %s: %v", again, err)
		}
		if !equalEvents(e, e2) {
			t.Fatalf("round trip changed the event:\n first %+v\nsecond %+v", e, e2)
		}
	})
}

// TestValidUser: ids that print alike, or that decoding made alike, are refused.
func TestValidUser(t *testing.T) {
	for id, want := range map[string]bool{
		"alice": true, "Zoë 42": true, "b|o:b": true, "😀": true, strings.Repeat("a", 128): true,
		"": false, strings.Repeat("a", 129): false, "a\xffb": false,
		"a\ufffdb": false, "a\x00b": false, "a\nb": false, "a\u202eb": false, "a\u2066b": false,
		"a\u200bb": false, "a\ufeffb": false, "a\u200db": false, "a\ue000b": false, "a\U000F0000b": false,
	} {
		if got := events.ValidUser(id); got != want {
			t.Errorf("ValidUser(%q) = %v, want %v", id, got, want)
		}
	}
}

// FuzzValidUser: the printable-ASCII shortcut answers as the rule itself does.
func FuzzValidUser(f *testing.F) {
	for _, s := range []string{"alice", "", "a\x00b", "a\x7fb", "a\x1fb", " ", "~", "Zoë", "a\u200bb", "a\xffb",
		strings.Repeat("a", events.MaxUserLen), strings.Repeat("a", events.MaxUserLen+1), strings.Repeat("ü", events.MaxUserLen)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		want := id != "" && utf8.RuneCountInString(id) <= events.MaxUserLen && utf8.ValidString(id) &&
			!strings.ContainsFunc(id, func(r rune) bool {
				return r == utf8.RuneError || unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs)
			})
		if got := events.ValidUser(id); got != want {
			t.Fatalf("ValidUser(%q) = %v, the rule says %v", id, got, want)
		}
	})
}

// FuzzValidCampaignID: the loop accepts exactly what the documented pattern does.
func FuzzValidCampaignID(f *testing.F) {
	pattern := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	for _, s := range []string{"a", "-a", "_a", "a.b", "", "ä", "A_b-9", strings.Repeat("x", 64), strings.Repeat("x", 65)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := events.ValidCampaignID(id), pattern.MatchString(id); got != want {
			t.Fatalf("ValidCampaignID(%q) = %v, the pattern says %v", id, got, want)
		}
	})
}
