package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
)

// series returns the values of label in the exported series of metric.
func series(t *testing.T, metric, label string) map[string]bool {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					have[l.GetValue()] = true
				}
			}
		}
	}
	return have
}

// TestDeadLetterSeriesBeforeAnyDeadLetter: each reason the store refuses an order for, and
// poison, has its seckill_dlq_total series before anything is dead-lettered, so the alert sees
// the first dead letter as an increase from 0. (Run alone, no test has dead-lettered anything.)
func TestDeadLetterSeriesBeforeAnyDeadLetter(t *testing.T) {
	have := series(t, "seckill_dlq_total", "reason")
	for _, reason := range []string{events.ReasonPoison, string(events.CampaignNotFound), events.ReasonStoreLimit, events.ReasonStoreSoldOut} {
		if !have[reason] {
			t.Errorf("seckill_dlq_total{reason=%q} is not exported before its first dead letter (exported: %v)", reason, have)
		}
	}
}

// TestLagForgetsPartitionsGivenUp: a consumer that gives its partitions up (here by leaving the
// group; a rebalance revokes them the same way) stops exporting their lag, which would otherwise
// stay at its last batch's beside the new owner's figure.
func TestLagForgetsPartitionsGivenUp(t *testing.T) {
	const n = 60
	ctx := context.Background()
	st, campaign, brokers, topics := backlog(t, "lag", n)

	cons, err := consumer.New(consumer.Config{Brokers: brokers, Topics: topics}, st, &confirmer{})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cons.Run(runCtx) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, err := st.Campaign(ctx, campaign)
		if err != nil {
			t.Fatal(err)
		}
		if c.Sold == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s %d of %d orders persisted", c.Sold, n)
		}
	}
	// The lag is set once the batch's store commit returns, a moment after the rows show.
	for deadline := time.Now().Add(5 * time.Second); len(series(t, "seckill_consumer_lag", "partition")) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no seckill_consumer_lag series 5s after the consumer persisted every order")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	cons.Close()
	if lags := series(t, "seckill_consumer_lag", "partition"); len(lags) != 0 {
		t.Errorf("seckill_consumer_lag still has partitions %v after the consumer left the group", lags)
	}
}
