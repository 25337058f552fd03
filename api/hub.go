package api

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
)

// hub reads the results topic (OrderConfirmed, OrderFailed, OrderRefunded, OrderPaid, OrderExpired) from its own start on and
// passes each event on: it wakes the event streams of the order it names, and when units went
// back (a failed or refunded order) it ends this api's sold-out flag for the campaign, so units
// given back by any process are on sale here as soon as the event arrives. One reader per api,
// however many streams are open: an idle stream costs the store and Redis nothing.
type hub struct {
	cl       *kgo.Client
	giveBack func(campaign string)
	log      *slog.Logger
	cancel   context.CancelFunc
	done     chan struct{}

	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{} // order id → its streams' wake-ups
}

// hubLookback is how far before its start a hub begins to read: events are stamped by their
// producers' clocks, which may be behind this process's. Reading a few seconds of results again
// wakes streams that are not there yet and ends sold-out flags that are not set: nothing.
const hubLookback = 10 * time.Second

// newHub starts reading topic on brokers; Close stops it.
func newHub(brokers []string, topic string, giveBack func(campaign string), log *slog.Logger) (*hub, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		// From the events stamped since the hub started, not from where the topic ends when the
		// client first asks (at once, or once Kafka answers): a stream opened before that reads
		// its order, and the event of the order's next change may be on the topic already.
		kgo.ConsumeStartOffset(kgo.NewOffset().AfterMilli(time.Now().Add(-hubLookback).UnixMilli())),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		// Results come a few per produce batch; waiting for a fuller fetch saves the broker a
		// round trip per batch for each api, and a stream or a sold-out flag hears of a change
		// at most this much later.
		kgo.FetchMinBytes(64<<10), kgo.FetchMaxWait(100*time.Millisecond),
		// A partition added to the results topic while the api runs: read within seconds, not
		// at franz-go's 5-minute refresh, or the sold-out flags wait that long for its events.
		kgo.MetadataMaxAge(events.ConsumerMetadataMaxAge))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &hub{cl: cl, giveBack: giveBack, log: log, cancel: cancel, done: make(chan struct{}),
		subs: map[string]map[chan struct{}]struct{}{}}
	go h.run(ctx)
	return h, nil
}

func (h *hub) run(ctx context.Context) {
	defer close(h.done)
	var warned time.Time
	for {
		fs := h.cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(topic string, p int32, err error) {
			// Streams and sold-out flags go quiet while this lasts: say so, once in a while.
			if time.Since(warned) >= 10*time.Second {
				warned = time.Now()
				h.log.Warn("results topic cannot be read: order streams and the sold-out flag wait for it", "topic", topic, "partition", p, "err", err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			ev, err := events.Decode(r.Value)
			if err != nil {
				return // the dead-letter topic's business, not a stream's
			}
			if ev.Type == events.OrderFailed || ev.Type == events.OrderRefunded || ev.Type == events.OrderExpired {
				h.giveBack(ev.CampaignID)
			}
			h.wake(ev.OrderID)
		})
	}
}

// subscribe returns a channel that receives a value when an event names orderID, and the
// function that ends the subscription. A nil hub never wakes anyone.
func (h *hub) subscribe(orderID string) (<-chan struct{}, func()) {
	if h == nil {
		return nil, func() {}
	}
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs[orderID] == nil {
		h.subs[orderID] = map[chan struct{}]struct{}{}
	}
	h.subs[orderID][ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.subs[orderID], ch)
		if len(h.subs[orderID]) == 0 {
			delete(h.subs, orderID)
		}
	}
}

func (h *hub) wake(orderID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[orderID] {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is pending already: the stream reads the latest state anyway
		}
	}
}

// Close stops the reader and waits for it.
func (h *hub) Close() {
	if h == nil {
		return
	}
	h.cancel()
	<-h.done
	h.cl.Close()
}
