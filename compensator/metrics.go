package compensator

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var compensations = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "seckill_compensations_total",
	Help: "Reservations the compensator resolved, by source (dlq, sweeper, operator) and outcome (released, refunded, confirmed, unchanged; paid_announced: the sweeper announced the OrderPaid of a payment Kafka had not taken; for dead letters unreadable; lost: an order Redis holds confirmed, refunded or expired that the store lost, left out of it; and malformed: its reservation record Redis cannot parse, left pending for a person).",
}, []string{"source", "outcome"})

var auditViolations = promauto.NewGaugeVec(prometheus.GaugeOpts{
	Name: "seckill_audit_violations",
	Help: "Invariants the last `seckill audit` of the campaign found broken (0: it held).",
}, []string{"campaign"})

var campaignsFrozen = promauto.NewGauge(prometheus.GaugeOpts{
	Name: "seckill_campaigns_frozen",
	Help: "Campaigns on sale that Redis holds frozen or has lost, at the guard's last round: each sells nothing until its rebuild from the store ends.",
})

var reservationsOverdue = promauto.NewGauge(prometheus.GaugeOpts{
	Name: "seckill_reservations_overdue",
	Help: "Pending reservations past their deadline that the sweeper's last round found (it releases them as it goes); stuck above 0, the sweeper cannot keep up or cannot resolve them.",
})

var sweeperLeaseHeld = promauto.NewGauge(prometheus.GaugeOpts{
	Name: "seckill_sweeper_lease_held",
	Help: "Sweeper leases this process holds (1 on the compensator that sweeps, 0 elsewhere): summed over a deployment, 0 for long means nobody releases reservations past their deadline or expires unpaid orders.",
})
