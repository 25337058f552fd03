package api

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// KeyedOrderID is keyedOrderID, for the tests.
func KeyedOrderID(s *Server, campaign, buyer, key string) string {
	return keyedOrderID(s.orderIDSecret, campaign, buyer, key)
}

// IdempotencyRedisKey is idemKey, for the tests.
var IdempotencyRedisKey = idemKey

// BeginKey starts the record of buyer's purchase of qty units in campaign under key, as the first
// request does before it reserves, and returns the order id the key names.
func BeginKey(tb testing.TB, s *Server, campaign, buyer, key string, qty int) string {
	tb.Helper()
	r := s.idemRecord(campaign, buyer, key, purchaseFingerprint(campaign, qty))
	st, err := r.begin(context.Background(), false)
	if err != nil || st.outcome != "new" {
		tb.Fatalf("begin key %q: %+v %v", key, st, err)
	}
	return r.orderID
}

// Limiter exposes a limiter to the tests.
type Limiter struct{ l *limiter }

// NewLimiter returns a limiter.
func NewLimiter(l Limit) Limiter { return Limiter{newLimiter(l, "test")} }

// Allow is limiter.allow.
func (l Limiter) Allow(key string, now time.Time) (bool, time.Duration) { return l.l.allow(key, now) }

// Size is limiter.size.
func (l Limiter) Size() int { return l.l.size() }

// OrderReadTimeout is orderReadTimeout, the bound of an order's reads.
const OrderReadTimeout = orderReadTimeout

// SetReadyClock makes readyz read the time from now.
func SetReadyClock(s *Server, now func() time.Time) { s.ready.now = now }

// GivenBackBy is the console's name of what gave an order's units back.
var GivenBackBy = givenBackBy

// DependencyUp is seckill_api_dependency_up of the dependency: what readyz found last.
func DependencyUp(dependency string) float64 {
	return testutil.ToFloat64(dependencyUp.WithLabelValues(dependency))
}

// CampaignsKept is how many campaigns, found or not, s's campaign cache holds.
func CampaignsKept(s *Server) int {
	s.campaigns.mu.Lock()
	defer s.campaigns.mu.Unlock()
	return len(s.campaigns.m)
}

// UnknownReads is unknownReads, for the tests.
const UnknownReads = unknownReads

// TokenLeeway is tokenLeeway: how long past its exp a token is still accepted.
const TokenLeeway = tokenLeeway

// MaxStream is maxStream, the longest an event stream lives.
const MaxStream = maxStream
const ConsoleCampaigns = consoleCampaigns
