package api

import (
	"strconv"
	"sync"

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
		requestCounter(c.Path(), c.Response().Status).Inc()
		return nil
	}
}

// routeStatus is one series of requests.
type routeStatus struct {
	route  string
	status int
}

// requestCounters holds the series of requests already looked up: WithLabelValues hashes the
// labels and formats the status for every request, while there are a few dozen series in all.
var requestCounters sync.Map // routeStatus -> prometheus.Counter

func requestCounter(route string, status int) prometheus.Counter {
	key := routeStatus{route, status}
	if c, ok := requestCounters.Load(key); ok {
		return c.(prometheus.Counter)
	}
	c, _ := requestCounters.LoadOrStore(key, requests.WithLabelValues(route, strconv.Itoa(status)))
	return c.(prometheus.Counter)
}
