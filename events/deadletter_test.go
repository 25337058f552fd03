package events_test

import (
	"bytes"
	"testing"

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
