package api_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// The purchase handler without servers: what it does with each answer of Redis and Kafka, told
// by fakes. The real-server tests (contract_test.go) check the same handler end to end.

// fakeStore records the orders failed through it; any other call panics (the embedded nil).
// With won set, the consumer stored every order first, as confirmed; with err, the store is down.
type fakeStore struct {
	api.Store
	won    bool
	err    error
	mu     sync.Mutex
	failed map[string]string // order id -> reason
}

func (f *fakeStore) FailOrderFenced(_ context.Context, e events.Event, reason string, _ store.Fence) (store.Order, error) {
	o := store.Order{OrderID: e.OrderID, CampaignID: e.CampaignID, UserID: e.UserID, Quantity: int64(e.Quantity), Status: events.Confirmed}
	switch {
	case f.err != nil:
		return store.Order{}, f.err
	case f.won:
		return o, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed[e.OrderID] = reason
	o.Status, o.Reason = events.Failed, reason
	return o, nil
}

// fakeRedis answers Reserve with err (nil: a pending reservation) and records releases and
// confirmations.
type fakeRedis struct {
	api.Redis
	err                 error
	mu                  sync.Mutex
	released, confirmed []string
}

func (f *fakeRedis) Confirm(_ context.Context, orderID string) (lua.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.confirmed = append(f.confirmed, orderID)
	return lua.Outcome{Changed: true, State: "confirmed"}, nil
}

func (f *fakeRedis) Reserve(_ context.Context, campaign, orderID, user string, qty int, ttl time.Duration) (lua.Reservation, error) {
	return lua.Reservation{OrderID: orderID, Campaign: campaign, User: user, Quantity: qty, State: "pending", Deadline: time.Now().Add(ttl)}, f.err
}

func (f *fakeRedis) Stuck() bool { return false }

func (f *fakeRedis) Release(_ context.Context, orderID string) (lua.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, orderID)
	return lua.Outcome{Changed: true, State: "released"}, nil
}

// lostLoadAnswer is Redis whose LoadCampaign loads the campaign and then loses the answer, as a
// timeout or a connection dropped after the script ran does.
type lostLoadAnswer struct{ api.Redis }

func (r lostLoadAnswer) LoadCampaign(ctx context.Context, c lua.Campaign) (bool, error) {
	if _, err := r.Redis.LoadCampaign(ctx, c); err != nil {
		return false, err
	}
	return false, fmt.Errorf("load campaign %s: %w", c.ID, context.DeadlineExceeded)
}

// panickingProducer is a bug after the reservation.
type panickingProducer struct{}

func (panickingProducer) Produce(context.Context, *kgo.Record, func(*kgo.Record, error)) {
	panic("a bug after the reservation")
}

func (p panickingProducer) TryProduce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.Produce(ctx, r, promise)
}

// fakeProducer acknowledges every record with err, and keeps them.
type fakeProducer struct {
	err error
	mu  sync.Mutex
	got []*kgo.Record
}

func (p *fakeProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.mu.Lock()
	p.got = append(p.got, r)
	p.mu.Unlock()
	promise(r, p.err)
}

func (p *fakeProducer) TryProduce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.Produce(ctx, r, promise)
}

func (p *fakeProducer) events(t *testing.T, topic string) []events.Event {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []events.Event
	for _, r := range p.got {
		if r.Topic == topic {
			e, err := events.Decode(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
	}
	return out
}

func TestPurchaseWithFakes(t *testing.T) {
	topics := events.NewTopics("fake")
	serve := func(r *fakeRedis, p api.Producer, st *fakeStore) (int, string) {
		srv := api.New(api.Config{Topics: topics, InsecureUserHeader: true, ProduceTimeout: time.Second,
			Logger: slog.New(slog.DiscardHandler)}, st, r, p)
		defer srv.Close()
		req := httptest.NewRequest("POST", "/v1/campaigns/fake/purchases", strings.NewReader(`{"quantity": 2}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User-ID", "ann")
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}

	t.Run("a refusal by Redis queues nothing", func(t *testing.T) {
		p := &fakeProducer{}
		code, body := serve(&fakeRedis{err: events.Errorf(events.SoldOut, "sold out")}, p, &fakeStore{})
		if code != http.StatusConflict || !strings.Contains(body, `"sold_out"`) || len(p.got) != 0 {
			t.Errorf("answered %d %s, produced %d records", code, body, len(p.got))
		}
	})

	t.Run("a reservation is queued, then answered 202", func(t *testing.T) {
		p := &fakeProducer{}
		code, body := serve(&fakeRedis{}, p, &fakeStore{})
		evs := p.events(t, topics.Requested)
		if code != http.StatusAccepted || len(evs) != 1 || evs[0].UserID != "ann" || evs[0].Quantity != 2 || !strings.Contains(body, evs[0].OrderID) {
			t.Errorf("answered %d %s, produced %+v", code, body, evs)
		}
	})

	t.Run("a failed produce fails the order in the store, then releases it", func(t *testing.T) {
		p := &fakeProducer{err: errors.New("no acknowledgement")}
		r, st := &fakeRedis{}, &fakeStore{failed: map[string]string{}}
		code, body := serve(r, p, st)
		requested := p.events(t, topics.Requested)
		if code != http.StatusServiceUnavailable || len(requested) != 1 {
			t.Fatalf("answered %d %s, produced %+v", code, body, requested)
		}
		id := requested[0].OrderID
		if st.failed[id] != events.ReasonProduce || len(r.released) != 1 || r.released[0] != id {
			t.Errorf("store failed %v, redis released %v; want %s failed (%s) and released", st.failed, r.released, id, events.ReasonProduce)
		}
		if failed := p.events(t, topics.Results); len(failed) != 1 || failed[0].Type != events.OrderFailed || failed[0].OrderID != id {
			t.Errorf("announced %+v, want OrderFailed of %s", failed, id)
		}
	})

	// The produce's acknowledgement was lost, not the record: the consumer stored the order
	// before the api could fail it. The buyer has bought; telling them "cancelled, nothing was
	// charged" would send them to buy again.
	t.Run("a failed produce of an order the consumer stored first answers 202", func(t *testing.T) {
		p := &fakeProducer{err: errors.New("no acknowledgement")}
		r := &fakeRedis{}
		code, body := serve(r, p, &fakeStore{won: true})
		requested := p.events(t, topics.Requested)
		if code != http.StatusAccepted || len(requested) != 1 || !strings.Contains(body, requested[0].OrderID) {
			t.Fatalf("answered %d %s, produced %+v", code, body, requested)
		}
		if len(r.released) != 0 || len(r.confirmed) != 1 || r.confirmed[0] != requested[0].OrderID {
			t.Errorf("redis released %v and confirmed %v; want the order confirmed, nothing released", r.released, r.confirmed)
		}
	})

	// A panic is ours, not a dependency's, and it came after units were reserved.
	t.Run("a panic answers 500, not a retryable 503 that changed nothing", func(t *testing.T) {
		code, body := serve(&fakeRedis{}, panickingProducer{}, &fakeStore{})
		if code != http.StatusInternalServerError || !strings.Contains(body, `"internal"`) || strings.Contains(body, "changed nothing") {
			t.Errorf("answered %d %s, want 500 internal", code, body)
		}
	})

	// Kafka and the store both failed: the event may still reach the consumer, so nobody can
	// say yet whether the order is placed. The answer must not say it was cancelled.
	t.Run("a failed produce the store cannot record names the order as not settled yet", func(t *testing.T) {
		p := &fakeProducer{err: errors.New("no acknowledgement")}
		r := &fakeRedis{}
		code, body := serve(r, p, &fakeStore{err: errors.New("connection refused")})
		requested := p.events(t, topics.Requested)
		if code != http.StatusServiceUnavailable || len(requested) != 1 {
			t.Fatalf("answered %d %s, produced %+v", code, body, requested)
		}
		if !strings.Contains(body, requested[0].OrderID) || !strings.Contains(body, "not known yet") || strings.Contains(body, "cancelled;") {
			t.Errorf("answered %s; want the order named as not settled yet, not as cancelled", body)
		}
		if len(r.released) != 0 {
			t.Errorf("redis released %v: the order may still be stored by the consumer", r.released)
		}
	})
}

// refundingStore holds one paid order and refunds it when asked.
type refundingStore struct {
	api.Store
	refunded bool
}

func (s *refundingStore) Order(_ context.Context, id string) (store.Order, error) {
	o := store.Order{OrderID: id, CampaignID: "fake", UserID: "ann", Quantity: 1, Status: events.Paid, PaymentID: "pay-1"}
	if s.refunded {
		o.Status = events.Refunded
	}
	return o, nil
}

func (s *refundingStore) RefundOrder(ctx context.Context, id string) (store.Order, bool, error) {
	s.refunded = true
	o, err := s.Order(ctx, id)
	return o, true, err
}

// downRedis does not answer.
type downRedis struct{ api.Redis }

func (downRedis) Confirm(context.Context, string) (lua.Outcome, error) {
	return lua.Outcome{}, errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
}

// TestRefundStoredWhileRedisIsDownSaysSo: an operator refunds a paid order; the store records the
// refund, then Redis does not answer the give-back. The answer is 503, and says the order is
// refunded and what finishes it. Before, it said "the request changed nothing, try again", while
// the store had refunded it, its unit off sold and off the buyer's count.
func TestRefundStoredWhileRedisIsDownSaysSo(t *testing.T) {
	const admin = "admin-token-0123456789abcdef0123456789"
	st := &refundingStore{}
	srv := api.New(api.Config{Topics: events.NewTopics("fake"), AdminToken: admin, ProduceTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler)}, st, downRedis{}, &fakeProducer{})
	defer srv.Close()
	order := events.NewOrderID("fake")
	req := httptest.NewRequest("POST", "/v1/admin/orders/"+order+"/compensate", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	body := rec.Body.String()
	if !st.refunded || rec.Code != http.StatusServiceUnavailable || strings.Contains(body, "changed nothing") || !strings.Contains(body, "is refunded") {
		t.Errorf("refunded in the store: %v; answered %d %s; want 503 saying the order is refunded", st.refunded, rec.Code, body)
	}
}

// expiredMeanwhile holds one confirmed order, which the sweeper expires before the refund's
// transaction: RefundOrder finds it expired and leaves it so.
type expiredMeanwhile struct{ api.Store }

func (expiredMeanwhile) Order(_ context.Context, id string) (store.Order, error) {
	return store.Order{OrderID: id, CampaignID: "fake", UserID: "ann", Quantity: 1, Status: events.Confirmed}, nil
}

func (expiredMeanwhile) RefundOrder(_ context.Context, id string) (store.Order, bool, error) {
	return store.Order{OrderID: id, CampaignID: "fake", UserID: "ann", Quantity: 1, Status: events.Expired, Reason: events.ReasonUnpaid}, false, nil
}

// TestRefundOfAnOrderExpiredMeanwhile: an operator compensates a confirmed order that the
// sweeper expires between the read and the refund. The answer is the expired order, and
// nothing more is done: no refund is given back in Redis or announced for an order that was
// not refunded. Before, the refund's Redis steps ran on the expired order (here Redis does not
// answer, so the answer was a 503).
func TestRefundOfAnOrderExpiredMeanwhile(t *testing.T) {
	const admin = "admin-token-0123456789abcdef0123456789"
	prod := &fakeProducer{}
	srv := api.New(api.Config{Topics: events.NewTopics("fake"), AdminToken: admin, ProduceTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler)}, expiredMeanwhile{}, downRedis{}, prod)
	defer srv.Close()
	req := httptest.NewRequest("POST", "/v1/admin/orders/"+events.NewOrderID("fake")+"/compensate", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"status":"expired"`) || len(prod.events(t, "fake.orders.results")) > 0 {
		t.Errorf("answered %d %s, announced %d; want 200 with the order expired, nothing announced", rec.Code, rec.Body.String(), len(prod.events(t, "fake.orders.results")))
	}
}
