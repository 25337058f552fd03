package events_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
)

// logged is a log handler that keeps the records at WARN and above, or with info, at INFO too.
type logged struct {
	info bool
	mu   sync.Mutex
	msgs []string
}

func (h *logged) Enabled(_ context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.info && l >= slog.LevelInfo
}
func (h *logged) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, b.String())
	return nil
}
func (h *logged) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logged) WithGroup(string) slog.Handler      { return h }

func (h *logged) find(substr string) string {
	m := h.all(substr)
	if len(m) == 0 {
		return ""
	}
	return m[0]
}

// all returns the records that hold substr.
func (h *logged) all(substr string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var found []string
	for _, m := range h.msgs {
		if strings.Contains(m, substr) {
			found = append(found, m)
		}
	}
	return found
}

// TestConsumePipelinedLogsFetchErrors: franz-go hands the poll the errors it cannot mend
// itself (an ACL that refuses the topic, data loss on the broker, a group session lost, a
// corrupt batch), and goes on. The loop dropped them all: a consumer that read nothing said
// nothing. Here the broker refuses the topic for a second: the loop logs it, naming the
// partition and the error, once (not at every fetch), and consumes the records once the
// broker lets it.
func TestConsumePipelinedLogsFetchErrors(t *testing.T) {
	kafka := kafkatest.FakeCluster(t)
	brokers := kafka.ListenAddrs()
	topic := kafkatest.Topics(t, brokers).Requested
	produceN(t, brokers, topic, 3)
	refuseUntil := time.Now().Add(time.Second)
	kafka.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if time.Now().After(refuseUntil) {
			kafka.DropControl()
			return nil, nil, false
		}
		kafka.KeepControl()
		fr := req.(*kmsg.FetchRequest)
		resp := fr.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range fr.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	h := &logged{}
	var mu sync.Mutex
	seen := 0
	runPipelined(t, brokers, "g-"+events.NewID(), topic, slog.New(h), func(fs kgo.Fetches) func() error {
		mu.Lock()
		defer mu.Unlock()
		seen += fs.NumRecords()
		return nil
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		n := seen
		mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s %d of 3 records consumed", n)
		}
	}
	if m := h.find(kerr.TopicAuthorizationFailed.Message); !strings.Contains(m, "WARN") || !strings.Contains(m, topic) {
		t.Errorf("a fetch the broker refused: logged %q, want a WARN naming %s and the error", m, topic)
	}
	// The poll hears of it at every fetch for that second: once for each partition is enough.
	if h.mu.Lock(); len(h.msgs) > 3 {
		t.Errorf("a second of refused fetches logged %d lines, want one for each of the 3 partitions", len(h.msgs))
	}
	h.mu.Unlock()
}
