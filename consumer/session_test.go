package consumer_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events/kafkatest"
)

// TestSessionTimeoutTheBrokersRefuseStopsRun: a --session-timeout below the brokers'
// group.min.session.timeout.ms (kfake's is Kafka's default, 6 s) is a setting no wait mends:
// every join is refused with INVALID_SESSION_TIMEOUT. Run stops with it, naming the setting,
// rather than logging "fetch failed" once a minute while it persists nothing.
func TestSessionTimeoutTheBrokersRefuseStopsRun(t *testing.T) {
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers)
	cons, err := consumer.New(consumer.Config{Brokers: brokers, Topics: topics, SessionTimeout: 2 * time.Second,
		Logger: slog.New(slog.DiscardHandler)}, nil, &confirmer{})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = cons.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run with a session timeout the brokers refuse went on for 10s (returned %v)", err)
	}
	if err == nil || !strings.Contains(err.Error(), "session timeout 2s") || !strings.Contains(err.Error(), "INVALID_SESSION_TIMEOUT") {
		t.Fatalf("Run: %v, want an error naming the session timeout 2s and INVALID_SESSION_TIMEOUT", err)
	}
}
