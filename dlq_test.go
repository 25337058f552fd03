package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
)

// TestShowDeadLetterWithoutValue: a dead letter too large for the DLQ with its value (a garbled
// record near max.message.bytes) goes without it. dlq show must say so and where the original
// is, not print an empty value as if the event had been empty; dlq list calls it unreadable.
func TestShowDeadLetterWithoutValue(t *testing.T) {
	src := &kgo.Record{Topic: "shop.orders.requested", Partition: 2, Offset: 7, Key: []byte("camp/ann"), Value: bytes.Repeat([]byte("x"), 1_000_000)}
	l := readDeadLetter(events.WithoutValue(events.DeadLetter("shop.orders.dlq", src, events.ReasonPoison+": decode event: invalid character 'x'")))
	var out strings.Builder
	l.print(&out, orderState(context.Background(), fakeAwaited{}, l))
	for _, want := range []string{
		"decode   no value: its 1000000 bytes were too large for the dead-letter topic and left out",
		"value    (left out: the original is at shop.orders.requested/2/7)",
		"now      unreadable: left to the sweeper",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dlq show of a dead letter without its value: want %q in\n%s", want, out.String())
		}
	}
}
