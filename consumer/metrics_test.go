package consumer_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	_ "github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
)

// TestDeadLetterSeriesBeforeAnyDeadLetter: each reason the store refuses an order for, and
// poison, has its seckill_dlq_total series before anything is dead-lettered, so the alert sees
// the first dead letter as an increase from 0. (Run alone, no test has dead-lettered anything.)
func TestDeadLetterSeriesBeforeAnyDeadLetter(t *testing.T) {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "seckill_dlq_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					have[l.GetValue()] = true
				}
			}
		}
	}
	for _, reason := range []string{events.ReasonPoison, string(events.CampaignNotFound), events.ReasonStoreLimit, events.ReasonStoreSoldOut} {
		if !have[reason] {
			t.Errorf("seckill_dlq_total{reason=%q} is not exported before its first dead letter (exported: %v)", reason, have)
		}
	}
}
