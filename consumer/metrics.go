package consumer

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/seckill/seckill/events"
)

var (
	batchSize = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "seckill_consumer_batch_size",
		Help:    "Events per batch persisted by the consumer.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 12),
	})
	persisted = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "seckill_consumer_orders_total",
		Help: "OrderRequested events handled by the consumer, by result (confirmed, duplicate, dead_lettered).",
	}, []string{"result"})
	lag = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "seckill_consumer_lag",
		Help: "Events behind the partition's high watermark after the last batch.",
	}, []string{"partition"})
	leftInRedis = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "seckill_consumer_unconfirmed_total",
		Help: "Orders the consumer stored confirmed or paid that Redis's confirm left as they were, by the reservation's state: confirmed (a redelivery: expected), refunded or expired (moved on in the store, restored from a backup), released or unknown (no reservation: the store and Redis disagree).",
	}, []string{"state"})
	deadLettered = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "seckill_dlq_total",
		Help: "Events sent to the dead-letter topic, by reason.",
	}, []string{"reason"})
)

// unknownState labels an order Redis has no reservation of in leftInRedis.
const unknownState = "unknown"

// The results of persisted, looked up once: every order of every batch counts in one of them.
var (
	persistedConfirmed    = persisted.WithLabelValues("confirmed")
	persistedDuplicate    = persisted.WithLabelValues("duplicate")
	persistedDeadLettered = persisted.WithLabelValues("dead_lettered")
)

// Every reason the consumer dead-letters for has its series from the start, at 0: Prometheus's
// increase() sees nothing in a series born at 1, so the first dead letter of each reason after
// a start would not raise SeckillDeadLetters (deploy/prometheus/alerts.yml).
func init() {
	for _, reason := range []string{events.ReasonPoison, string(events.CampaignNotFound), string(events.CampaignCancelled), events.ReasonStoreLimit, events.ReasonStoreSoldOut} {
		deadLettered.WithLabelValues(reason)
	}
}
