package lua

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Under a crowd, hundreds of purchases wait on Redis at once. One round trip per purchase costs
// each of them two system calls on both ends; a coalescer sends whatever purchases are waiting
// in one pipeline instead, so a round trip carries many. A lone purchase goes alone, at once:
// nothing waits for a batch to fill.

// pipelines is how many pipelines may be in flight at once: enough to keep Redis busy while
// the other ones are on the wire.
const pipelines = 4

// maxBatch bounds one pipeline, so no purchase waits behind thousands of others.
const maxBatch = 256

type call struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	done   chan struct{}
}

// startCoalescer starts the pipeline workers. They live as long as the process: stopping them
// would race with a call already queued (which nobody would then answer), while idle workers
// cost nothing, and after Close they answer every call with the closed client's error.
func (r *Redis) startCoalescer() {
	r.calls = make(chan *call, maxBatch*pipelines)
	for range pipelines {
		go r.pipelineLoop()
	}
}

// Close closes the client.
func (r *Redis) Close() error { return r.rdb.Close() }

// run runs script through the coalescer. The pipeline runs to its end even if ctx is canceled
// (the script may already have run); the caller stops waiting at once.
func (r *Redis) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	c := &call{script: script, keys: keys, args: args, done: make(chan struct{})}
	select {
	case r.calls <- c:
	case <-ctx.Done():
		return canceled(ctx)
	}
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
		return canceled(ctx)
	}
}

func canceled(ctx context.Context) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(ctx.Err())
	return cmd
}

func (r *Redis) pipelineLoop() {
	ctx := context.Background()
	batch := make([]*call, 0, maxBatch)
	for {
		batch = append(batch[:0], <-r.calls)
	fill:
		for len(batch) < maxBatch {
			select {
			case c := <-r.calls:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		pipe := r.rdb.Pipeline()
		for _, c := range batch {
			c.cmd = pipe.EvalSha(ctx, c.script.Hash(), c.keys, c.args...)
		}
		pipe.Exec(ctx) // each command carries its own error
		for _, c := range batch {
			if err := c.cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
				// Redis lost its scripts (a restart): EVAL sends the text and caches it again.
				c.cmd = c.script.Eval(ctx, r.rdb, c.keys, c.args...)
			}
			close(c.done)
		}
	}
}
