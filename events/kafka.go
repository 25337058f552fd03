package events

import (
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// NewClient returns a Kafka client with seckill's producer guarantees, plus opts: every record
// is acknowledged by all in-sync replicas, and the producer is idempotent (franz-go's default),
// so a retried produce never writes an event twice.
func NewClient(brokers []string, opts ...kgo.Opt) (*kgo.Client, error) {
	base := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client for %v: %w", brokers, err)
	}
	return cl, nil
}

// Record returns the Kafka record of e on topic, keyed by Key.
func Record(topic string, e Event) (*kgo.Record, error) {
	b, err := Encode(e)
	if err != nil {
		return nil, fmt.Errorf("encode %s %s: %w", e.Type, e.OrderID, err)
	}
	return &kgo.Record{Topic: topic, Key: Key(e), Value: b}, nil
}

// DeadLetter returns the DLQ record of src, which failed for reason; the headers say why and
// where it came from, and the value is src's, byte for byte.
func DeadLetter(dlq string, src *kgo.Record, reason string) *kgo.Record {
	return &kgo.Record{
		Topic: dlq,
		Key:   src.Key,
		Value: src.Value,
		Headers: []kgo.RecordHeader{
			{Key: HeaderReason, Value: []byte(reason)},
			{Key: HeaderSourceTopic, Value: []byte(src.Topic)},
			{Key: HeaderSourcePartition, Value: []byte(strconv.Itoa(int(src.Partition)))},
			{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(src.Offset, 10))},
		},
	}
}

// Header returns the value of the record header key, or "".
func Header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
