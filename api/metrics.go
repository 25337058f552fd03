package api

import (
	"strconv"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	requests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "seckill_http_requests_total",
		Help: "HTTP requests by route and status code.",
	}, []string{"route", "code"})
	reservations = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "seckill_reservations_total",
		Help: "Purchase attempts by outcome: reserved, or the refusal's error code.",
	}, []string{"outcome"})
	produceSeconds = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "seckill_produce_seconds",
		Help:    "Time to produce an OrderRequested event and have it acknowledged.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
)

// countRequests counts every request by its route pattern, not its path, so ids do not explode
// the label set.
func countRequests(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		if err != nil {
			c.Error(err) // write the response now, so its status is known
		}
		requests.WithLabelValues(c.Path(), strconv.Itoa(c.Response().Status)).Inc()
		return nil
	}
}
