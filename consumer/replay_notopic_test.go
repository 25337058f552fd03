package consumer_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
)

// TestReplayOfATopicThatIsNotThere: a replay of a requested topic Kafka does not have (a
// mistyped --topic-prefix, the wrong cluster) fails and names the topic. It read no offsets,
// printed "0 events" and succeeded: an operator mending a restored store read that nothing
// was missing.
func TestReplayOfATopicThatIsNotThere(t *testing.T) {
	brokers := kafkatest.Fake(t)
	topics := events.NewTopics("not-there")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stats, err := consumer.Replay(ctx, consumer.Config{Brokers: brokers, Topics: topics,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, consumer.From{}, nil, nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), topics.Requested) {
		t.Fatalf("replay of a missing topic: %+v, %v; want an error naming %s", stats, err, topics.Requested)
	}
}
