package events

import (
	stdjson "encoding/json"
	"testing"
	"time"
)

// BenchmarkCodec: an OrderRequested decoded and an OrderConfirmed encoded, the consumer's work
// per order, by the codec events uses and by encoding/json, side by side.
func BenchmarkCodec(b *testing.B) {
	now := time.Now().UTC()
	e := Event{Type: OrderRequested, Version: Version, EventID: NewID(), OccurredAt: now, OrderID: NewOrderID("bench-drain"),
		CampaignID: "bench-drain", UserID: "drain-x1y2z3-u12345", Quantity: 1, Deadline: now.Add(time.Hour)}
	raw, err := Encode(e)
	if err != nil {
		b.Fatal(err)
	}
	c := e.New(OrderConfirmed, now)
	b.Run("decode=events", func(b *testing.B) {
		for b.Loop() {
			if _, err := Decode(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode=encoding-json", func(b *testing.B) {
		for b.Loop() {
			var got Event
			if err := stdjson.Unmarshal(raw, &got); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode=events", func(b *testing.B) {
		for b.Loop() {
			if _, err := Encode(c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode=encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := stdjson.Marshal(c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
