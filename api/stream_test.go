package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/apitest"
	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// sse reads server-sent events.
type sse struct {
	resp *http.Response
	r    *bufio.Reader
}

type sseEvent struct {
	id, event, data string
	comment         bool
}

// askStream asks for an order's event stream as buyer, with more headers in name, value pairs,
// and returns the answer whatever its status; its body is closed when the test ends.
func askStream(t *testing.T, ctx context.Context, base, orderID, buyer string, headers ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/orders/"+orderID+"/events", nil)
	req.Header.Set("X-User-ID", buyer)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// openStream opens an order's event stream (see askStream), or fails the test.
func openStream(t *testing.T, ctx context.Context, base, orderID, buyer string, headers ...string) *sse {
	t.Helper()
	resp := askStream(t, ctx, base, orderID, buyer, headers...)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return &sse{resp: resp, r: bufio.NewReader(resp.Body)}
}

// next returns the next event or comment; io.EOF when the stream ended.
func (s *sse) next() (sseEvent, error) {
	var ev sseEvent
	seen := false
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			if seen {
				return ev, nil
			}
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if seen {
				return ev, nil
			}
			continue
		}
		seen = true
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimPrefix(v, " ")
		switch k {
		case "":
			ev.comment, ev.data = true, v
		case "id":
			ev.id = v
		case "event":
			ev.event = v
		case "data":
			ev.data = v
		}
	}
}

// nextStatus skips comments and the retry advice and returns the next status event's order.
func (s *sse) nextStatus(t *testing.T) (api.OrderView, error) {
	t.Helper()
	for {
		ev, err := s.next()
		if err != nil {
			return api.OrderView{}, err
		}
		if ev.event != "status" {
			continue
		}
		var o api.OrderView
		if err := json.Unmarshal([]byte(ev.data), &o); err != nil {
			t.Fatalf("event data %q: %v", ev.data, err)
		}
		if ev.id != string(o.Status) {
			t.Errorf("event id %q for status %q", ev.id, o.Status)
		}
		return o, nil
	}
}

func TestOrderEvents(t *testing.T) {
	h := newHarness(t, func(c *api.Config) { c.StreamHeartbeat = 50 * time.Millisecond })
	h.createCampaign(t, `{"id": "ev", "name": "Events", "stock": 10, "per_user_limit": 10}`)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	ctx := context.Background()

	t.Run("pending, then confirmed, then the end", func(t *testing.T) {
		id := h.buy(t, "ev", "alice", 2)
		s := openStream(t, ctx, ts.URL, id, "alice")
		o, err := s.nextStatus(t)
		if err != nil || o.Status != events.Pending || o.OrderID != id || o.Quantity != 2 {
			t.Fatalf("first event: %+v %v", o, err)
		}
		h.confirm(t, id)
		if o, err = s.nextStatus(t); err != nil || o.Status != events.Confirmed {
			t.Fatalf("second event: %+v %v", o, err)
		}
		if _, err := s.nextStatus(t); !errors.Is(err, io.EOF) {
			t.Errorf("the stream goes on after a final status: %v", err)
		}
	})

	t.Run("with a payment window: confirmed, then paid or expired, then the end", func(t *testing.T) {
		h.createCampaign(t, `{"id": "evpay", "name": "Events", "stock": 10, "per_user_limit": 10, "payment_window_seconds": 60}`)
		paid, unpaid := h.buy(t, "evpay", "pat", 1), h.buy(t, "evpay", "una", 1)
		h.confirm(t, paid)
		h.confirm(t, unpaid)
		sp, su := openStream(t, ctx, ts.URL, paid, "pat"), openStream(t, ctx, ts.URL, unpaid, "una")
		for _, s := range []*sse{sp, su} {
			if o, err := s.nextStatus(t); err != nil || o.Status != events.Confirmed || o.PayBy == nil {
				t.Fatalf("first event: %+v %v", o, err)
			}
		}
		h.do(t, request("POST", "/v1/admin/orders/"+paid+"/payment", `{"payment_id": "p1"}`, h.bearer()...), 200)
		if _, err := h.store.DB().Exec(`UPDATE orders SET pay_by_ms = ? WHERE order_id = ?`, time.Now().Add(-time.Second).UnixMilli(), unpaid); err != nil {
			t.Fatal(err)
		}
		r := &compensator.Resolver{Store: h.store, Redis: h.redis, Producer: kafkatest.Client(t, h.brokers), Results: h.topics.Results}
		if _, err := r.Expire(ctx, unpaid, time.Now()); err != nil {
			t.Fatal(err)
		}
		for s, want := range map[*sse]events.Status{sp: events.Paid, su: events.Expired} {
			o, err := s.nextStatus(t)
			if err == nil && o.Status == events.Expired && o.Reason == "" { // read before its units were back: its reason follows
				o, err = s.nextStatus(t)
			}
			if err != nil || o.Status != want {
				t.Fatalf("second event: %+v %v, want %s", o, err, want)
			}
			if _, err := s.nextStatus(t); !errors.Is(err, io.EOF) {
				t.Errorf("the stream goes on after %s: %v", want, err)
			}
		}
	})

	// An expiry announces the order before the store gives it its reason (MarkUnpaid, once the
	// units are back): a stream woken by the announcement read the order expired without a
	// reason and ended there, and its buyer never heard why, nor that the units were back.
	t.Run("an expiry's reason, written after its announcement", func(t *testing.T) {
		id := h.buy(t, "evpay", "ula", 1)
		h.confirm(t, id)
		s := openStream(t, ctx, ts.URL, id, "ula")
		if o, err := s.nextStatus(t); err != nil || o.Status != events.Confirmed {
			t.Fatalf("first event: %+v %v", o, err)
		}
		o, err := h.store.ExpireOrder(ctx, id, time.Now().Add(time.Hour)) // past its pay_by
		if err != nil || o.Status != events.Expired {
			t.Fatalf("expire: %+v %v", o, err)
		}
		rec, err := events.Record(h.topics.Results, events.Event{Type: events.OrderExpired, Version: events.Version, EventID: events.NewID(),
			OccurredAt: time.Now().UTC(), OrderID: id, CampaignID: o.CampaignID, UserID: o.UserID, Quantity: int(o.Quantity)})
		if err != nil {
			t.Fatal(err)
		}
		if err := kafkatest.Client(t, h.brokers).ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		// The case itself: the stream, woken by the announcement, reads the order without its reason.
		last, err := s.nextStatus(t)
		if err != nil || last.Status != events.Expired || last.Reason != "" {
			t.Fatalf("after the announcement: %+v %v, want expired without a reason", last, err)
		}
		if err := h.store.MarkUnpaid(ctx, id); err != nil {
			t.Fatal(err)
		}
		for {
			o, err := s.nextStatus(t)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			last = o
		}
		if last.Status != events.Expired || last.Reason != events.ReasonUnpaid {
			t.Errorf("the stream ended on %s %q, want expired %q", last.Status, last.Reason, events.ReasonUnpaid)
		}
	})

	t.Run("heartbeats while nothing happens", func(t *testing.T) {
		id := h.buy(t, "ev", "bob", 1)
		s := openStream(t, ctx, ts.URL, id, "bob", "Last-Event-ID", "pending")
		ev, err := s.next()
		if err != nil || ev.data != "" || ev.comment { // the retry advice comes first
			t.Fatalf("first chunk: %+v %v", ev, err)
		}
		// Last-Event-ID says the client has pending: the next thing is a heartbeat.
		if ev, err = s.next(); err != nil || !ev.comment || ev.data != "heartbeat" {
			t.Fatalf("want a heartbeat, got %+v %v", ev, err)
		}
		h.do(t, request("POST", "/v1/admin/orders/"+id+"/compensate", "", h.bearer()...), 200)
		if o, err := s.nextStatus(t); err != nil || o.Status != events.Failed || o.Reason != events.ReasonOperator {
			t.Fatalf("after compensation: %+v %v", o, err)
		}
	})

	t.Run("a final order is one event", func(t *testing.T) {
		id := h.buy(t, "ev", "carol", 1)
		h.confirm(t, id)
		client := &http.Client{Transport: apitest.Transport(t, h.spec, nil)} // checks the exchange
		req, _ := http.NewRequest("GET", ts.URL+"/v1/orders/"+id+"/events", nil)
		req.Header.Set("X-User-ID", "carol")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if n := strings.Count(string(body), "event: status"); n != 1 || !strings.Contains(string(body), `"status":"confirmed"`) {
			t.Errorf("stream of a confirmed order: %q", body)
		}
	})

	// EventSource reconnects whenever a 200 stream ends, the end after a final status too, and
	// sends Last-Event-ID; only a 204 makes it stop (HTML, server-sent events: "a client can be
	// told to stop reconnecting using the HTTP 204 No Content response code").
	t.Run("a client that has the final status is told to stop reconnecting", func(t *testing.T) {
		id := h.buy(t, "ev", "gina", 1)
		h.confirm(t, id)
		h.do(t, request("GET", "/v1/orders/"+id+"/events", "", with(user("gina"), []string{"Last-Event-ID", "confirmed"})...), http.StatusNoContent)
		// A client a status behind is sent the final one, as before.
		s := openStream(t, ctx, ts.URL, id, "gina", "Last-Event-ID", "pending")
		if o, err := s.nextStatus(t); err != nil || o.Status != events.Confirmed {
			t.Fatalf("a client a status behind: %+v %v", o, err)
		}
	})

	t.Run("errors come before the stream, as JSON", func(t *testing.T) {
		id := h.buy(t, "ev", "dave", 1)
		h.fail(t, request("GET", "/v1/orders/"+id+"/events", ""), 401, events.Unauthorized)
		h.fail(t, request("GET", "/v1/orders/"+id+"/events", "", user("erin")...), 404, events.OrderNotFound)
		h.fail(t, request("GET", "/v1/orders/ev.nosuchorder/events", "", user("dave")...), 404, events.OrderNotFound)
	})

	t.Run("a client that goes away ends its stream", func(t *testing.T) {
		id := h.buy(t, "ev", "frank", 1)
		ts := httptest.NewServer(h.srv.Handler())
		cctx, cancel := context.WithCancel(ctx)
		s := openStream(t, cctx, ts.URL, id, "frank")
		if _, err := s.nextStatus(t); err != nil {
			t.Fatal(err)
		}
		cancel()
		done := make(chan struct{})
		go func() { ts.Close(); close(done) }() // Close waits for the handlers
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the stream's handler still runs after its client left")
		}
	})
}

// TestOrderEventsEndAtShutdown checks that an open stream, a buyer's or the console's, does not
// hold up the drain: each ends, so its client reconnects (to another api).
func TestOrderEventsEndAtShutdown(t *testing.T) {
	h := newHarness(t, func(c *api.Config) { c.ShutdownTimeout = 20 * time.Second })
	h.createCampaign(t, `{"id": "sd", "name": "Shutdown", "stock": 1, "per_user_limit": 1}`)
	id := h.buy(t, "sd", "alice", 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.srv.Serve(ctx, ln) }()
	s := openStream(t, context.Background(), "http://"+ln.Addr().String(), id, "alice")
	if _, err := s.nextStatus(t); err != nil {
		t.Fatal(err)
	}
	console := openConsole(t, "http://"+ln.Addr().String(), h.admin)
	defer console.close()
	console.next(t)
	start := time.Now()
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown waits for the open stream")
	}
	if _, err := s.nextStatus(t); !errors.Is(err, io.EOF) {
		t.Errorf("the stream is still open after shutdown: %v", err)
	}
	for console.lines.Scan() { // what was sent before the end
	}
	if err := console.lines.Err(); err != nil {
		t.Errorf("the console's stream did not end cleanly at shutdown: %v", err)
	}
	t.Logf("drained in %v with a stream open", time.Since(start))
}

// TestStreamsOutliveTheServersTimeouts: Serve's http.Server reads a request within 10 s and
// writes an answer within 15 s; an event stream lives up to maxStream, so it moves its own
// write deadline at each write. An order stream and a console stream stay open past both: 160
// heartbeats 100 ms apart, and 17 snapshots a second apart, each take more than 15 s. Cut at
// either timeout, every client would reconnect (and have its order read again) every 15 s, and
// no heartbeat of the default 15 s would ever be sent.
func TestStreamsOutliveTheServersTimeouts(t *testing.T) {
	h := newHarness(t, func(c *api.Config) { c.StreamHeartbeat = 100 * time.Millisecond })
	h.createCampaign(t, `{"id": "long", "name": "Long", "stock": 1, "per_user_limit": 1}`)
	id := h.buy(t, "long", "alice", 1)
	base := "http://" + h.listen(t)

	s := openStream(t, context.Background(), base, id, "alice", "Last-Event-ID", "pending")
	c := openConsole(t, base, h.admin)
	defer c.close()
	// The order stream is read beside the console's; the goroutine touches no t, so a test
	// stopped early leaves it to end when openStream's cleanup closes the body.
	ended := make(chan error, 1)
	go func() {
		for beats := 0; beats < 160; {
			ev, err := s.next()
			if err != nil {
				ended <- fmt.Errorf("the order stream ended after %d heartbeats: %w", beats, err)
				return
			}
			if ev.comment {
				beats++
			}
		}
		ended <- nil
	}()
	for range 17 {
		c.next(t)
	}
	if err := <-ended; err != nil {
		t.Error(err)
	}
}

// TestOrderStreamsCostNothingIdle: 2,000 streams open on one order send Redis (and so the
// store, which order() asks with it) nothing while the order does not change; the order's next
// status still reaches every one of them.
func TestOrderStreamsCostNothingIdle(t *testing.T) {
	const streams = 2000
	h := newHarness(t, func(c *api.Config) { c.MaxStreamsPerBuyer, c.MaxStreams = streams, streams })
	h.createCampaign(t, `{"id": "idle", "name": "Idle", "stock": 10, "per_user_limit": 10}`)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	id := h.buy(t, "idle", "alice", 1)
	ss := make([]*sse, streams)
	for i := range ss {
		ss[i] = openStream(t, context.Background(), ts.URL, id, "alice")
		if o, err := ss[i].nextStatus(t); err != nil || o.Status != events.Pending {
			t.Fatalf("stream %d: %+v %v", i, o, err)
		}
	}
	before := h.commands.n.Load()
	time.Sleep(time.Second) // a second of 2,000 idle streams (they polled 8 times each before)
	if n := h.commands.n.Load() - before; n != 0 {
		t.Errorf("2,000 idle streams sent Redis %d commands in a second, want 0", n)
	}
	h.confirm(t, id)
	for i, s := range ss {
		if o, err := s.nextStatus(t); err != nil || o.Status != events.Confirmed {
			t.Fatalf("stream %d after the confirmation: %+v %v", i, o, err)
		}
	}
}

// TestOrderStreamCaps: a buyer holds at most MaxStreamsPerBuyer streams and the server at most
// MaxStreams; a closed stream gives its place back.
func TestOrderStreamCaps(t *testing.T) {
	h := newHarness(t, func(c *api.Config) { c.MaxStreamsPerBuyer, c.MaxStreams = 2, 3 })
	h.createCampaign(t, `{"id": "caps", "name": "Caps", "stock": 10, "per_user_limit": 10}`)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	a, b := h.buy(t, "caps", "alice", 1), h.buy(t, "caps", "bob", 1)
	open := func(id, buyer string) (*http.Response, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		return askStream(t, ctx, ts.URL, id, buyer), cancel
	}
	_, closeFirst := open(a, "alice")
	open(a, "alice")
	if resp, _ := open(a, "alice"); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("alice's third stream: %d", resp.StatusCode)
	}
	open(b, "bob") // the third of the server
	if resp, _ := open(b, "bob"); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the server's fourth stream: %d", resp.StatusCode)
	}
	closeFirst()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, _ := open(a, "alice")
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a closed stream's place never came back")
		}
	}
}

// TestOrderStreamCapPerAddress: one client address, an IPv6 client's whole /64, holds at most
// MaxStreamsPerAddr streams whatever buyers it names, so a client with a pile of tokens (or
// made-up X-User-IDs) cannot take every stream of the api; another address still opens one,
// and a stream that ends gives its place back.
func TestOrderStreamCapPerAddress(t *testing.T) {
	h := newHarness(t, func(c *api.Config) {
		c.MaxStreamsPerAddr = 2
		c.TrustProxyHeaders = true // the test's client is a proxy on loopback that names each client
	})
	h.createCampaign(t, `{"id": "peraddr", "name": "Per address", "stock": 10, "per_user_limit": 10}`)
	ts := httptest.NewServer(h.srv.Handler())
	t.Cleanup(ts.Close)
	ctx := context.Background()
	from := func(addr string) []string { return []string{"X-Forwarded-For", addr} }
	ann, ben, cat := h.buy(t, "peraddr", "ann", 1), h.buy(t, "peraddr", "ben", 1), h.buy(t, "peraddr", "cat", 1)

	s := openStream(t, ctx, ts.URL, ann, "ann", from("2001:db8:1:2::1")...)
	openStream(t, ctx, ts.URL, ben, "ben", from("2001:db8:1:2::2")...)
	third := askStream(t, ctx, ts.URL, cat, "cat", from("2001:db8:1:2::3")...)
	if third.StatusCode != http.StatusTooManyRequests { // its body would be a stream: not read
		t.Fatalf("a third stream from one /64: %d, want 429", third.StatusCode)
	}
	body, _ := io.ReadAll(third.Body)
	if !strings.Contains(string(body), `"code":"rate_limited"`) {
		t.Errorf("a third stream from one /64: %s, want rate_limited", body)
	}
	apitest.Check(t, h.spec, third.Request, third.StatusCode, third.Header, body)
	openStream(t, ctx, ts.URL, cat, "cat", from("198.51.100.7")...)

	// ann's order becomes final and her stream ends: its place is free before the client reads
	// the end of it, for the handler gives it back before it returns.
	if o, err := s.nextStatus(t); err != nil || o.Status != events.Pending {
		t.Fatalf("ann's first event: %+v %v", o, err)
	}
	h.confirm(t, ann)
	if o, err := s.nextStatus(t); err != nil || o.Status != events.Confirmed {
		t.Fatalf("ann's second event: %+v %v", o, err)
	}
	if _, err := s.nextStatus(t); !errors.Is(err, io.EOF) {
		t.Fatalf("ann's stream goes on after a final status: %v", err)
	}
	openStream(t, ctx, ts.URL, cat, "cat", from("2001:db8:1:2::3")...)
}

// TestUnitsGivenBackReachEveryAPI: two apis on one Redis and Kafka; units that one gives back
// (an operator's compensation) end the other's sold-out flag, which would otherwise refuse
// buyers for its whole TTL.
func TestUnitsGivenBackReachEveryAPI(t *testing.T) {
	h := newHarness(t, func(c *api.Config) { c.SoldOutTTL = time.Hour })
	h.createCampaign(t, `{"id": "back", "name": "Back", "stock": 1, "per_user_limit": 1}`)
	other := api.New(h.cfg, h.store, h.redis, kafkatest.Client(t, h.brokers))
	t.Cleanup(other.Close)
	order := h.buy(t, "back", "alice", 1)
	buyAtOther := func() int {
		rec := httptest.NewRecorder()
		other.Handler().ServeHTTP(rec, request("POST", "/v1/campaigns/back/purchases", `{"quantity": 1}`, user("bob")...))
		return rec.Code
	}
	if code := buyAtOther(); code != http.StatusConflict {
		t.Fatalf("sold out at the other api: %d", code)
	}
	h.do(t, request("POST", "/v1/admin/orders/"+order+"/compensate", "", h.bearer()...), 200)
	for deadline := time.Now().Add(10 * time.Second); buyAtOther() != http.StatusAccepted; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the unit given back at one api never went on sale at the other")
		}
	}
}

// TestOrderStreamHearsOfChangesBeforeItsReaderFindsTheTopicsEnd: an api's reader of the results
// topic learns where the topic ends from the broker some time after the api starts (at once, or
// once Kafka answers). A stream opened meanwhile reads its order pending; an event of the
// order that lands before the reader has asked must still reach the stream, which would
// otherwise wait for it until maxStream.
func TestOrderStreamHearsOfChangesBeforeItsReaderFindsTheTopicsEnd(t *testing.T) {
	h := newHarness(t, func(c *api.Config) { c.Brokers = nil }) // the harness's server reads nothing
	h.createCampaign(t, `{"id": "late", "name": "Late reader", "stock": 10, "per_user_limit": 10}`)
	// The broker holds the reader's first question of where the results topic ends until told.
	asked, answer := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(answer) })
	t.Cleanup(release) // a test that stops early leaves no sleeping broker goroutine behind
	h.kafka.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		for _, tp := range req.(*kmsg.ListOffsetsRequest).Topics {
			if tp.Topic == h.topics.Results {
				h.kafka.DropControl()
				close(asked)
				h.kafka.SleepControl(func() { <-answer })
				break
			}
		}
		return nil, nil, false
	})
	cfg := h.cfg
	cfg.Brokers = h.brokers
	reader := api.New(cfg, h.store, h.redis, kafkatest.Client(t, h.brokers))
	t.Cleanup(reader.Close)
	ts := httptest.NewServer(reader.Handler())
	t.Cleanup(ts.Close)
	<-asked

	id := h.buy(t, "late", "alice", 1)
	// Bounded, so that a stream that never hears of the confirmation fails the test rather
	// than hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := openStream(t, ctx, ts.URL, id, "alice")
	if o, err := s.nextStatus(t); err != nil || o.Status != events.Pending {
		t.Fatalf("first event: %+v %v", o, err)
	}
	h.confirm(t, id) // stored, and OrderConfirmed is on the results topic
	release()
	if o, err := s.nextStatus(t); err != nil || o.Status != events.Confirmed {
		t.Fatalf("the stream never heard of the confirmation made before its api's reader found the results topic's end: %+v %v", o, err)
	}
}

// unreadableStore and unreadableRedis cannot read orders.
type unreadableStore struct{ api.Store }

func (unreadableStore) Order(context.Context, string) (store.Order, error) {
	return store.Order{}, errors.New("dial tcp 10.0.0.5:5432: connection refused")
}

type unreadableRedis struct{ api.Redis }

func (unreadableRedis) Reservation(context.Context, string) (lua.Reservation, error) {
	return lua.Reservation{}, errors.New("dial tcp 10.0.0.6:6379: connection refused")
}

// pendingOrder is a store that holds one order of alice's, pending.
type pendingOrder struct{ api.Store }

func (pendingOrder) Order(_ context.Context, id string) (store.Order, error) {
	return store.Order{OrderID: id, CampaignID: "exp", UserID: "alice", Quantity: 1, Status: events.Pending}, nil
}

// TestOrderStreamEndsWithItsToken: a stream lives no longer than the bearer token that opened
// it (its exp, and the leeway the api gives every token), so the client comes back and must
// show a fresh token; a stream opened with a token that outlives maxStream, or with X-User-ID
// and no token, ends after maxStream as before. A token's stream that ran on to maxStream
// outlived a 1-minute token by 9 minutes. Fake time: the test waits out each stream's end to
// the nanosecond.
func TestOrderStreamEndsWithItsToken(t *testing.T) {
	for _, tc := range []struct {
		name string
		ttl  time.Duration // of the token; 0: X-User-ID, no token
		ends time.Duration // after the stream opens
	}{
		{"a token of a minute", time.Minute, time.Minute + api.TokenLeeway},
		{"a token of an hour", time.Hour, api.MaxStream},
		{"no token", 0, api.MaxStream},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := api.New(api.Config{JWTSecret: []byte(testSecret), InsecureUserHeader: true, Logger: slog.New(slog.DiscardHandler)},
					pendingOrder{}, unreadableRedis{}, nil) // the store has the order: Redis's answer is not used
				defer srv.Close()
				who := user("alice")
				if tc.ttl > 0 {
					tok, err := api.MintToken([]byte(testSecret), "", "", "alice", tc.ttl, time.Now())
					if err != nil {
						t.Fatal(err)
					}
					who = []string{"Authorization", "Bearer " + tok}
				}
				rec := httptest.NewRecorder()
				req := request("GET", "/v1/orders/"+events.NewOrderID("exp")+"/events", "", who...)
				ctx, hangUp := context.WithCancel(req.Context())
				ended := make(chan struct{})
				go func() {
					defer close(ended)
					srv.Handler().ServeHTTP(rec, req.WithContext(ctx))
				}()
				defer func() { hangUp(); <-ended }() // a test that fails leaves no stream in the bubble
				isOver := func() bool {
					synctest.Wait()
					select {
					case <-ended:
						return true
					default:
						return false
					}
				}
				time.Sleep(tc.ends - time.Nanosecond)
				if isOver() {
					t.Fatalf("the stream ended before %v", tc.ends)
				}
				time.Sleep(time.Nanosecond)
				if !isOver() {
					t.Fatalf("the stream is still open %v after it opened", tc.ends)
				}
				if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "event: status") {
					t.Errorf("the stream: %d %q", rec.Code, rec.Body)
				}
			})
		})
	}
}

// TestOrderStreamComesBackAfterAnOutage: a buyer's page reconnects its EventSource while the
// store is down. A 503 closes an EventSource for good (the HTML standard fails the connection
// on any status but 200 and 204), so the page stopped hearing of the order after a blip; it is
// answered an empty stream that asks it to come back in a few seconds. A client that does not
// ask for an event stream still gets the 503.
func TestOrderStreamComesBackAfterAnOutage(t *testing.T) {
	srv := api.New(api.Config{Logger: slog.New(slog.DiscardHandler), InsecureUserHeader: true}, unreadableStore{}, unreadableRedis{}, nil)
	defer srv.Close()
	path := "/v1/orders/" + events.NewOrderID("blip") + "/events"
	get := func(accept string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("X-User-ID", "alice")
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		return rec
	}
	rec := get("text/event-stream")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/event-stream" || rec.Body.String() != "retry: 5000\n\n" {
		t.Errorf("EventSource while the store is down: %d %q %q; want 200, an event stream, retry: 5000",
			rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	if rec := get(""); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("a plain client while the store is down: %d %s; want 503 with Retry-After", rec.Code, rec.Body)
	}
}

// idleConns is a listener whose connections can be made to look idle for longer than a
// stream's write deadline without the wait: idle expires the write deadline set last, as
// writeWait without a write would.
type idleConns struct {
	net.Listener
	accepted chan *idleConn
}

func (l idleConns) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	ic := &idleConn{Conn: c}
	l.accepted <- ic
	return ic, nil
}

type idleConn struct {
	net.Conn
	mu       sync.Mutex
	deadline time.Time // the write deadline set last
}

func (c *idleConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = t
	return c.Conn.SetWriteDeadline(t)
}

func (c *idleConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = t
	return c.Conn.SetDeadline(t)
}

// idle makes the write deadline set last pass; a deadline set after it is as set.
func (c *idleConn) idle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.deadline.IsZero() {
		c.Conn.SetWriteDeadline(time.Now().Add(-time.Second))
	}
}

// TestIdleOrderStreamEndsCleanly: net/http writes the end of a stream (the last chunk) after
// the handler returns, under the write deadline of the stream's last write. A stream idle for
// longer than that (heartbeats come every 15 s, a write's deadline is 10 s) that ended, at
// shutdown, with its token or after maxStream, was cut short: its client read an error, not
// the end, and the connection was lost. Made idle without the wait (idleConns).
func TestIdleOrderStreamEndsCleanly(t *testing.T) {
	h := newHarness(t, func(c *api.Config) { c.StreamHeartbeat = time.Hour })
	h.createCampaign(t, `{"id": "idle-end", "name": "Idle end", "stock": 1, "per_user_limit": 1}`)
	id := h.buy(t, "idle-end", "alice", 1)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := idleConns{Listener: inner, accepted: make(chan *idleConn, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- h.srv.Serve(ctx, ln) }()
	s := openStream(t, context.Background(), "http://"+inner.Addr().String(), id, "alice")
	if o, err := s.nextStatus(t); err != nil || o.Status != events.Pending {
		t.Fatalf("first event: %+v %v", o, err)
	}
	(<-ln.accepted).idle()
	cancel()
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
	if rest, err := io.ReadAll(s.r); err != nil {
		t.Errorf("the idle stream did not end cleanly at shutdown: %q, %v", rest, err)
	}
}
