package api

import (
	"strconv"
	"sync"
	"time"

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
	// purchaseSeconds times every purchase, refusals too: the console's p99.
	purchaseSeconds = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "seckill_purchase_seconds",
		Help:    "Time to answer a purchase, from the request's routing to its answer, whatever the answer.",
		Buckets: purchaseBuckets,
	})
	breakerOpen = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "seckill_breaker_open",
		Help: "1 while the api refuses purchases before they reserve because Kafka does not acknowledge (the breaker is open), else 0.",
	})
	// dependencyUp is what readyz found; behind a load balancer that follows /readyz, an api
	// that cannot reach Redis or Kafka gets no buyers, so no counter of refusals says so.
	dependencyUp = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "seckill_api_dependency_up",
		Help: "1 if the api's last readiness check (/readyz, asked at most once a second) found the dependency (redis, kafka, store) answering, else 0; redis and kafka are required to be ready.",
	}, []string{"dependency"})
	produceSeconds = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "seckill_produce_seconds",
		Help:    "Time to produce an OrderRequested event and have it acknowledged.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
)

// purchaseBuckets are the purchase latency histogram's buckets: 0.25 ms to about 2 s.
var purchaseBuckets = prometheus.ExponentialBuckets(0.00025, 1.5, 23)

// purchaseRoute is the purchase's route pattern.
const purchaseRoute = "/v1/campaigns/:id/purchases"

// countRequests counts every request by its route pattern, not its path, so ids do not explode
// the label set.
func countRequests(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err) // write the response now, so its status is known
		}
		route := c.Path()
		if route == purchaseRoute {
			purchaseSeconds.Observe(time.Since(start).Seconds())
		}
		requestCounter(route, c.Response().Status).Inc()
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
