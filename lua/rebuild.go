package lua

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Redis is fast, not durable: a restart or a failover can lose the last writes, or all of them.
// The compensator watches for that (Identity), freezes every campaign (Freeze) so that reserve
// sells nothing, waits until the store holds every order Kafka had, and then rebuilds each
// campaign from the store (Restore).

// epochKey names the key whose value identifies one generation of a deployment's Redis data.
func epochKey(prefix string) string { return "seckill:{epoch:" + prefix + "}" }

// Identity returns the Redis server's run id, which changes on every restart, and the epoch of
// the deployment named by prefix, "" when the key is missing: lost with the data. A server that
// does not report a run id (miniredis) gives "": then only a missing epoch tells of a loss.
func (r *Redis) Identity(ctx context.Context, prefix string) (runID, epoch string, err error) {
	pipe := r.rdb.Pipeline()
	info := pipe.Info(ctx, "server")
	ep := pipe.Get(ctx, epochKey(prefix))
	pipe.Exec(ctx) // each command carries its own error
	if err := ep.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return "", "", fmt.Errorf("redis identity: %w", err)
	}
	for _, line := range strings.Split(info.Val(), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			runID = v
		}
	}
	return runID, ep.Val(), nil
}

// SetEpoch records a new epoch for the deployment named by prefix.
func (r *Redis) SetEpoch(ctx context.Context, prefix, epoch string) error {
	if err := r.rdb.Set(ctx, epochKey(prefix), epoch, 0).Err(); err != nil {
		return fmt.Errorf("set epoch: %w", err)
	}
	return nil
}

// Freeze marks campaigns frozen: reserve refuses them (events.Unavailable) until Restore.
func (r *Redis) Freeze(ctx context.Context, campaigns ...string) error {
	pipe := r.rdb.Pipeline()
	for _, c := range campaigns {
		pipe.HSet(ctx, KeysOf(c).Meta, "frozen", 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("freeze %d campaigns: %w", len(campaigns), err)
	}
	return nil
}

// Restore replaces a frozen campaign's Redis state with c (remaining, limits, holdings) and the
// records of its confirmed orders, then puts it back on sale. Reservations still pending in
// Redis are dropped: the caller restores only once the store holds every order whose event
// reached Kafka, and the store fails the others.
func (r *Redis) Restore(ctx context.Context, c Campaign, confirmed []Reservation) error {
	k := KeysOf(c.ID)
	pipe := r.rdb.Pipeline()
	pipe.Del(ctx, k.Stock, k.Buyers, k.Res, k.Pending, k.Done)
	const chunk = 500 // fields per HSET, so no single command blocks Redis for long
	args := make([]any, 0, 2*chunk)
	flush := func(key string) {
		if len(args) > 0 {
			pipe.HSet(ctx, key, args...)
			args = args[:0]
		}
	}
	for _, res := range confirmed {
		args = append(args, res.OrderID, "confirmed|"+strconv.Itoa(res.Quantity)+"|0|"+res.User)
		if len(args) == cap(args) {
			flush(k.Res)
		}
	}
	flush(k.Res)
	for user, n := range c.Holdings {
		if n > 0 {
			args = append(args, user, n)
		}
		if len(args) == cap(args) {
			flush(k.Buyers)
		}
	}
	flush(k.Buyers)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("restore campaign %s: %w", c.ID, err)
	}
	starts, ends := c.window()
	n, err := restoreScript.Run(ctx, r.rdb, []string{k.Stock, k.Meta}, c.Remaining, c.Limit, starts, ends).Int()
	if err != nil {
		return fmt.Errorf("restore campaign %s: %w", c.ID, err)
	}
	if n == 0 {
		return fmt.Errorf("restore campaign %s: it was not frozen", c.ID)
	}
	return nil
}
