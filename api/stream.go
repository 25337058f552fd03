package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/seckill/seckill/events"
)

// maxStream bounds one event stream; a client that still waits reconnects, and EventSource does
// so by itself.
const maxStream = 10 * time.Minute

// writeWait is the time one write to an event stream may take. The server's WriteTimeout would
// cut every stream at 15 s, so each write moves the deadline.
const writeWait = 10 * time.Second

// final reports whether an order will not change on its own: pending becomes confirmed or
// failed, a confirmed order with a pay_by becomes paid or expired (a refund is an operator's
// act, not the order's own course), and a refunded or expired one takes its reason once its
// units are back on sale (givingBack).
func final(o OrderView) bool {
	return o.Status != events.Pending && (o.Status != events.Confirmed || o.PayBy == nil) && !givingBack(o)
}

// givingBack reports whether an order is refunded or expired and its units are not back on sale
// yet: its reason is written then, after the outcome was announced, so no event tells a stream
// of it.
func givingBack(o OrderView) bool {
	return (o.Status == events.Refunded || o.Status == events.Expired) && o.Reason == ""
}

// givenBackWait is how often a stream reads again an order whose units are being given back.
const givenBackWait = time.Second

// orderEvents streams an order's status changes as server-sent events: the current status at
// once, then each change, until the status is final. Each event is
//
//	id: <status>
//	event: status
//	data: <the order, as GET /v1/orders/{id} answers it>
//
// A client that reconnects with Last-Event-ID set to the status it has is not sent it again; when
// that status is final the answer is 204 No Content, which tells EventSource to stop. An
// idle stream carries a comment line every StreamHeartbeat. The stream ends after a final
// status, when the client goes away, when the server shuts down, when the buyer's bearer token
// stops being accepted, or after maxStream.
//
// A stream reads the order when it opens and again only when the results topic names it (see
// hub): however many are open, idle streams cost the store and Redis nothing. A buyer holds at
// most MaxStreamsPerBuyer of them, a client address MaxStreamsPerAddr and the server
// MaxStreams; one more is 429.
func (s *Server) orderEvents(c echo.Context) error {
	buyer, tokenUntil, err := s.buyer(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	id := c.Param("id")
	// Subscribed before the first read, so a change between the read and the loop still wakes it.
	wake, unsubscribe := s.hub.subscribe(id)
	defer unsubscribe()
	o, err := s.buyersOrder(ctx, buyer, id)
	if err != nil {
		return s.reconnectLater(c, err)
	}
	lastID := c.Request().Header.Get("Last-Event-ID")
	// EventSource reconnects whenever a 200 stream ends, after a final status too, and would
	// then read the order every retry for as long as its page is open; a 204 stops it.
	if final(o) && string(o.Status) == lastID {
		return c.NoContent(http.StatusNoContent)
	}
	release, err := s.streams.take(c, buyer)
	if err != nil {
		return err
	}
	defer release()
	send := startEvents(c)
	defer send("") // moves the write deadline for the stream's end: see startEvents
	sendOrder := func(o OrderView) error {
		data, err := json.Marshal(o)
		if err != nil {
			return err
		}
		return send(fmt.Sprintf("id: %s\nevent: status\ndata: %s\n\n", o.Status, data))
	}

	if err := send("retry: 2000\n\n"); err != nil {
		return nil
	}
	if string(o.Status) != lastID {
		if err := sendOrder(o); err != nil {
			return nil
		}
	}
	if final(o) {
		return nil
	}
	beat := time.NewTicker(s.cfg.StreamHeartbeat)
	defer beat.Stop()
	// A stream lives no longer than the token that opened it, or a buyer would hear of an order
	// long after the api stopped taking the token: the client comes back, and must show a fresh
	// one. A buyer named by X-User-ID has no token to outlive.
	life := maxStream
	if !tokenUntil.IsZero() {
		life = min(life, time.Until(tokenUntil))
	}
	end := time.NewTimer(life)
	defer end.Stop()
	// The reads of the order a wake-up starts end when the server stops, and when the stream's
	// life does, as the stream does: a store that stopped answering would hold the stream in its
	// read, deaf to the shutdown (the drain would wait for it until its timeout) and past its
	// token (holding its caps' places, and sending the order once the store answered).
	readCtx, endReads := context.WithTimeout(ctx, life)
	defer endReads()
	defer context.AfterFunc(s.stopping, endReads)()
	// reread fires when a read after a wake-up failed: the event that woke the stream may be
	// the order's last, so the stream reads again rather than waiting for another. nil: none.
	var reread <-chan time.Time
	// refresh reads the order and sends it if it changed; it reports whether the stream ends.
	refresh := func() bool {
		now, err := s.order(readCtx, id)
		if err != nil {
			if readCtx.Err() != nil { // the client left, the server stops, or the stream's life ended
				return true
			}
			s.cfg.Logger.Warn("order stream: read the order; reading again in a second", "order_id", id, "err", err)
			reread = time.After(time.Second)
			return false
		}
		reread = nil
		if givingBack(now) {
			reread = time.After(givenBackWait)
		}
		if now.Status == o.Status && now.Reason == o.Reason {
			return false
		}
		o = now
		return sendOrder(o) != nil || final(o)
	}
	if givingBack(o) {
		reread = time.After(givenBackWait)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.stopping.Done():
			return nil
		case <-end.C:
			return nil
		case <-beat.C:
			if err := send(": heartbeat\n\n"); err != nil {
				return nil
			}
		case <-wake:
			if refresh() {
				return nil
			}
		case <-reread:
			if refresh() {
				return nil
			}
		}
	}
}

// streamCaps counts the open event streams, per buyer, per client address and in all. The
// address cap is what stops one client that names many buyers (a pile of tokens, made-up
// X-User-IDs) from holding every stream of the api.
type streamCaps struct {
	perBuyer, perAddr, total int // perAddr 0: no cap

	mu     sync.Mutex
	open   map[string]int // buyer → streams
	byAddr map[string]int // clientKey → streams
	all    int
}

// take counts a stream of buyer in, or answers 429 when a cap is reached; release counts it out.
func (sc *streamCaps) take(c echo.Context, buyer string) (release func(), err error) {
	addr := ""
	if sc.perAddr > 0 {
		addr = clientKey(c.RealIP())
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	switch {
	case sc.open[buyer] >= sc.perBuyer:
		retryAfter(c, 10*time.Second)
		return nil, events.Errorf(events.RateLimited, "this buyer has %d order streams open already; close one first", sc.perBuyer)
	case sc.perAddr > 0 && sc.byAddr[addr] >= sc.perAddr:
		retryAfter(c, 10*time.Second)
		return nil, events.Errorf(events.RateLimited, "this client address has %d order streams open already; close one first", sc.perAddr)
	case sc.all >= sc.total:
		retryAfter(c, 10*time.Second)
		return nil, events.Errorf(events.RateLimited, "too many order streams are open; try again shortly")
	}
	sc.open[buyer]++
	if sc.perAddr > 0 {
		sc.byAddr[addr]++
	}
	sc.all++
	return func() {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		sc.all--
		countOut(sc.open, buyer)
		if sc.perAddr > 0 {
			countOut(sc.byAddr, addr)
		}
	}, nil
}

// countOut takes one from key's count, and forgets the key at 0 so the map holds only what is open.
func countOut(m map[string]int, key string) {
	if m[key]--; m[key] == 0 {
		delete(m, key)
	}
}

// reconnectLater answers an EventSource whose order cannot be read right now (the store or
// Redis is down): a 503 would close it for good (the HTML standard fails the connection on any
// status but 200 and 204), and the buyer's page would stop hearing of the order after a blip.
// An empty stream that asks it to come back in a few seconds keeps it. Any other client, and
// any other error, gets the error's own answer.
func (s *Server) reconnectLater(c echo.Context, err error) error {
	code := events.ErrorCode(err)
	if code != events.Unavailable && code != events.Internal || // Internal: a dependency's own error
		!strings.Contains(c.Request().Header.Get(echo.HeaderAccept), "text/event-stream") ||
		c.Request().Context().Err() != nil { // the client hung up: nobody to tell
		return err
	}
	s.cfg.Logger.Warn("order stream: the order cannot be read; the client is told to come back", "order_id", c.Param("id"), "err", err)
	startEvents(c)(fmt.Sprintf("retry: %d\n\n", reconnectWait.Milliseconds())) // the client may be gone: nothing to do
	return nil
}

// reconnectWait is how long an EventSource whose order cannot be read waits before it asks again.
const reconnectWait = 5 * time.Second

// startEvents answers 200 with an event stream and returns the function that sends a chunk of
// it at once, each within writeWait. net/http writes the stream's end (its last chunk) after
// the handler returns, under the deadline of the last write: a handler whose stream may have
// been idle longer than writeWait sends "" as it returns, which moves the deadline and writes
// nothing, or its client would read an error instead of the end, and the connection be lost.
func startEvents(c echo.Context) func(chunk string) error {
	w := c.Response()
	h := w.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set(echo.HeaderCacheControl, "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx would buffer the stream otherwise
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w.Writer)
	return func(chunk string) error {
		if err := rc.SetWriteDeadline(time.Now().Add(writeWait)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		if _, err := io.WriteString(w, chunk); err != nil {
			return err
		}
		return rc.Flush()
	}
}
