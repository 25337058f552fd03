package api_test

import (
	"context"
	"errors"
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
type fakeStore struct {
	api.Store
	mu     sync.Mutex
	failed map[string]string // order id -> reason
}

func (f *fakeStore) FailOrderFenced(_ context.Context, e events.Event, reason string, _ store.Fence) (store.Order, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed[e.OrderID] = reason
	return store.Order{OrderID: e.OrderID, CampaignID: e.CampaignID, UserID: e.UserID, Quantity: int64(e.Quantity), Status: events.Failed, Reason: reason}, nil
}

// fakeRedis answers Reserve with err (nil: a pending reservation) and records releases.
type fakeRedis struct {
	api.Redis
	err      error
	mu       sync.Mutex
	released []string
}

func (f *fakeRedis) Reserve(_ context.Context, campaign, orderID, user string, qty int, ttl time.Duration) (lua.Reservation, error) {
	return lua.Reservation{OrderID: orderID, Campaign: campaign, User: user, Quantity: qty, State: "pending", Deadline: time.Now().Add(ttl)}, f.err
}

func (f *fakeRedis) Release(_ context.Context, orderID string) (lua.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, orderID)
	return lua.Outcome{Changed: true, State: "released"}, nil
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
	serve := func(r *fakeRedis, p *fakeProducer, st *fakeStore) (int, string) {
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
}
