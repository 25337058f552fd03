package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// hangsAfterFirstRead is a store that reads an order of alice's, pending, once, and then stops
// answering: each later read waits until its context ends, as on a database that stopped
// answering mid-query (a network cut without a reset, a lock held for good).
type hangsAfterFirstRead struct {
	Store
	reads atomic.Int32
}

func (st *hangsAfterFirstRead) Order(ctx context.Context, id string) (store.Order, error) {
	if st.reads.Add(1) > 1 {
		<-ctx.Done()
		return store.Order{}, ctx.Err()
	}
	return store.Order{OrderID: id, CampaignID: "hang", UserID: "alice", Quantity: 1, Status: events.Pending}, nil
}

// noReservations is a Redis that holds no reservation; the store's answer is what counts.
type noReservations struct{ Redis }

func (noReservations) Reservation(context.Context, string) (lua.Reservation, error) {
	return lua.Reservation{}, errors.New("not asked for")
}

// serveStream serves req, an order's event stream, on srv in the background of a synctest
// bubble. isOver waits until the bubble is idle and says whether the stream ended; leave is its
// client going away, which the test defers: nothing may stay in the bubble.
func serveStream(srv *Server, req *http.Request) (isOver func() bool, leave func()) {
	ctx, hangUp := context.WithCancel(req.Context())
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		srv.Handler().ServeHTTP(httptest.NewRecorder(), req.WithContext(ctx))
	}()
	isOver = func() bool {
		synctest.Wait()
		select {
		case <-ended:
			return true
		default:
			return false
		}
	}
	return isOver, func() { hangUp(); <-ended }
}

// TestOrderStreamEndsAtShutdownWhileTheStoreHangs: a stream woken by an event of its order
// reads the order; a store that stopped answering held it in that read, deaf to the shutdown,
// so the server's drain waited for it until its timeout and then failed (and a client that
// stays would be held as long as the store hangs). The stream ends when the server stops, in
// a read or not. Fake time: nothing here waits on a clock.
func TestOrderStreamEndsAtShutdownWhileTheStoreHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := New(Config{InsecureUserHeader: true, Logger: slog.New(slog.DiscardHandler)}, &hangsAfterFirstRead{}, noReservations{}, nil)
		srv.hub = &hub{subs: map[string]map[chan struct{}]struct{}{}} // woken by the test, not by Kafka
		defer func() { srv.hub = nil; srv.Close() }()
		id := events.NewOrderID("hang")
		req := httptest.NewRequest(http.MethodGet, "/v1/orders/"+id+"/events", nil)
		req.Header.Set("X-User-ID", "alice")
		isOver, leave := serveStream(srv, req)
		defer leave()
		if isOver() {
			t.Fatal("the stream ended at once")
		}
		srv.hub.wake(id) // an event names the order: the stream reads it, and the store hangs
		synctest.Wait()
		if n := srv.store.(*hangsAfterFirstRead).reads.Load(); n != 2 {
			t.Fatalf("%d reads of the order, want 2", n)
		}
		srv.stop() // what Serve's shutdown does first
		if !isOver() {
			t.Fatal("the stream still waits on the hung store after the server stopped")
		}
	})
}

// TestOrderStreamInAHungReadEndsWithItsToken: a stream lives no longer than the bearer token
// that opened it, in a read of the order or not. Held in a read of a store that stopped
// answering, it outlived the token for as long as the store hung, holding its buyer's and its
// address's places, and would have sent the order once the store answered to a client whose
// token the api no longer accepts. Fake time: the test waits out the token to the nanosecond.
func TestOrderStreamInAHungReadEndsWithItsToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		secret := []byte("test-secret-of-at-least-32-bytes!")
		srv := New(Config{JWTSecret: secret, Logger: slog.New(slog.DiscardHandler)}, &hangsAfterFirstRead{}, noReservations{}, nil)
		srv.hub = &hub{subs: map[string]map[chan struct{}]struct{}{}} // woken by the test, not by Kafka
		defer func() { srv.hub = nil; srv.Close() }()
		tok, err := MintToken(secret, "", "", "alice", time.Minute, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		id := events.NewOrderID("hang")
		req := httptest.NewRequest(http.MethodGet, "/v1/orders/"+id+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		isOver, leave := serveStream(srv, req)
		defer leave()
		synctest.Wait()
		srv.hub.wake(id) // an event names the order: the stream reads it, and the store hangs
		synctest.Wait()
		if n := srv.store.(*hangsAfterFirstRead).reads.Load(); n != 2 {
			t.Fatalf("%d reads of the order, want 2", n)
		}
		time.Sleep(time.Minute + tokenLeeway - time.Nanosecond)
		if isOver() {
			t.Fatal("the stream ended before its token")
		}
		time.Sleep(time.Nanosecond)
		if !isOver() {
			t.Fatal("the stream still waits on the hung store after its token expired")
		}
	})
}

// pendingOrder is a store that holds one order of alice's, pending: a stream of it waits.
type pendingOrder struct{ Store }

func (pendingOrder) Order(_ context.Context, id string) (store.Order, error) {
	return store.Order{OrderID: id, CampaignID: "close", UserID: "alice", Quantity: 1, Status: events.Pending}, nil
}

// TestOrderStreamEndsAtClose: Close stops the reader of the results topic, which is all that
// wakes a stream. A stream still open then (its server not shut down through Serve: a caller
// that serves Handler() itself, or Close before the drain ends) would never hear of its order
// again, and held its buyer's place, its connection and its goroutine until maxStream, ten
// minutes. It ends at Close, so its client reconnects.
func TestOrderStreamEndsAtClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := New(Config{InsecureUserHeader: true, Logger: slog.New(slog.DiscardHandler)}, pendingOrder{}, noReservations{}, nil)
		req := httptest.NewRequest(http.MethodGet, "/v1/orders/"+events.NewOrderID("close")+"/events", nil)
		req.Header.Set("X-User-ID", "alice")
		isOver, leave := serveStream(srv, req)
		defer leave()
		if isOver() {
			t.Fatal("the stream ended at once")
		}
		srv.Close()
		if !isOver() {
			t.Fatal("the stream is still open after Close, deaf to its order")
		}
	})
}
