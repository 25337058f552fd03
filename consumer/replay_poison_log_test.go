package consumer_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/store/storetest"
)

// TestReplayLogsPoisonAtInfo: a replay reads again the poison events the consumer dead-lettered
// (and warned of) when it read them first, and counts them in its summary. It warned of each
// again, `{"level":"WARN","msg":"poison event",…}` in the middle of `seckill replay --dev --from
// start`, though nothing new was wrong; the store's refusals, as old, it logs at INFO.
func TestReplayLogsPoisonAtInfo(t *testing.T) {
	s := newReplaySale(t, storetest.MustOpen(t, storetest.SQLiteURL(t)), 10)
	if err := s.cl.ProduceSync(s.ctx, &kgo.Record{Topic: s.topics.Requested, Value: []byte("not json at all")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	stats, err := consumer.Replay(ctx, consumer.Config{Brokers: s.brokers, Topics: s.topics, Logger: slog.New(slog.NewTextHandler(&log, nil))},
		consumer.From{}, s.st, s.r, &strings.Builder{})
	if err != nil || stats.Poison != 1 {
		t.Fatalf("replay: %+v, %v; want the poison event counted", stats, err)
	}
	for _, line := range strings.Split(log.String(), "\n") {
		if strings.Contains(line, "poison event") && !strings.Contains(line, "level=INFO") {
			t.Errorf("replay logged the poison event the consumer dead-lettered above INFO:\n%s", line)
		}
	}
}
