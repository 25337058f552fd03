package compensator

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var compensations = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "seckill_compensations_total",
	Help: "Reservations the compensator resolved, by source (dlq, sweeper, operator) and outcome (released, refunded, confirmed, unchanged).",
}, []string{"source", "outcome"})

var auditViolations = promauto.NewGaugeVec(prometheus.GaugeOpts{
	Name: "seckill_audit_violations",
	Help: "Invariants the last `seckill audit` of the campaign found broken (0: it held).",
}, []string{"campaign"})
