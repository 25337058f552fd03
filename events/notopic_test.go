package events_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

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
	adm := kadm.NewClient(kafkatest.Client(t, brokers))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := events.DeleteTopics(ctx, adm, topics.All()...); err != nil {
			t.Logf("delete the test's topics: %v", err)
		}
	})
	h, looks := &logged{info: true}, &metadataReads{}
	cl, err := events.NewGroupClient(brokers, "g-"+events.NewID(), topics.Requested, 0, nil, kgo.WithHooks(looks))
	if err != nil {
		t.Fatal(err)
	}
	runPipelinedOn(t, cl, slog.New(h), func(kgo.Fetches) func() error { return nil })
	waitLogged(t, h, "missing", topics.Requested)
	// The case: franz-go looks for the topic again after the warning (twice: one look may have
	// been under way), every few hundred ms to 5 s, and the watch reads each answer. Within 20 s,
	// well inside the 30 s between warnings.
	for seen, deadline := looks.n.Load(), time.Now().Add(20*time.Second); looks.n.Load() < seen+2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s the client has not looked for the missing topic twice more (%d looks)", looks.n.Load()-seen)
		}
	}
	if m := h.all("missing"); len(m) != 1 || !strings.Contains(m[0], "WARN") || !strings.Contains(m[0], "seckill api") {
		t.Fatalf("two more looks for a missing topic logged %q, want one WARN naming it and seckill api", m)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := events.CreateTopics(ctx, adm, topics, 3, 1); err != nil {
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

// metadataReads counts a client's metadata answers: each is a look for the topics it consumes.
type metadataReads struct{ n atomic.Int64 }

func (m *metadataReads) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == int16(kmsg.Metadata) && err == nil {
		m.n.Add(1)
	}
}
