package events_test

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
)

// TestWithoutValue: the dead letter of a record too large for the DLQ goes without the value,
// keeps the key and the headers that say why and where the original is, and says how many
// bytes were left out; the letter Kafka refused is left as it was, since the consumer may still
// hold it.
func TestWithoutValue(t *testing.T) {
	src := &kgo.Record{Topic: "shop.orders.requested", Partition: 3, Offset: 41, Key: []byte("camp/ann"), Value: bytes.Repeat([]byte("x"), 1_000_000)}
	letter := events.DeadLetter("shop.orders.dlq", src, events.ReasonPoison)
	headers := len(letter.Headers)
	small := events.WithoutValue(letter)
	if small.Topic != "shop.orders.dlq" || string(small.Key) != "camp/ann" || len(small.Value) != 0 {
		t.Errorf("WithoutValue = topic %s, key %q, %d bytes of value; want the DLQ, the key, no value", small.Topic, small.Key, len(small.Value))
	}
	for key, want := range map[string]string{events.HeaderReason: events.ReasonPoison, events.HeaderSourceTopic: src.Topic,
		events.HeaderSourcePartition: "3", events.HeaderSourceOffset: "41", events.HeaderValueOmitted: "1000000"} {
		if got := events.Header(small, key); got != want {
			t.Errorf("header %s = %q, want %q", key, got, want)
		}
	}
	if events.ValueOmitted(small) != 1_000_000 || events.ValueOmitted(letter) != 0 {
		t.Errorf("ValueOmitted = %d without the value, %d with it; want 1000000 and 0", events.ValueOmitted(small), events.ValueOmitted(letter))
	}
	if len(letter.Headers) != headers || len(letter.Value) != 1_000_000 {
		t.Errorf("the refused letter was changed: %d headers, %d bytes of value", len(letter.Headers), len(letter.Value))
	}
}

// TestDeadLetterBoundsItsReasonAndKey: a reason quotes the event's ids, which a garbled record
// may make as large as itself; the header is cut to a kilobyte of valid UTF-8, and a letter
// without its value drops a key as large, so that it always fits.
func TestDeadLetterBoundsItsReasonAndKey(t *testing.T) {
	src := &kgo.Record{Topic: "shop.orders.requested", Key: bytes.Repeat([]byte("k"), 500_000), Value: []byte("x")}
	reason := "poison: order id " + strings.Repeat("é\\x7f", 400_000)
	letter := events.DeadLetter("shop.orders.dlq", src, reason)
	got := events.Header(letter, events.HeaderReason)
	if len(got) > 1024 || !utf8.ValidString(got) || !strings.HasPrefix(got, "poison: order id é") || !strings.HasSuffix(got, "…") {
		t.Errorf("reason header of %d bytes (valid UTF-8: %v), starting %.30q; want at most 1024, cut with …", len(got), utf8.ValidString(got), got)
	}
	if small := events.WithoutValue(letter); len(small.Key) != 0 {
		t.Errorf("WithoutValue kept a key of %d bytes", len(small.Key))
	}
	if short := events.DeadLetter("shop.orders.dlq", src, events.ReasonPoison); events.Header(short, events.HeaderReason) != events.ReasonPoison {
		t.Errorf("a short reason was changed: %q", events.Header(short, events.HeaderReason))
	}
}
