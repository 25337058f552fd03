package api

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seckill/seckill/events"
)

// hub reads the results topic (OrderConfirmed, OrderFailed, OrderRefunded, OrderPaid, OrderExpired) from its own start on and
// passes each event on: it wakes the event streams of the order it names, and when units went
// back (a failed or refunded order) it ends this api's sold-out flag for the campaign, so units
// given back by any process are on sale here as soon as the event arrives. One reader per api,
// however many streams are open: an idle stream costs the store and Redis nothing.
type hub struct {
	cl       *kgo.Client
	topic    string
	giveBack func(campaign string)
	log      *slog.Logger
	cancel   context.CancelFunc
	wg       sync.WaitGroup // run and follow

	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{} // order id → its streams' wake-ups
}

// hubLookback is how far before its start a hub begins to read: events are stamped by their
// producers' clocks, which may be behind this process's. Reading a few seconds of results again
// wakes streams that are not there yet and ends sold-out flags that are not set: nothing.
const hubLookback = 10 * time.Second

// hubRetry is how soon the hub asks again for the start of a partition Kafka could not answer
// for (a topic created a moment before is not on its leader yet): its events wait that long.
const hubRetry = time.Second

// newHub starts reading topic on brokers; Close stops it.
func newHub(brokers []string, topic string, giveBack func(campaign string), log *slog.Logger) (*hub, error) {
	since := time.Now().Add(-hubLookback).UnixMilli()
	// No topic to consume here: follow gives the client each partition with the offset to start
	// at, which franz-go's own start offsets got wrong (see follow).
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		// Results come a few per produce batch; waiting for a fuller fetch saves the broker a
		// round trip per batch for each api, and a stream or a sold-out flag hears of a change
		// at most this much later.
		kgo.FetchMinBytes(64<<10), kgo.FetchMaxWait(100*time.Millisecond),
		// The partitions follow gives the client are known to its metadata within seconds.
		kgo.MetadataMaxAge(events.ConsumerMetadataMaxAge))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &hub{cl: cl, topic: topic, giveBack: giveBack, log: log, cancel: cancel,
		subs: map[string]map[chan struct{}]struct{}{}}
	h.wg.Add(2)
	go h.run(ctx)
	go h.follow(ctx, since)
	return h, nil
}

// follow gives the reader the topic's partitions as Kafka lists them, until ctx ends. Those
// the topic has when the hub first lists it start at the events stamped since the millisecond
// since, not where the topic ends when the hub asks (at once, or once Kafka answers): a stream
// opened before that reads its order, and the event of the order's next change may be on the
// topic already. A partition added later (the topics are grown together while the apis run)
// holds only events newer than the hub, and is read from its start.
func (h *hub) follow(ctx context.Context, since int64) {
	defer h.wg.Done()
	f := &following{cl: h.cl, adm: kadm.NewClient(h.cl), topic: h.topic, since: since,
		pending: map[int32]bool{}, added: map[int32]bool{}}
	var warned time.Time
	for {
		start, err := f.list(ctx)
		if len(start) > 0 {
			h.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{h.topic: start})
		}
		wait := events.ConsumerMetadataMaxAge
		if err != nil || len(f.pending) > 0 {
			wait = hubRetry
		}
		if err != nil && ctx.Err() == nil && time.Since(warned) >= 10*time.Second {
			warned = time.Now()
			h.log.Warn("results topic cannot be listed: order streams and the sold-out flag wait for it", "topic", h.topic, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// following is what follow knows of the topic's partitions.
type following struct {
	cl    *kgo.Client
	adm   *kadm.Client
	topic string
	since int64

	pending map[int32]bool // of the partitions the topic had when first listed, those without a start yet
	added   map[int32]bool // given to the reader
}

// list returns where to start each partition not given to the reader yet, and the error of
// any it cannot tell yet.
//
// The end of each partition is asked before the events since: franz-go's
// ConsumeStartOffset(AfterMilli) asks both at once and takes the end where Kafka has no event
// since yet, and an event that lands between its two answers lies before that end, never read.
func (f *following) list(ctx context.Context) (map[int32]kgo.Offset, error) {
	// Asked of Kafka, not of the client's cache, which keeps an answer for 5 s: a topic
	// created a moment before, not on the broker yet, would keep the hub from its events as long.
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(f.topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, f.cl)
	if err != nil {
		return nil, err
	}
	partitions := map[int32]bool{}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != f.topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil { // not on the broker asked yet
			return nil, err
		}
		for _, p := range t.Partitions {
			partitions[p.Partition] = true
		}
	}
	if len(partitions) == 0 {
		return nil, fmt.Errorf("topic %s: no partitions", f.topic)
	}
	if len(f.pending) == 0 && len(f.added) == 0 { // the first listing
		for p := range partitions {
			f.pending[p] = true
		}
	}
	start := map[int32]kgo.Offset{}
	for p := range partitions {
		if !f.added[p] && !f.pending[p] {
			start[p] = kgo.NewOffset().AtStart()
			f.added[p] = true
		}
	}
	if len(f.pending) == 0 {
		return start, nil
	}
	// Each answers what it can: the others wait for the next round. Where no event is stamped
	// since, kadm answers the end, asked after the one above: later, so possibly past an event
	// the end above is not.
	ends, err := f.adm.ListEndOffsets(ctx, f.topic)
	after, aerr := f.adm.ListOffsetsAfterMilli(ctx, f.since, f.topic)
	err = cmp.Or(err, aerr)
	for p := range f.pending {
		if !partitions[p] {
			delete(f.pending, p) // gone from the topic: nothing to read
			continue
		}
		end, eok := ends.Lookup(f.topic, p)
		at, aok := after.Lookup(f.topic, p)
		switch {
		case !eok || !aok:
			err = cmp.Or(err, fmt.Errorf("partition %d: not listed", p))
			continue
		case end.Err != nil || at.Err != nil:
			err = cmp.Or(err, fmt.Errorf("partition %d: %w", p, cmp.Or(end.Err, at.Err)))
			continue
		case end.Offset < 0: // would be read as the end, whenever franz-go asks
			err = cmp.Or(err, fmt.Errorf("partition %d: end offset %d", p, end.Offset))
			continue
		}
		o := end.Offset
		if at.Offset >= 0 && at.Offset < o {
			o = at.Offset
		}
		start[p] = kgo.NewOffset().At(o)
		f.added[p] = true
		delete(f.pending, p)
	}
	return start, err
}

func (h *hub) run(ctx context.Context) {
	defer h.wg.Done()
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
	h.wg.Wait()
	h.cl.Close()
}
