package lua

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Under a crowd, hundreds of purchases wait on Redis at once. One script call per purchase costs
// each of them two system calls on both ends and Redis a script call of its own; the coalescer
// takes whatever purchases are waiting and sends them as one reserve call per campaign (the
// script takes many), all in one pipeline. A lone purchase goes alone, at once: nothing waits for
// a batch to fill.

// pipelines is how many pipelines may be in flight at once: one runs in Redis while the next
// fills and goes on the wire. More only split the waiting purchases into smaller batches, and
// Redis pays per script call: side by side in the bench's all-accept-unpaced, three alternating
// rounds, Redis took 15-16 µs an order with two against 17-18 with four (median CPU of every
// process 107 µs an order against 117), and one pipeline saved no more than two.
const pipelines = 2

// maxBatch bounds one pipeline, so no purchase waits behind thousands of others.
const maxBatch = 256

// purchase is one reservation on its way through the coalescer.
type purchase struct {
	campaign, orderID, user string
	qty                     int
	ttlMs                   int64
	reply                   reserveReply
	err                     error
	done                    chan struct{}
}

// reserveReply is the reserve script's answer to one purchase.
type reserveReply struct {
	status              string
	remaining, deadline int64
	record              string
}

// ErrClosed answers a purchase made after Close.
var ErrClosed = errors.New("lua: closed")

// ErrNoAnswer is wrapped by the error of a purchase that Redis did not answer within
// answerWait, and of one refused at once while an earlier one still waits.
var ErrNoAnswer = errors.New("no answer from redis")

// answerWait is how long a purchase waits for the coalescer to queue it and Redis to answer,
// unless SetAnswerWait says otherwise. A purchase is answered in milliseconds, and a crowd's
// full queue within a few more. go-redis applies no context's deadline to a call (only with
// ContextTimeoutEnabled, which no URL of seckill sets), and a Redis that takes connections and
// does not answer (paused by a fork or SIGSTOP, a network that drops its replies) held each
// purchase for the client's timeouts and retries: 40 s, past the api's 15 s write timeout,
// which ended the buyer's connection first.
const answerWait = time.Second

// SetAnswerWait sets how long a purchase waits for its place in the queue and Redis's answer;
// call it before the first Reserve. A test whose Redis is held on purpose, slow but answering,
// sets it past the hold.
func (r *Redis) SetAnswerWait(d time.Duration) { r.answerWait = d }

// startCoalescer starts the pipeline workers; Close stops them.
//
// On a Cluster a purchase waits for its answer unbounded, as before the bound: one pipeline
// carries every shard's purchases, and go-redis returns it only once every shard has answered.
// While one shard's primary is down and its replica takes over (seconds), the live shards'
// scripts have run and their answers wait on the dead one's retries: giving up on them would
// leave their units held, with no order, until the sweeper's deadline, and the bound's
// refusals turned away the live shards' buyers too (TestTopologyCluster: 2,000 answers 503 on
// each live shard). Bounding it there needs a pipeline per shard.
func (r *Redis) startCoalescer() {
	if _, cluster := r.rdb.(*redis.ClusterClient); !cluster {
		r.answerWait = answerWait
	}
	r.queue = make(chan *purchase, maxBatch*pipelines)
	for i := range pipelines {
		r.workers.Go(func() { r.pipelineLoop(&r.sent[i]) })
	}
}

// Close stops the coalescer once every purchase already queued has its answer, then closes the
// client. A purchase made after Close gets ErrClosed.
func (r *Redis) Close() error {
	if r.queue != nil {
		// The write lock waits for every enqueue in progress (they hold the read lock), so no
		// purchase lands in the queue after it is closed; the workers drain it and return.
		r.mu.Lock()
		if !r.closed {
			r.closed = true
			close(r.queue)
		}
		r.mu.Unlock()
		r.workers.Wait()
	}
	return r.rdb.Close()
}

// enqueue hands p to the coalescer, unless ctx ends or giveUp fires first.
func (r *Redis) enqueue(ctx context.Context, p *purchase, giveUp <-chan time.Time) error {
	if err := ctx.Err(); err != nil {
		return err // a caller gone already reserves nothing (the select below picks at random)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return ErrClosed
	}
	select {
	case r.queue <- p:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-giveUp:
		return fmt.Errorf("%w within %v: the queue stayed full; nothing was reserved", ErrNoAnswer, r.answerWait)
	}
}

// reserve runs the reserve script for p: through the coalescer, or in a call of its own when r
// has none (Alone). ctx bounds only the wait for a place in the queue: a client that hangs up
// once p is queued still has its purchase's answer, so the units it took go to an order rather
// than wait for the sweeper. Redis's silence does bound the wait: past answerWait, reserve
// gives up with ErrNoAnswer, and p's script may have run or may still run. Its reservation then
// stays pending, with no order, until the sweeper releases it at its deadline, as one whose
// answer go-redis lost does. While every pipeline waits, one of them longer than answerWait,
// purchases are refused at once with ErrNoAnswer and reserve nothing, rather than each buyer
// waiting answerWait; the first pipeline that returns (Redis answered, or go-redis gave up and
// the next pipeline asks again) lets them through again.
func (r *Redis) reserve(ctx context.Context, p *purchase) (reserveReply, error) {
	if r.queue == nil {
		ctx := context.WithoutCancel(ctx)
		v, err := reserveCall(ctx, r.rdb, []*purchase{p}).reply(ctx, r.rdb)
		replies, err := reserveReplies(v, err, 1)
		if err != nil {
			return reserveReply{}, err
		}
		return replies[0], nil
	}
	if r.stuck(time.Now()) {
		return reserveReply{}, fmt.Errorf("%w within %v to the purchases before; nothing was reserved", ErrNoAnswer, r.answerWait)
	}
	var giveUp <-chan time.Time // nil, never ready: no bound (a Cluster's)
	if r.answerWait > 0 {
		t := time.NewTimer(r.answerWait)
		defer t.Stop()
		giveUp = t.C
	}
	p.done = make(chan struct{})
	if err := r.enqueue(ctx, p, giveUp); err != nil {
		return reserveReply{}, err
	}
	select {
	case <-p.done:
		return p.reply, p.err
	case <-giveUp:
		return reserveReply{}, fmt.Errorf("%w within %v: the purchase may still reserve, and is then released at its deadline", ErrNoAnswer, r.answerWait)
	}
}

// Stuck reports whether Redis has stopped answering purchases: Reserve refuses them at once
// with ErrNoAnswer until a pipeline returns. Anything else asked of Redis meanwhile would wait
// as long.
func (r *Redis) Stuck() bool { return r.queue != nil && r.stuck(time.Now()) }

// stuck reports whether, at now, every pipeline waits on Redis and one of them has waited
// longer than a purchase does: a purchase queued now would wait its whole answerWait for nothing.
func (r *Redis) stuck(now time.Time) bool {
	if r.answerWait <= 0 {
		return false
	}
	late := false
	for i := range r.sent {
		at := r.sent[i].Load()
		if at == 0 {
			return false
		}
		late = late || now.UnixNano()-at > int64(r.answerWait)
	}
	return late
}

// pipelineLoop sends the queued purchases to Redis, a batch at a time, and keeps in sent when
// its batch went (Unix ns; 0 while it has none out).
func (r *Redis) pipelineLoop(sent *atomic.Int64) {
	ctx := context.Background()
	batch := make([]*purchase, 0, maxBatch)
	var groups [][]*purchase
	for first := range r.queue {
		batch = append(batch[:0], first)
	fill:
		for len(batch) < maxBatch {
			select {
			case p, ok := <-r.queue:
				if !ok {
					break fill
				}
				batch = append(batch, p)
			default:
				break fill
			}
		}
		groups = byCall(groups, batch)
		pipe := r.rdb.Pipeline()
		calls := make([]scriptCall, len(groups))
		for i, g := range groups {
			calls[i] = reserveCall(ctx, pipe, g)
		}
		sent.Store(time.Now().UnixNano())
		pipe.Exec(ctx) // each call carries its own error
		sent.Store(0)
		for i, c := range calls {
			v, err := c.reply(ctx, r.rdb)
			replies, err := reserveReplies(v, err, len(groups[i]))
			for j, p := range groups[i] {
				p.err = err
				if err == nil {
					p.reply = replies[j]
				}
				close(p.done)
			}
		}
	}
}

// byCall splits batch into the purchases of one script call each: one campaign (one hash slot)
// and one ttl, in the order they came. groups is reused.
func byCall(groups [][]*purchase, batch []*purchase) [][]*purchase {
	clear(groups)
	groups = groups[:0]
next:
	for _, p := range batch {
		for i, g := range groups {
			if g[0].campaign == p.campaign && g[0].ttlMs == p.ttlMs {
				groups[i] = append(g, p)
				continue next
			}
		}
		groups = append(groups, []*purchase{p})
	}
	return groups
}

// reserveCall makes (or queues, on a pipeline) one reserve call for ps, all of one campaign and
// one ttl.
func reserveCall(ctx context.Context, rdb redis.Scripter, ps []*purchase) scriptCall {
	k := KeysOf(ps[0].campaign)
	args := make([]any, 1, 1+3*len(ps))
	args[0] = ps[0].ttlMs
	for _, p := range ps {
		args = append(args, p.orderID, p.user, p.qty)
	}
	return callScript(ctx, rdb, reserveScript, []string{k.Stock, k.Buyers, k.Res, k.Pending, k.Meta}, args...)
}

// reserveReplies reads the reserve script's reply v (or its error) to n purchases: one
// reserveReply per purchase.
func reserveReplies(v []any, err error, n int) ([]reserveReply, error) {
	if err != nil {
		return nil, err
	}
	if len(v) != 4*n {
		return nil, fmt.Errorf("unexpected reply %v to %d purchases", v, n)
	}
	out := make([]reserveReply, n)
	for i := range out {
		status, ok1 := v[4*i].(string)
		remaining, ok2 := v[4*i+1].(int64)
		deadline, ok3 := v[4*i+2].(int64)
		record, ok4 := v[4*i+3].(string)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return nil, fmt.Errorf("unexpected reply %v to %d purchases", v[4*i:4*i+4], n)
		}
		out[i] = reserveReply{status, remaining, deadline, record}
	}
	return out, nil
}
