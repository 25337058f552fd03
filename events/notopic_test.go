package events_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
)

// TestConsumeWarnsOfAMissingTopic: a consumer started before any api, which creates the topics,
// logged "consuming" and then nothing for as long as they were missing (franz-go waits for a
// topic without a word): the person on call saw a silent process. It warns once, naming the
// topic and what creates it, not at every metadata refresh, and says when the topic is there.
func TestConsumeWarnsOfAMissingTopic(t *testing.T) {
	brokers := kafkatest.Real(t)
	topics := events.NewTopics("t" + strings.ToLower(events.NewID()))
	h := &logged{info: true}
	runPipelined(t, brokers, "g-"+events.NewID(), topics.Requested, slog.New(h), func(kgo.Fetches) func() error { return nil })
	waitLogged(t, h, "missing", topics.Requested)
	time.Sleep(5 * time.Second) // franz-go looks for it again every few hundred ms to 5 s
	if m := h.all("missing"); len(m) != 1 || !strings.Contains(m[0], "WARN") || !strings.Contains(m[0], "seckill api") {
		t.Fatalf("5 s of a missing topic logged %q, want one WARN naming it and seckill api", m)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := events.CreateTopics(ctx, kadm.NewClient(kafkatest.Client(t, brokers)), topics, 3, 1); err != nil {
		t.Fatal(err)
	}
	if m := waitLogged(t, h, "found", topics.Requested); !strings.Contains(m, "INFO") {
		t.Errorf("the topic created: logged %q, want it at INFO", m)
	}
}

// waitLogged waits up to 20 s for a record holding both substr and topic, and returns it.
func waitLogged(t *testing.T, h *logged, substr, topic string) string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, m := range h.all(substr) {
			if strings.Contains(m, topic) {
				return m
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	t.Fatalf("after 20 s no record of %q naming %s; logged %q", substr, topic, h.msgs)
	return ""
}
