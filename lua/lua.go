package lua

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/events"
)

var (
	//go:embed reserve.lua
	reserveSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed confirm.lua
	confirmSrc string
	//go:embed expired.lua
	expiredSrc string
	//go:embed load.lua
	loadSrc string
	//go:embed restore.lua
	restoreSrc string
	//go:embed restore_clear.lua
	restoreClearSrc string
	//go:embed restore_fill.lua
	restoreFillSrc string
	//go:embed restore_ended.lua
	restoreEndedSrc string
	//go:embed rehome.lua
	rehomeSrc string
	//go:embed generation.lua
	generationSrc string
	//go:embed sync.lua
	syncSrc string
	//go:embed trim.lua
	trimSrc string
	//go:embed drop.lua
	dropSrc string
	//go:embed lock_acquire.lua
	lockAcquireSrc string
	//go:embed lock_renew.lua
	lockRenewSrc string
	//go:embed lock_release.lua
	lockReleaseSrc string
	//go:embed now.lua
	nowSrc string
	//go:embed idempotency.lua
	idempotencySrc string

	reserveScript    = newScript(reserveSrc)
	releaseScript    = newScript(releaseSrc)
	confirmScript    = newScript(confirmSrc)
	expiredScript    = newScript(expiredSrc)
	loadScript       = newScript(loadSrc)
	restoreScript    = newScript(restoreSrc)
	restoreClear     = newScript(restoreClearSrc)
	restoreFill      = newScript(restoreFillSrc)
	restoreEnded     = newScript(restoreEndedSrc)
	rehomeScript     = newScript(rehomeSrc)
	generationScript = newScript(generationSrc)
	syncScript       = newScript(syncSrc)
	trimScript       = newScript(trimSrc)
	dropScript       = newScript(dropSrc)
	lockAcquire      = newScript(lockAcquireSrc)
	lockRenew        = newScript(lockRenewSrc)
	lockRelease      = newScript(lockReleaseSrc)
	nowScript        = newScript(nowSrc)

	// Idempotency is the record of one Idempotency-Key, which the api keeps (api/idempotency.go):
	// here with the other scripts, so Load loads it with them.
	Idempotency = newScript(idempotencySrc)
)

// Keys are the Redis keys of one campaign.
type Keys struct {
	Stock   string // remaining units
	Buyers  string // hash user -> units held (pending + confirmed)
	Res     string // hash order id -> reservation
	Pending string // sorted set of pending order ids by deadline (ms)
	Meta    string // hash: limit, starts_ms, ends_ms, gen (rebuild.go), and frozen (the rebuild's mark) while a rebuild runs
	Done    string // sorted set of released, refunded and expired order ids by when they ended (ms)
}

// All returns every key of the campaign.
func (k Keys) All() []string { return []string{k.Stock, k.Buyers, k.Res, k.Pending, k.Meta, k.Done} }

// KeysOf returns the keys of campaign; they share one hash tag.
func KeysOf(campaign string) Keys {
	p := "seckill:{c:" + campaign + "}:"
	return Keys{Stock: p + "stock", Buyers: p + "buyers", Res: p + "res", Pending: p + "pending", Meta: p + "meta", Done: p + "done"}
}

// Redis runs the scripts on one Redis deployment.
type Redis struct {
	rdb   redis.UniversalClient
	queue chan *purchase // to the coalescer (coalesce.go); nil: each purchase alone

	mu         sync.RWMutex // held for reading while a purchase enters queue, for writing by Close
	closed     bool         // queue is closed
	workers    sync.WaitGroup
	sent       [pipelines]atomic.Int64 // when each pipeline sent its batch (coalesce.go)
	answerWait time.Duration           // SetAnswerWait
}

// New returns a Redis over rdb. Close stops the goroutines it starts and closes rdb.
func New(rdb redis.UniversalClient) *Redis {
	r := &Redis{rdb: rdb}
	r.startCoalescer()
	return r
}

// Alone returns a Redis over r's client that sends each purchase in a script call and a round
// trip of its own, with no coalescer: what a handler does that calls the reserve script once
// per request, the bench's bare-reserve baseline.
func (r *Redis) Alone() *Redis { return &Redis{rdb: r.rdb} }

// Client returns the underlying client.
func (r *Redis) Client() redis.UniversalClient { return r.rdb }

// Ping reports whether Redis answers. On a Cluster, whether any primary does: with a shard down,
// its campaigns' buyers are answered 503 while every other campaign sells, so a process that
// reaches one primary is ready. A PING without a key goes to a primary picked at random.
func (r *Redis) Ping(ctx context.Context) error {
	cc, ok := r.rdb.(*redis.ClusterClient)
	if !ok {
		return r.rdb.Ping(ctx).Err()
	}
	var (
		mu   sync.Mutex
		up   bool
		errs []error
	)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		err := node.Ping(ctx).Err()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", node.Options().Addr, err))
		} else {
			up = true
		}
		return nil
	})
	if up {
		return nil
	}
	return errors.Join(append(errs, err)...)
}

// sources are the scripts' texts, for Load.
var sources []string

func newScript(src string) *redis.Script {
	sources = append(sources, src)
	return redis.NewScript(src)
}

// Load preloads every script in one pipeline per server (on a Cluster, every shard's), so the
// hot path never pays for a NOSCRIPT reply. Not Script.Load: queued in a pipeline it reads its
// reply before there is one, and sets the script's hash to "", after which every EVALSHA misses
// and falls back to a full EVAL. A server that joins later (a replica promoted by a failover)
// gets each script from its first NOSCRIPT (scriptCall.reply). It checks too that every server
// tells its run id, which the guard needs (runID).
func (r *Redis) Load(ctx context.Context) error {
	load := func(ctx context.Context, node *redis.Client) error {
		pipe := node.Pipeline()
		for _, src := range sources {
			pipe.ScriptLoad(ctx, src)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		_, err := runID(ctx, node) // a user the guard cannot work with stops at start
		return err
	}
	var err error
	switch c := r.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachShard(ctx, load)
	case *redis.Client:
		err = load(ctx, c)
	default:
		err = fmt.Errorf("unsupported redis client %T", r.rdb)
	}
	if err != nil {
		return fmt.Errorf("load scripts: %w", err)
	}
	return nil
}

// Campaign is what Redis needs to sell a campaign.
type Campaign struct {
	ID        string
	Remaining int64
	Limit     int64
	StartsAt  time.Time
	EndsAt    time.Time // zero: no end
	// Holdings are the units each buyer already holds: Restore writes them when it rebuilds a
	// campaign from the store. A new campaign has none.
	Holdings map[string]int64
	// Stock is the campaign's total units, what Sync adds to. Zero: Remaining (nothing sold).
	Stock int64
	// Version is the store's count of the operators' changes to the campaign (Sync).
	Version int64
}

// args are the scripts' arguments after KEYS for load and restore.
func (c Campaign) args(gen string) []any {
	starts, ends := c.window()
	stock := c.Stock
	if stock == 0 {
		stock = c.Remaining
	}
	return []any{c.Remaining, c.Limit, starts, ends, gen, stock, c.Version}
}

// Synced says what Sync did.
type Synced int

// What Sync did.
const (
	SyncApplied  Synced = 1  // Redis took the change
	SyncHad      Synced = 0  // Redis had this version or a newer one
	SyncNotFound Synced = -1 // the campaign is not in Redis (the reconciler or a rebuild loads it)
	SyncFrozen   Synced = -2 // the campaign is frozen; its rebuild writes the store's figures
)

// Sync applies the campaign's stock and end at its version, once: units added to the stock go
// on sale, and the end moves. An older version than Redis holds changes nothing.
func (r *Redis) Sync(ctx context.Context, c Campaign) (Synced, error) {
	k := KeysOf(c.ID)
	_, ends := c.window()
	n, err := syncScript.Run(ctx, r.rdb, []string{k.Stock, k.Meta}, c.Version, c.Stock, ends).Int()
	if err != nil {
		return 0, fmt.Errorf("sync campaign %s: %w", c.ID, err)
	}
	return Synced(n), nil
}

// Pending returns up to limit order ids of campaign's pending reservations, earliest deadline
// first.
func (r *Redis) Pending(ctx context.Context, campaign string, limit int) ([]string, error) {
	ids, err := r.rdb.ZRange(ctx, KeysOf(campaign).Pending, 0, int64(limit)-1).Result()
	if err != nil {
		return nil, fmt.Errorf("pending reservations of %s: %w", campaign, err)
	}
	return ids, nil
}

// window returns the sale's window as the scripts take it: milliseconds, 0 for no end.
func (c Campaign) window() (starts, ends int64) {
	if !c.EndsAt.IsZero() {
		ends = c.EndsAt.UnixMilli()
	}
	return c.StartsAt.UnixMilli(), ends
}

// LoadCampaign puts a new campaign on sale unless Redis has it already; it reports whether it
// loaded. Rebuilding a campaign Redis lost is Restore's work.
func (r *Redis) LoadCampaign(ctx context.Context, c Campaign) (bool, error) {
	k := KeysOf(c.ID)
	gen, err := r.generation(ctx, k.Meta)
	if err != nil {
		return false, fmt.Errorf("load campaign %s: %w", c.ID, err)
	}
	n, err := loadScript.Run(ctx, r.rdb, []string{k.Stock, k.Meta}, c.args(gen)...).Int()
	if err != nil {
		return false, fmt.Errorf("load campaign %s: %w", c.ID, err)
	}
	return n == 1, nil
}

// The states of a reservation record, the first part of its "state|quantity|deadline_ms|user".
// The scripts write them; the Go code that reads or asks for one names it by these.
const (
	// StatePending is a reservation that holds its units until the consumer confirms it or the
	// compensator releases it (by its deadline at the latest). reserve.lua writes it.
	StatePending = "pending"
	// StateConfirmed is a reservation whose order the store holds, confirmed or paid: its
	// units stay taken. confirm.lua writes it (Confirm, ConfirmAll), and Restore rebuilds it.
	StateConfirmed = "confirmed"
	// StateReleased is a pending reservation that will not become an order: its units are
	// back on sale. release.lua writes it (Release), and Restore rebuilds it.
	StateReleased = "released"
	// StateRefunded is a confirmed reservation whose order was refunded: its units are back
	// on sale. release.lua writes it (Refund), and Restore rebuilds it.
	StateRefunded = "refunded"
	// StateExpired is a confirmed reservation whose order was not paid within its campaign's
	// payment window: its units are back on sale. release.lua writes it (Expire), and Restore
	// rebuilds it.
	StateExpired = "expired"
)

// Reservation is one reservation record.
type Reservation struct {
	OrderID  string
	Campaign string
	User     string
	Quantity int
	State    string // one of the State constants
	Deadline time.Time
	// Ended is when a released, refunded or expired reservation ended, which Restore writes
	// in the done set (trim.lua drops the record a retention after it). Zero when read back.
	Ended time.Time
	// Again is Reserve's: the order id was reserved before, and this is that reservation.
	Again bool
}

// Reserve takes qty units of campaign for user under orderID, holding them until ttl has passed
// on Redis's clock. Reserving an order id again changes nothing and returns the first
// reservation. Refusals are *events.Error with the code the client sees.
func (r *Redis) Reserve(ctx context.Context, campaign, orderID, user string, qty int, ttl time.Duration) (Reservation, error) {
	v, err := r.reserve(ctx, &purchase{campaign: campaign, orderID: orderID, user: user, qty: qty, ttlMs: ttl.Milliseconds()})
	if err != nil {
		return Reservation{}, fmt.Errorf("reserve campaign %s: %w", campaign, err)
	}
	res := Reservation{OrderID: orderID, Campaign: campaign, User: user, Quantity: qty, State: StatePending, Deadline: time.UnixMilli(v.deadline)}
	switch v.status {
	case "ok":
		return res, nil
	case "duplicate":
		// A retry may disagree with the first request; the first one is what Redis holds.
		first, err := parseReservation(campaign, orderID, v.record)
		if err != nil {
			return Reservation{}, fmt.Errorf("reserve campaign %s: %w", campaign, err)
		}
		first.Again = true
		return first, nil
	case "malformed":
		return Reservation{}, fmt.Errorf("reserve campaign %s: order %s: malformed record %q", campaign, orderID, v.record)
	case "frozen":
		return res, events.Errorf(events.Unavailable, "campaign %q is paused while its stock is restored; try again in a few seconds", campaign)
	case string(events.CampaignNotFound):
		return res, events.Errorf(events.CampaignNotFound, "campaign %q not found", campaign)
	case string(events.SoldOut):
		return res, events.Errorf(events.SoldOut, "campaign %q has fewer than %d units left", campaign, qty)
	case string(events.LimitExceeded):
		return res, events.Errorf(events.LimitExceeded, "this purchase would take you past the campaign's per-user limit")
	case string(events.NotStarted):
		return res, events.Errorf(events.NotStarted, "campaign %q has not started", campaign)
	case string(events.Ended):
		return res, events.Errorf(events.Ended, "campaign %q has ended", campaign)
	case string(events.Invalid):
		return res, events.Errorf(events.Invalid, "quantity %d is not between 1 and the campaign's per-user limit", qty)
	}
	return res, fmt.Errorf("reserve campaign %s: unexpected reply %+v", campaign, v)
}

// Outcome is what a state transition did.
type Outcome struct {
	Changed bool   // this call moved the reservation
	State   string // the reservation's state after the call; "" if there is no reservation
}

// ErrNoReservation is returned by Reservation when Redis holds no record of the order.
var ErrNoReservation = errors.New("no reservation")

// ErrMalformed is wrapped by the error of a reservation record Redis holds but that cannot be
// parsed: only a person who mends the record in Redis can resolve its order.
var ErrMalformed = errors.New("malformed record")

// Release moves a pending reservation to released and gives its units back.
func (r *Redis) Release(ctx context.Context, orderID string) (Outcome, error) {
	return r.release(ctx, orderID, StatePending, StateReleased)
}

// Refund moves a confirmed reservation to refunded and gives its units back.
func (r *Redis) Refund(ctx context.Context, orderID string) (Outcome, error) {
	return r.release(ctx, orderID, StateConfirmed, StateRefunded)
}

// Expire moves a confirmed reservation whose order was not paid in its window to expired and
// gives its units back.
func (r *Redis) Expire(ctx context.Context, orderID string) (Outcome, error) {
	return r.release(ctx, orderID, StateConfirmed, StateExpired)
}

func (r *Redis) release(ctx context.Context, orderID, from, to string) (Outcome, error) {
	campaign, ok := events.CampaignOf(orderID)
	if !ok {
		return Outcome{}, events.Errorf(events.Invalid, "malformed order id %q", orderID)
	}
	k := KeysOf(campaign)
	v, err := releaseScript.Run(ctx, r.rdb, []string{k.Stock, k.Buyers, k.Res, k.Pending, k.Done}, orderID, from, to).StringSlice()
	if err != nil && strings.HasPrefix(err.Error(), "malformed reservation") { // release.lua's error_reply
		return Outcome{}, fmt.Errorf("%s order %s: %w", to, orderID, ErrMalformed)
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("%s order %s: %w", to, orderID, err)
	}
	if len(v) != 2 {
		return Outcome{}, fmt.Errorf("%s order %s: unexpected reply %q", to, orderID, v)
	}
	return Outcome{Changed: v[0] == "done", State: v[1]}, nil
}

// Trim drops the records of campaign's reservations that were released or refunded more than
// retention ago, at most limit of them, and returns how many it dropped.
func (r *Redis) Trim(ctx context.Context, campaign string, retention time.Duration, limit int) (int, error) {
	k := KeysOf(campaign)
	n, err := trimScript.Run(ctx, r.rdb, []string{k.Res, k.Done}, retention.Milliseconds(), limit).Int()
	if err != nil {
		return 0, fmt.Errorf("trim campaign %s: %w", campaign, err)
	}
	return n, nil
}

// Drop deletes the keys of campaign, which has ended at version (the store's count of its
// operators' changes), unless a reservation is still pending or Redis holds a newer version,
// an operator's reopening of the sale; it reports whether it deleted.
func (r *Redis) Drop(ctx context.Context, campaign string, version int64) (bool, error) {
	k := KeysOf(campaign)
	n, err := dropScript.Run(ctx, r.rdb, append([]string{k.Pending, k.Meta}, k.All()...), version).Int()
	if err != nil {
		return false, fmt.Errorf("drop campaign %s: %w", campaign, err)
	}
	return n == 1, nil
}

// Confirm marks a pending reservation confirmed: ConfirmAll's script with a batch of one.
func (r *Redis) Confirm(ctx context.Context, orderID string) (Outcome, error) {
	campaign, ok := events.CampaignOf(orderID)
	if !ok {
		return Outcome{}, events.Errorf(events.Invalid, "malformed order id %q", orderID)
	}
	k := KeysOf(campaign)
	v, err := confirmScript.Run(ctx, r.rdb, []string{k.Res, k.Pending}, orderID).Slice()
	if err != nil {
		return Outcome{}, fmt.Errorf("confirm order %s: %w", orderID, err)
	}
	outcomes, err := confirmOutcomes(v, 1)
	if err != nil {
		return Outcome{}, fmt.Errorf("confirm order %s: %w", orderID, err)
	}
	o := outcomes[0]
	if o.outcome == "malformed" {
		return Outcome{}, fmt.Errorf("confirm order %s: %w: %s", orderID, ErrMalformed, o.state)
	}
	return Outcome{Changed: o.outcome == "done", State: o.state}, nil
}

// confirmOutcome is one order's {outcome, state} in a confirm reply, as confirm.lua names them.
type confirmOutcome struct{ outcome, state string }

// confirmOutcomes decodes the reply of the confirm script over n orders: the orders it lists
// with their outcome, every other one "done", "confirmed".
func confirmOutcomes(v []any, n int) ([]confirmOutcome, error) {
	out := make([]confirmOutcome, n)
	for i := range out {
		out[i] = confirmOutcome{"done", StateConfirmed}
	}
	err := confirmListed(v, n, func(i int, o confirmOutcome) { out[i] = o })
	return out, err
}

// confirmListed checks the reply of the confirm script over n orders and calls listed with
// each order it lists (by index from 0): the ones it did not confirm.
func confirmListed(v []any, n int, listed func(i int, o confirmOutcome)) error {
	bad := func() error { return fmt.Errorf("unexpected reply %v to %d orders", v, n) }
	if len(v) == 0 || (len(v)-1)%3 != 0 {
		return bad()
	}
	if done, ok := v[0].(int64); !ok || int(done)+(len(v)-1)/3 != n {
		return bad()
	}
	last := int64(0) // positions come in ARGV's order, so each order is listed once at most
	for j := 1; j < len(v); j += 3 {
		i, ok1 := v[j].(int64)
		outcome, ok2 := v[j+1].(string)
		state, ok3 := v[j+2].(string)
		if !ok1 || !ok2 || !ok3 || i <= last || i > int64(n) {
			return bad()
		}
		last = i
		listed(int(i-1), confirmOutcome{outcome, state})
	}
	return nil
}

// Expired returns up to limit pending order ids of campaign whose deadline has passed, oldest
// first, past the first skip of them.
func (r *Redis) Expired(ctx context.Context, campaign string, skip, limit int) ([]string, error) {
	ids, err := expiredScript.Run(ctx, r.rdb, []string{KeysOf(campaign).Pending}, limit, skip).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("expired reservations of %s: %w", campaign, err)
	}
	return ids, nil
}

// Reservation returns the reservation record of an order, or ErrNoReservation.
func (r *Redis) Reservation(ctx context.Context, orderID string) (Reservation, error) {
	campaign, ok := events.CampaignOf(orderID)
	if !ok {
		return Reservation{}, ErrNoReservation
	}
	rec, err := r.rdb.HGet(ctx, KeysOf(campaign).Res, orderID).Result()
	if errors.Is(err, redis.Nil) {
		return Reservation{}, ErrNoReservation
	}
	if err != nil {
		return Reservation{}, fmt.Errorf("read reservation %s: %w", orderID, err)
	}
	return parseReservation(campaign, orderID, rec)
}

// Reservations returns the reservation records of many orders by order id, in one round trip:
// one HMGET per campaign (a campaign's keys share a hash slot), pipelined. An order Redis holds
// no record of, whose id names no campaign, or whose record is malformed is absent from the map:
// one bad record must not hide the others (the scripts leave such a record alone too).
func (r *Redis) Reservations(ctx context.Context, orderIDs []string) (map[string]Reservation, error) {
	orderIDs = slices.DeleteFunc(slices.Clone(orderIDs), func(id string) bool {
		_, ok := events.CampaignOf(id)
		return !ok
	})
	groups, err := byCampaign(orderIDs)
	if err != nil {
		return nil, err
	}
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(groups))
	for i, g := range groups {
		cmds[i] = pipe.HMGet(ctx, KeysOf(g.campaign).Res, g.ids...)
	}
	if len(groups) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("read %d reservations: %w", len(orderIDs), err)
		}
	}
	out := make(map[string]Reservation, len(orderIDs))
	for i, g := range groups {
		parseRecords(out, g.campaign, g.ids, cmds[i].Val()) // a malformed record is skipped
	}
	return out, nil
}

// parseRecords adds to out the reservations of HMGET's reply vals for ids of campaign (nil: no
// record), and returns the error of the first malformed record, which it skips.
func parseRecords(out map[string]Reservation, campaign string, ids []string, vals []any) error {
	var first error
	for i, v := range vals {
		rec, ok := v.(string)
		if !ok { // nil: no record
			continue
		}
		res, err := parseReservation(campaign, ids[i], rec)
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		out[res.OrderID] = res
	}
	return first
}

// parseReservation reads a record as the scripts do (release.lua: '^(%a+)|(%d+)|(%d+)|(.*)$'):
// one the scripts refuse must not read here as a reservation that a release would then fail on
// for ever.
func parseReservation(campaign, orderID, rec string) (Reservation, error) {
	parts := strings.SplitN(rec, "|", 4)
	if len(parts) != 4 || !only(parts[0], isLetter) || !only(parts[1], isDigit) || !only(parts[2], isDigit) {
		return Reservation{}, fmt.Errorf("reservation %s: %w %q", orderID, ErrMalformed, rec)
	}
	qty, err1 := strconv.Atoi(parts[1])
	deadline, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Reservation{}, fmt.Errorf("reservation %s: %w %q: %w", orderID, ErrMalformed, rec, err)
	}
	return Reservation{OrderID: orderID, Campaign: campaign, User: parts[3], Quantity: qty, State: parts[0], Deadline: time.UnixMilli(deadline)}, nil
}

// only reports whether s is not empty and every byte of it is one that ok takes.
func only(s string, ok func(byte) bool) bool {
	for i := range len(s) {
		if !ok(s[i]) {
			return false
		}
	}
	return s != ""
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool  { return '0' <= c && c <= '9' }

// Remaining returns the campaign's remaining units, and whether Redis has the campaign at all.
func (r *Redis) Remaining(ctx context.Context, campaign string) (int64, bool, error) {
	s, err := r.Sale(ctx, campaign)
	return s.Remaining, s.Loaded, err
}

// Sale is what Redis knows of a campaign's sale.
type Sale struct {
	Remaining int64
	Loaded    bool // Redis has the campaign's sale (not so a frozen one whose stock it lost)
	Frozen    bool // it is being rebuilt from the store and sells nothing
}

// Sale reads the campaign's remaining units and whether it is loaded and frozen.
func (r *Redis) Sale(ctx context.Context, campaign string) (Sale, error) {
	k := KeysOf(campaign)
	pipe := r.rdb.Pipeline()
	exists := pipe.Exists(ctx, k.Meta)
	frozen := pipe.HExists(ctx, k.Meta, "frozen")
	stock := pipe.Get(ctx, k.Stock)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Sale{}, fmt.Errorf("remaining of %s: %w", campaign, err)
	}
	if exists.Val() == 0 {
		return Sale{}, nil
	}
	n, err := stock.Int64()
	if errors.Is(err, redis.Nil) && frozen.Val() {
		// Frozen with no stock: its keys were lost (the meta holds the mark alone) or the
		// restore has cleared them. Redis holds nothing of its sale; the store's figures stand.
		return Sale{Frozen: true}, nil
	}
	if err != nil {
		return Sale{}, fmt.Errorf("remaining of %s: %w", campaign, err)
	}
	return Sale{Remaining: n, Loaded: true, Frozen: frozen.Val()}, nil
}

// confirmBatch bounds the orders of one confirm call, so that one call cannot hold Redis long.
const confirmBatch = 500

// ConfirmAll confirms many pending reservations, each exactly as Confirm would, in one round
// trip: one script call per campaign (a campaign's keys share one hash slot) and per
// confirmBatch orders, pipelined. The consumer confirms its batches this way. A record the
// script cannot parse is an error (ErrMalformed), after every other order has been confirmed.
//
// It returns the orders it left as they were, by id, with the state their reservation is in
// ("" when Redis has none; a malformed one is the error instead): nil when it confirmed every
// one, as for a batch of new orders. An order listed twice is confirmed once, and left the
// second time.
func (r *Redis) ConfirmAll(ctx context.Context, orderIDs []string) (map[string]string, error) {
	groups, err := byCampaign(orderIDs)
	if err != nil {
		return nil, err
	}
	pipe := r.rdb.Pipeline()
	calls := make([]scriptCall, 0, len(groups))
	batches := make([][]string, 0, len(groups)) // the orders of each call
	for _, g := range groups {
		k := KeysOf(g.campaign)
		keys := []string{k.Res, k.Pending}
		for len(g.ids) > 0 {
			n := min(len(g.ids), confirmBatch)
			// A []string argument goes out as one argument per id.
			calls = append(calls, callScript(ctx, pipe, confirmScript, keys, g.ids[:n]))
			batches = append(batches, g.ids[:n])
			g.ids = g.ids[n:]
		}
	}
	pipe.Exec(ctx) // each call carries its own error
	// A reply lists only the orders its call did not confirm; the malformed ones are errors. A
	// failed call is the error, and the others' replies are read all the same: each call ran
	// on its own, and the caller acts on every order left.
	var (
		left      map[string]string
		failed    error
		malformed error
	)
	for c, call := range calls {
		v, err := call.reply(ctx, r.rdb)
		if err == nil {
			err = confirmListed(v, len(batches[c]), func(i int, o confirmOutcome) {
				switch {
				case o.outcome != "malformed":
					if left == nil {
						left = map[string]string{}
					}
					left[batches[c][i]] = o.state
				case malformed == nil:
					malformed = fmt.Errorf("%w: %s", ErrMalformed, o.state)
				}
			})
		}
		if err != nil && failed == nil {
			failed = err
		}
	}
	if err := cmp.Or(failed, malformed); err != nil {
		return left, fmt.Errorf("confirm %d orders: %w", len(orderIDs), err)
	}
	return left, nil
}

// scriptCall is one script call by EVALSHA, made or queued on a pipeline.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
}

func callScript(ctx context.Context, rdb redis.Scripter, script *redis.Script, keys []string, args ...any) scriptCall {
	return scriptCall{script: script, keys: keys, args: args, cmd: rdb.EvalSha(ctx, script.Hash(), keys, args...)}
}

// reply returns the call's reply. An EVALSHA refused with NOSCRIPT ran nothing, so when Redis has
// lost its scripts (a restart) the call is made again on rdb as an EVAL with the script's text,
// which caches it: go-redis's Script.Run does the same, but not for calls a pipeline carried.
func (c scriptCall) reply(ctx context.Context, rdb redis.Scripter) ([]any, error) {
	return c.result(ctx, rdb).Slice()
}

// result is reply for a script whose reply is not a list.
func (c scriptCall) result(ctx context.Context, rdb redis.Scripter) *redis.Cmd {
	if err := c.cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		return c.script.Eval(ctx, rdb, c.keys, c.args...)
	}
	return c.cmd
}

// campaignOrders are the orders of one campaign, in the order given.
type campaignOrders struct {
	campaign string
	ids      []string
}

// byCampaign groups order ids by their campaign, keeping the order of the ids within each
// campaign; the common batch, all of one campaign, is one group without a copy.
func byCampaign(orderIDs []string) ([]campaignOrders, error) {
	var groups []campaignOrders
	var index map[string]int // campaign -> groups index, once there is a second campaign
	for i, id := range orderIDs {
		campaign, ok := events.CampaignOf(id)
		if !ok {
			return nil, events.Errorf(events.Invalid, "malformed order id %q", id)
		}
		switch {
		case len(groups) == 0:
			groups = append(groups, campaignOrders{campaign, orderIDs[:1:1]})
		case index == nil && campaign == groups[0].campaign:
			groups[0].ids = orderIDs[: i+1 : i+1]
		default:
			if index == nil {
				// groups[0].ids has no room past its ids: appending copies, orderIDs stays.
				index = map[string]int{groups[0].campaign: 0}
			}
			g, ok := index[campaign]
			if !ok {
				g = len(groups)
				index[campaign] = g
				groups = append(groups, campaignOrders{campaign: campaign})
			}
			groups[g].ids = append(groups[g].ids, id)
		}
	}
	return groups, nil
}
