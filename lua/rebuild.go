package lua

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/events"
)

// Redis is fast, not durable: a restart or a failover can lose the last writes, or all of them.
// The compensator watches every campaign for that (Generations), freezes the ones whose server
// changed (Freeze) so that reserve sells nothing of them, waits until the store holds every
// order Kafka had, and then rebuilds each from the store (Restore).
//
// A campaign's meta records the run id of the server that loaded or restored it ("gen"). A
// restart, a failover to a replica (which may lack the last acknowledged writes: replication
// is asynchronous) or a Cluster shard's failover all put the campaign's keys on a server with
// another run id, or on none. So the check is per campaign, which is per shard on a Cluster:
// the campaigns of the other shards never stop selling. A Cluster reshard puts the keys on
// another run id too, whole: the guard tells it from a loss by the primaries it saw (Masters)
// and records the new one (Rehome).

// Generation is what the guard compares for one campaign.
type Generation struct {
	Exists   bool   // Redis has the campaign's meta
	Recorded string // the run id its meta records
	Server   string // the run id of the primary that holds its keys now, read with the meta
	Frozen   bool   // it is frozen: a rebuild is under way, or stopped half way
}

// Lost reports whether the campaign's data may be older than what buyers were told: its keys
// are gone, or they are on another server than the one that last wrote them whole.
func (g Generation) Lost() bool { return !g.Exists || g.Recorded != g.Server }

// Generations returns the generation of each campaign whose server answered; a campaign whose
// primary cannot be reached (a shard failing over) is left out, and its error joined into err.
// A server that does not report a run id (miniredis) gives "", so that only a missing campaign
// tells of a loss there.
//
// The meta and the run id are read in one script, on the server that holds the meta: the
// client's slot map may be a reshard or a failover behind, and the run id of the primary it
// names is then not that of the server the keys were read from, which a guard that tells a
// reshard from a loss must know.
func (r *Redis) Generations(ctx context.Context, campaigns []string) (map[string]Generation, error) {
	var errs []error
	calls := make(map[string]scriptCall, len(campaigns))
	pipe := r.rdb.Pipeline()
	for _, c := range campaigns {
		calls[c] = callScript(ctx, pipe, generationScript, []string{KeysOf(c).Meta})
	}
	pipe.Exec(ctx) // each call carries its own error
	out := make(map[string]Generation, len(campaigns))
	for c, call := range calls {
		g, err := r.generationOf(ctx, c, call)
		if err != nil {
			errs = append(errs, fmt.Errorf("campaign %s: %w", c, err))
			continue
		}
		out[c] = g
	}
	if cc, ok := r.rdb.(*redis.ClusterClient); ok && len(errs) > 0 {
		cc.ReloadState(ctx) // a primary that does not answer may have been replaced
	}
	return out, errors.Join(errs...)
}

// generationOf reads the reply of generation.lua for campaign.
func (r *Redis) generationOf(ctx context.Context, campaign string, call scriptCall) (Generation, error) {
	v, err := call.reply(ctx, r.rdb)
	if err == nil && len(v) != 4 {
		err = fmt.Errorf("%d values, want 4", len(v))
	}
	if err != nil {
		return Generation{}, fmt.Errorf("read meta: %w", err)
	}
	g := Generation{Exists: v[0] != nil, Frozen: v[2] != nil}
	g.Recorded, _ = v[1].(string)
	if id, ok := v[3].(string); ok {
		g.Server = id
		return g, nil
	}
	// The script could not run INFO: the server itself tells one without run ids (miniredis)
	// from a user without INFO.
	node, err := r.primaryOf(ctx, KeysOf(campaign).Meta)
	if err == nil {
		g.Server, err = runID(ctx, node)
	}
	return g, err
}

// primaryOf returns the client of the primary that holds key: on a Cluster, the master of its
// slot; else the one server (a Sentinel client follows the current primary).
func (r *Redis) primaryOf(ctx context.Context, key string) (*redis.Client, error) {
	switch c := r.rdb.(type) {
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *redis.Client:
		return c, nil
	}
	return nil, fmt.Errorf("unsupported redis client %T", r.rdb)
}

// runID returns the run id of a server, "" if it does not report one (miniredis). Any other
// error reply is an error, not a server without run ids: a user whose ACL denies INFO (it is in
// @dangerous, which least-privilege users often lack) or a server that disabled INFO
// (rename-command) would record "" everywhere and never see a restart or a failover that lost
// acknowledged writes; and a primary busy with a long script (BUSY) would look like one whose
// run id changed, or that serves no slot.
func runID(ctx context.Context, node *redis.Client) (string, error) {
	info, err := node.Info(ctx, "server").Result()
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) && re.Error() == "section (server) is not supported" {
			return "", nil // miniredis, which knows no server section
		}
		return "", fmt.Errorf("redis info server (seckill tells a restart or a failover that lost writes from the run id; the Redis user needs +info): %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return v, nil
		}
	}
	return "", nil
}

// Masters returns the run ids of the primaries that serve slots now: on a Cluster, every
// master of the slot map, read afresh; else the one server. A primary that does not answer is
// left out, its error joined into err, and so is one that reports no run id (miniredis).
func (r *Redis) Masters(ctx context.Context) (map[string]bool, error) {
	var mu sync.Mutex
	out := map[string]bool{}
	var errs []error
	add := func(ctx context.Context, node *redis.Client) error {
		id, err := runID(ctx, node)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("primary %s: %w", node.Options().Addr, err))
		case id != "":
			out[id] = true
		}
		return nil
	}
	switch c := r.rdb.(type) {
	case *redis.ClusterClient:
		if err := c.ForEachMaster(ctx, add); err != nil {
			errs = append(errs, fmt.Errorf("primaries: %w", err))
		}
	case *redis.Client:
		add(ctx, c)
	default:
		errs = append(errs, fmt.Errorf("unsupported redis client %T", r.rdb))
	}
	return out, errors.Join(errs...)
}

// Rehome records in campaign's meta that its keys live on the primary whose run id is to, no
// longer on from's: a reshard moved them whole. It reports whether it did; it writes nothing
// where the meta no longer records from (a rebuild restored the campaign meanwhile) or the
// campaign is frozen.
func (r *Redis) Rehome(ctx context.Context, campaign, from, to string) (bool, error) {
	n, err := rehomeScript.Run(ctx, r.rdb, []string{KeysOf(campaign).Meta}, from, to).Int()
	if err != nil {
		return false, fmt.Errorf("rehome campaign %s: %w", campaign, err)
	}
	return n == 1, nil
}

// generation returns the run id to record in the meta of the campaign whose meta key is meta:
// its primary's, read before the write. A failover in between records the old server's id,
// which only makes the guard rebuild the campaign once more.
func (r *Redis) generation(ctx context.Context, meta string) (string, error) {
	node, err := r.primaryOf(ctx, meta)
	if err != nil {
		return "", err
	}
	return runID(ctx, node)
}

// ErrNotFrozenByThis is Restore's error when the campaign is not frozen by the rebuild that
// restores it: a later rebuild froze it again (this one's lease ran out while it worked, and
// the other took over), or restored it and put it back on sale. Restore then changed nothing.
var ErrNotFrozenByThis = errors.New("not frozen by this rebuild: another rebuild took it over or restored it")

// Freeze marks campaigns frozen: reserve refuses them (events.Unavailable) until Restore. It
// returns the rebuild's mark, new at each call, which the frozen field holds and Restore must
// be given. A later Freeze of a campaign replaces the mark: from then on only the later
// rebuild may write it, and its Restore starts by clearing whatever the earlier one wrote.
//
// The writes go in one pipeline, and each may fail on its own (on a Cluster, a shard that
// refuses writes): the error then comes with the mark as long as one write went through, for
// only a Restore with it puts those campaigns back on sale. Restore tells which did not take
// it (ErrNotFrozenByThis).
func (r *Redis) Freeze(ctx context.Context, campaigns ...string) (string, error) {
	mark := events.NewID()
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(campaigns))
	for i, c := range campaigns {
		cmds[i] = pipe.HSet(ctx, KeysOf(c).Meta, "frozen", mark)
	}
	_, err := pipe.Exec(ctx)
	if err == nil {
		return mark, nil
	}
	err = fmt.Errorf("freeze %d campaigns: %w", len(campaigns), err)
	if slices.ContainsFunc(cmds, func(cmd *redis.IntCmd) bool { return cmd.Err() == nil }) {
		return mark, err
	}
	return "", err
}

// Restore replaces a frozen campaign's Redis state with c (remaining, limits, holdings) and the
// reservation records of its orders, then puts it back on sale. A confirmed record (a paid
// order's too) is what a refund or an expiry gives units back through. A released, refunded or
// expired one goes in the done set by when it Ended, as release.lua leaves it, so that a keyed
// retry of its order finds it ended instead of reserving anew, until trim.lua drops it after
// the retention; it adds nothing to remaining or holdings. Reservations still pending in Redis
// are dropped: the caller restores only once the store holds every order whose event reached
// Kafka, and the store fails the others.
//
// mark is what Freeze returned. Each step is a script that first checks that the campaign is
// still frozen with mark and otherwise writes nothing and fails (ErrNotFrozenByThis): a rebuild
// paused past its lease must not wipe the sale its successor restored and buyers reserve from.
// Only the last step lifts the mark, so a Restore that failed half way may be run again with
// the same mark; it starts over.
func (r *Redis) Restore(ctx context.Context, mark string, c Campaign, records []Reservation) error {
	k := KeysOf(c.ID)
	// The store keeps no reservation's deadline, and nothing reads one once it is not pending.
	var confirmed, ended []any
	for _, res := range records {
		rec := res.State + "|" + strconv.Itoa(res.Quantity) + "|0|" + res.User
		switch res.State {
		case StateConfirmed:
			confirmed = append(confirmed, res.OrderID, rec)
		case StateReleased, StateRefunded, StateExpired:
			ended = append(ended, res.OrderID, rec, res.Ended.UnixMilli())
		default:
			return fmt.Errorf("restore campaign %s: order %s: no record to restore in state %q", c.ID, res.OrderID, res.State)
		}
	}
	if err := frozenBy(restoreClear.Run(ctx, r.rdb, []string{k.Meta, k.Stock, k.Buyers, k.Res, k.Pending, k.Done}, mark)); err != nil {
		return fmt.Errorf("restore campaign %s: %w", c.ID, err)
	}
	holdings := make([]any, 0, 2*len(c.Holdings))
	for user, n := range c.Holdings {
		if n > 0 {
			holdings = append(holdings, user, n)
		}
	}
	// The fills commute, so they share a pipeline, whose NOSCRIPT fallback (scriptCall.result)
	// may run one after those behind it. The clearing before them and restore.lua after them
	// are calls of their own: out of order, they would delete the fills, or sell without them.
	const chunk = 500 // records or holdings per call, so no single call blocks Redis for long
	pipe := r.rdb.Pipeline()
	var fills []scriptCall
	for _, f := range []struct {
		script *redis.Script
		keys   []string
		args   []any
		width  int // arguments per record or holding
	}{
		{restoreFill, []string{k.Meta, k.Res}, confirmed, 2},
		{restoreFill, []string{k.Meta, k.Buyers}, holdings, 2},
		{restoreEnded, []string{k.Meta, k.Res, k.Done}, ended, 3},
	} {
		for args := range slices.Chunk(f.args, f.width*chunk) {
			fills = append(fills, callScript(ctx, pipe, f.script, f.keys, append([]any{mark}, args...)...))
		}
	}
	pipe.Exec(ctx) // each call carries its own error
	for _, f := range fills {
		if err := frozenBy(f.result(ctx, r.rdb)); err != nil {
			return fmt.Errorf("restore campaign %s: %w", c.ID, err)
		}
	}
	gen, err := r.generation(ctx, k.Meta)
	if err != nil {
		return fmt.Errorf("restore campaign %s: %w", c.ID, err)
	}
	if err := frozenBy(restoreScript.Run(ctx, r.rdb, []string{k.Stock, k.Meta}, append(c.args(gen), mark)...)); err != nil {
		return fmt.Errorf("restore campaign %s: %w", c.ID, err)
	}
	return nil
}

// frozenBy turns the reply of a restore script into its error: 0 means the campaign is not
// frozen by this rebuild, and the script wrote nothing.
func frozenBy(cmd *redis.Cmd) error {
	n, err := cmd.Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFrozenByThis
	}
	return nil
}
