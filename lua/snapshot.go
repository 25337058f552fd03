package lua

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Snapshot is a campaign's whole Redis state, read in one MULTI/EXEC so that it is consistent.
type Snapshot struct {
	Exists       bool // the meta hash is there
	Frozen       bool
	Remaining    int64
	Limit        int64
	Reservations []Reservation
	Buyers       map[string]int64
	// Stock and Version are the campaign's stock and the store's version of it (its operators'
	// changes) as Redis last took them (load.lua, sync.lua, restore.lua); HasStock is false when
	// the meta holds no stock.
	Stock, Version int64
	HasStock       bool
}

// Snapshot reads campaign's state for the audit. It holds Redis for as long as the reservation
// hash takes to copy: an operator's tool, not something for the purchase path.
func (r *Redis) Snapshot(ctx context.Context, campaign string) (Snapshot, error) {
	k := KeysOf(campaign)
	var (
		meta   *redis.MapStringStringCmd
		stock  *redis.StringCmd
		res    *redis.MapStringStringCmd
		buyers *redis.MapStringStringCmd
	)
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		meta = p.HGetAll(ctx, k.Meta)
		stock = p.Get(ctx, k.Stock)
		res = p.HGetAll(ctx, k.Res)
		buyers = p.HGetAll(ctx, k.Buyers)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Snapshot{}, fmt.Errorf("snapshot of %s: %w", campaign, err)
	}
	s := Snapshot{Buyers: map[string]int64{}}
	m := meta.Val()
	_, s.Frozen = m["frozen"]
	_, s.Exists = m["limit"]
	s.Limit, _ = strconv.ParseInt(m["limit"], 10, 64)
	s.Remaining, _ = strconv.ParseInt(stock.Val(), 10, 64)
	if v, ok := m["stock"]; ok {
		s.Stock, _ = strconv.ParseInt(v, 10, 64)
		s.HasStock = true
	}
	s.Version, _ = strconv.ParseInt(m["ver"], 10, 64)
	for id, rec := range res.Val() {
		rv, err := parseReservation(campaign, id, rec)
		if err != nil {
			return Snapshot{}, err
		}
		s.Reservations = append(s.Reservations, rv)
	}
	for u, v := range buyers.Val() {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return Snapshot{}, fmt.Errorf("snapshot of %s: buyer %q holds %q", campaign, u, v)
		}
		s.Buyers[u] = n
	}
	return s, nil
}

// Records reads the reservation records Redis holds of orderIDs, all of campaign, and whether
// the campaign's sale is there and not frozen, in one MULTI/EXEC: the audit's second look at
// orders its Snapshot had no record of, without copying the whole hash again.
func (r *Redis) Records(ctx context.Context, campaign string, orderIDs []string) (map[string]Reservation, bool, error) {
	if len(orderIDs) == 0 {
		return nil, false, fmt.Errorf("records of %s: no order named", campaign)
	}
	k := KeysOf(campaign)
	var (
		meta *redis.MapStringStringCmd
		recs *redis.SliceCmd
	)
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		meta = p.HGetAll(ctx, k.Meta)
		recs = p.HMGet(ctx, k.Res, orderIDs...)
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("records of %s: %w", campaign, err)
	}
	m := meta.Val()
	_, exists := m["limit"]
	_, frozen := m["frozen"]
	out := make(map[string]Reservation, len(orderIDs))
	if err := parseRecords(out, campaign, orderIDs, recs.Val()); err != nil {
		return nil, false, err
	}
	return out, exists && !frozen, nil
}

// Now returns the clock, in Unix milliseconds, of the Redis server that holds campaign: the
// one its deadlines are written with and its sale's end is compared with.
func (r *Redis) Now(ctx context.Context, campaign string) (int64, error) {
	ms, err := callScript(ctx, r.rdb, nowScript, []string{KeysOf(campaign).Meta}).result(ctx, r.rdb).Int64()
	if err != nil {
		return 0, fmt.Errorf("redis time of %s: %w", campaign, err)
	}
	return ms, nil
}
