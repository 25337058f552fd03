package lua

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Under a crowd, hundreds of purchases wait on Redis at once. One script call per purchase costs
// each of them two system calls on both ends and Redis a script call of its own; the coalescer
// takes whatever purchases are waiting and sends them as one reserve call per campaign (the
// script takes many), all in one pipeline. A lone purchase goes alone, at once: nothing waits for
// a batch to fill.

// pipelines is how many pipelines may be in flight at once: enough to keep Redis busy while
// the other ones are on the wire.
const pipelines = 4

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

// startCoalescer starts the pipeline workers. They live as long as the process: stopping them
// would race with a purchase already queued (which nobody would then answer), while idle workers
// cost nothing, and after Close they answer every purchase with the closed client's error.
func (r *Redis) startCoalescer() {
	r.queue = make(chan *purchase, maxBatch*pipelines)
	for range pipelines {
		go r.pipelineLoop()
	}
}

// Close closes the client.
func (r *Redis) Close() error { return r.rdb.Close() }

// reserve runs the reserve script for p: through the coalescer, or in a call of its own when r
// has none (Alone). A pipeline runs to its end even if ctx is canceled (the script may already
// have run); the caller stops waiting at once.
func (r *Redis) reserve(ctx context.Context, p *purchase) (reserveReply, error) {
	if r.queue == nil {
		replies, err := reserveGroup(ctx, r.rdb, []*purchase{p}).finish(r.rdb)
		if err != nil {
			return reserveReply{}, err
		}
		return replies[0], nil
	}
	p.done = make(chan struct{})
	select {
	case r.queue <- p:
	case <-ctx.Done():
		return reserveReply{}, ctx.Err()
	}
	select {
	case <-p.done:
		return p.reply, p.err
	case <-ctx.Done():
		return reserveReply{}, ctx.Err()
	}
}

func (r *Redis) pipelineLoop() {
	ctx := context.Background()
	batch := make([]*purchase, 0, maxBatch)
	var groups [][]*purchase
	for {
		batch = append(batch[:0], <-r.queue)
	fill:
		for len(batch) < maxBatch {
			select {
			case p := <-r.queue:
				batch = append(batch, p)
			default:
				break fill
			}
		}
		groups = byCall(groups, batch)
		pipe := r.rdb.Pipeline()
		calls := make([]reserveCall, len(groups))
		for i, g := range groups {
			calls[i] = reserveGroup(ctx, pipe, g)
		}
		pipe.Exec(ctx) // each command carries its own error
		for i, c := range calls {
			replies, err := c.finish(r.rdb)
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

// reserveCall is one reserve script call, sent or queued in a pipeline.
type reserveCall struct {
	ctx  context.Context
	cmd  *redis.Cmd
	keys []string
	args []any
	n    int
}

// reserveGroup sends (or queues, on a pipeline) one reserve call for ps, all of one campaign and
// one ttl.
func reserveGroup(ctx context.Context, rdb redis.Scripter, ps []*purchase) reserveCall {
	k := KeysOf(ps[0].campaign)
	args := make([]any, 1, 1+3*len(ps))
	args[0] = ps[0].ttlMs
	for _, p := range ps {
		args = append(args, p.orderID, p.user, p.qty)
	}
	keys := []string{k.Stock, k.Buyers, k.Res, k.Pending, k.Meta}
	return reserveCall{ctx: ctx, cmd: rdb.EvalSha(ctx, reserveScript.Hash(), keys, args...), keys: keys, args: args, n: len(ps)}
}

// finish reads the call's replies, one per purchase. When Redis has lost its scripts (a
// restart), it makes the call again on rdb as an EVAL with the script's text, which caches it.
func (c reserveCall) finish(rdb redis.Scripter) ([]reserveReply, error) {
	v, err := c.cmd.Slice()
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		v, err = reserveScript.Eval(c.ctx, rdb, c.keys, c.args...).Slice()
	}
	if err != nil {
		return nil, err
	}
	if len(v) != 4*c.n {
		return nil, fmt.Errorf("unexpected reply %v to %d purchases", v, c.n)
	}
	out := make([]reserveReply, c.n)
	for i := range out {
		status, ok1 := v[4*i].(string)
		remaining, ok2 := v[4*i+1].(int64)
		deadline, ok3 := v[4*i+2].(int64)
		record, ok4 := v[4*i+3].(string)
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return nil, fmt.Errorf("unexpected reply %v to %d purchases", v[4*i:4*i+4], c.n)
		}
		out[i] = reserveReply{status, remaining, deadline, record}
	}
	return out, nil
}
