package api

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// The operator console: one page (console/, embedded) that signs in with the admin token and
// draws what GET /v1/admin/console/events sends once a second. The page holds no data of its
// own; everything it shows comes through the admin endpoint.

//go:embed console
var consoleFiles embed.FS

// consoleSecurity keeps the page to its own scripts and styles, out of frames, and its
// address (which carries the token in its fragment on the first visit) out of Referer headers.
// Its answers carry nosniff as every answer does.
var consoleSecurity = middleware.SecureWithConfig(middleware.SecureConfig{
	XSSProtection:         "0",
	XFrameOptions:         "DENY",
	ReferrerPolicy:        "no-referrer",
	ContentSecurityPolicy: "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
})

// routeConsole serves the page at /console and sends / there.
func (s *Server) routeConsole(e *echo.Echo) {
	serve := func(name, contentType string) echo.HandlerFunc {
		b, err := consoleFiles.ReadFile("console/" + name)
		if err != nil {
			panic(err) // the embedded folder is part of the binary
		}
		return func(c echo.Context) error {
			c.Response().Header().Set(echo.HeaderCacheControl, "no-cache")
			return c.Blob(http.StatusOK, contentType, b)
		}
	}
	e.GET("/", func(c echo.Context) error { return c.Redirect(http.StatusFound, "/console") })
	e.GET("/console", serve("index.html", echo.MIMETextHTMLCharsetUTF8), consoleSecurity)
	e.GET("/console/console.js", serve("console.js", echo.MIMEApplicationJavaScriptCharsetUTF8), consoleSecurity)
	e.GET("/console/console.css", serve("console.css", "text/css; charset=utf-8"), consoleSecurity)
}

// ConsoleSnapshot is what the console shows, once a second.
type ConsoleSnapshot struct {
	At        time.Time         `json:"at"`
	Campaigns []ConsoleCampaign `json:"campaigns"`
	// Purchases are this api's purchases per second over the last second, by outcome; none
	// in the first snapshot after no console listened, which has no second before it.
	Purchases map[string]float64 `json:"purchases"`
	// P99Ms is this api's p99 purchase latency over the last second (0: no purchase), at most
	// the histogram's top bucket (about 1.9 s).
	P99Ms float64 `json:"p99_ms"`
	// ConsumerLag is how many OrderRequested events the consumers have not committed yet, and
	// PersistedPerSec how many they committed per second (-1: Kafka did not answer).
	ConsumerLag     int64   `json:"consumer_lag"`
	PersistedPerSec float64 `json:"persisted_per_sec"`
	// DeadLetters counts the dead-letter topic's records by reason (events.ReasonKind), up to
	// its end as the snapshot was taken; a read cut short says so in Errors.
	DeadLetters map[string]int64 `json:"dead_letters"`
	// Compensations counts the orders of the shown campaigns given back, by what gave them
	// back: the sweeper, an operator (a release or a refund), the payment window, a dead letter
	// (with its reason) or the api after a failed produce.
	Compensations map[string]int64 `json:"compensations"`
	// GivingBack counts the orders of the shown campaigns being given back, by what gives them
	// back: refunded or expired in the store, their units not back in Redis yet (the caller's
	// Redis step, or the sweeper's after a stop between the two, puts them back). They move to
	// Compensations once their units are back.
	GivingBack map[string]int64 `json:"giving_back"`
	// CampaignsAsOf is set when the store could not be read: Campaigns, Compensations and
	// GivingBack are then the last ones read, at this time, and Errors says why. An operator
	// in the outage keeps the rows, and their buttons, rather than an empty table.
	CampaignsAsOf *time.Time `json:"campaigns_as_of,omitempty"`
	Errors        []string   `json:"errors,omitempty"`
}

// ConsoleCampaign is one campaign's line: units by state, its window, and its last audit.
type ConsoleCampaign struct {
	CampaignView
	Pending   int64               `json:"pending"`
	Confirmed int64               `json:"confirmed"` // confirmed, not (yet) paid
	Refunded  int64               `json:"refunded"`
	Audit     *store.AuditVerdict `json:"audit,omitempty"`
}

// consoleCampaigns bounds the campaigns a snapshot shows: the newest.
const consoleCampaigns = 50

// console computes a snapshot once a second while at least one page listens, and hands it to
// every page: the store and Kafka are asked once a second per api, however many pages are open.
type console struct {
	s     *Server
	mu    sync.Mutex
	subs  map[chan []byte]struct{}
	stop  context.CancelFunc // of the running loop; nil when none runs
	loops sync.WaitGroup     // a loop told to stop may still be finishing when the next starts
	shut  bool
}

// subscribe returns a channel that receives each snapshot, and the function that ends the
// subscription; the loop starts with the first page and ends with the last. Once the api
// drains it refuses: a new loop would open a Kafka client and read every source for a page
// that the shutdown ends within seconds, and the page, refused, reconnects through the load
// balancer to another api.
func (k *console) subscribe() (<-chan []byte, func(), error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.shut || k.s.draining.Load() || k.s.stopping.Err() != nil {
		return nil, nil, events.Errorf(events.Unavailable, "the api is stopping")
	}
	ch := make(chan []byte, 1)
	k.subs[ch] = struct{}{}
	if k.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		k.stop = cancel
		k.loops.Go(func() { k.run(ctx) })
	}
	return ch, func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		delete(k.subs, ch)
		if len(k.subs) == 0 && k.stop != nil {
			k.stop()
			k.stop = nil
		}
	}, nil
}

// close stops the loop and waits for it.
func (k *console) close() {
	k.mu.Lock()
	k.shut = true
	if k.stop != nil {
		k.stop()
		k.stop = nil
	}
	k.mu.Unlock()
	k.loops.Wait()
}

func (k *console) run(ctx context.Context) {
	src := k.s.newConsoleSources()
	defer src.close()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		snap := src.snapshot(ctx)
		if ctx.Err() != nil {
			return
		}
		b, err := json.Marshal(snap)
		if err == nil {
			k.mu.Lock()
			for ch := range k.subs {
				select { // a page that has not taken the last one gets this one instead
				case <-ch:
				default:
				}
				ch <- b
			}
			k.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// consoleSources are where a snapshot's figures come from, with what the last one read.
type consoleSources struct {
	s        *Server
	dlq      *kgo.Client // the dead-letter topic from its start; nil without brokers
	adm      *kadm.Client
	dead     map[string]int64
	deadRead map[int32]int64    // by partition of the dead-letter topic: the offset after the last record counted
	last     time.Time          // of the last snapshot
	counts   map[string]float64 // purchase counters at the last snapshot; nil before the first
	buckets  []uint64           // purchase latency buckets at the last snapshot
	commited int64              // the consumers' committed offsets at the last reading (-1: unknown)
	// commitedAt is when commited was read: the snapshot before the last when the last one's
	// Kafka read failed.
	commitedAt time.Time
	// table is the last snapshot whose campaigns were read, shown again while they cannot be.
	table *ConsoleSnapshot
}

func (s *Server) newConsoleSources() *consoleSources {
	src := &consoleSources{s: s, dead: map[string]int64{}, deadRead: map[int32]int64{}, commited: -1}
	if len(s.cfg.Brokers) > 0 {
		cl, err := kgo.NewClient(kgo.SeedBrokers(s.cfg.Brokers...), kgo.ConsumeTopics(s.cfg.Topics.DLQ),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			// A transaction's markers take offsets too: kept, so that the records read reach the
			// end offset (readDeadLetters), and not counted.
			kgo.KeepControlRecords(),
			// Dead letters on a partition added while the api runs: counted within seconds, as
			// the hub reads the results, not at franz-go's 5-minute refresh.
			kgo.MetadataMaxAge(events.ConsumerMetadataMaxAge))
		if err == nil {
			src.dlq, src.adm = cl, kadm.NewClient(cl)
		} else {
			s.cfg.Logger.Warn("the console cannot read Kafka", "err", err)
		}
	}
	return src
}

func (src *consoleSources) close() {
	if src.dlq != nil {
		src.dlq.Close()
	}
}

// snapshot reads every figure once; a source that fails leaves its figures out and says so.
func (src *consoleSources) snapshot(ctx context.Context) ConsoleSnapshot {
	now := time.Now()
	snap := ConsoleSnapshot{At: now.UTC(), Purchases: map[string]float64{}, DeadLetters: map[string]int64{},
		Compensations: map[string]int64{}, GivingBack: map[string]int64{}, ConsumerLag: -1, PersistedPerSec: -1}
	fail := func(what string, err error) {
		if ctx.Err() != nil {
			return
		}
		if events.ErrorCode(err) == events.Internal { // a dependency's own error, for the log only
			src.s.cfg.Logger.Warn("console snapshot", "what", what, "err", err)
			err = events.Wrap(events.Unavailable, err, "cannot be read right now")
		}
		snap.Errors = append(snap.Errors, fmt.Sprintf("%s: %s", what, events.ErrorMessage(err)))
	}
	dt := now.Sub(src.last).Seconds()
	src.last = now

	// The first snapshot has no reading before it to count from (one taken as the sources
	// start would be microseconds old, and one purchase in them a huge rate): no rates.
	counts := purchaseCounts()
	if src.counts != nil {
		for k, v := range counts {
			snap.Purchases[k] = (v - src.counts[k]) / dt
		}
	}
	src.counts = counts
	buckets := latencyBuckets()
	snap.P99Ms = p99Ms(src.buckets, buckets) // 0 the first time, src.buckets being nil
	src.buckets = buckets

	// The store and Redis, then Kafka, each within a time of its own: one that hangs must not
	// spend the other's and have it named as failing too.
	qctx, cancel := context.WithTimeout(ctx, sourceTimeout)
	defer cancel()
	if err := src.campaigns(qctx, &snap, now, fail); err != nil {
		fail("campaigns", err)
		if last := src.table; last != nil { // a snapshot is not changed once sent: they may share its rows
			snap.Campaigns, snap.Compensations, snap.GivingBack = last.Campaigns, last.Compensations, last.GivingBack
			snap.CampaignsAsOf = &last.At
		}
	} else {
		src.table = &snap
	}
	if src.dlq != nil {
		kctx, cancel := context.WithTimeout(ctx, sourceTimeout)
		defer cancel()
		src.kafka(kctx, &snap, now, fail)
	}
	return snap
}

// sourceTimeout bounds the reading of one source of a snapshot.
const sourceTimeout = 900 * time.Millisecond

// kafka fills in the dead letters and the consumers' lag, read at now. The rate of persisted
// orders is over the time since the last reading of the lag that Kafka answered, not since the
// last snapshot: after one it did not, the orders committed over both seconds were divided by
// one.
func (src *consoleSources) kafka(ctx context.Context, snap *ConsoleSnapshot, now time.Time, fail func(string, error)) {
	dctx, cancel := context.WithTimeout(ctx, deadLettersTimeout)
	defer cancel()
	if err := src.readDeadLetters(dctx); err != nil {
		fail("dead letters", err)
	}
	for k, v := range src.dead {
		snap.DeadLetters[k] = v
	}
	ends, err := events.EndOffsets(ctx, src.adm, src.s.cfg.Topics.Requested)
	var lag int64
	if err == nil {
		lag, err = events.LagBehind(ctx, src.adm, ends, src.s.cfg.Topics.ConsumerGroup())
	}
	if err != nil {
		fail("consumer lag", err)
		return
	}
	var end int64
	ends.Each(func(o kadm.ListedOffset) { end += o.Offset })
	snap.ConsumerLag = lag
	if src.commited >= 0 {
		snap.PersistedPerSec = math.Max(0, float64(end-lag-src.commited)/now.Sub(src.commitedAt).Seconds())
	}
	src.commited, src.commitedAt = end-lag, now
}

// campaigns fills in the newest campaigns with their units by state and their last audit. A
// campaign whose sale Redis cannot tell (its Cluster shard is down) is shown with the store's
// figures and named to fail: the incident an operator opens the console for must not take the
// other campaigns' rows, and their buttons, off the page.
func (src *consoleSources) campaigns(ctx context.Context, snap *ConsoleSnapshot, now time.Time, fail func(string, error)) error {
	cs, err := src.s.store.NewestCampaigns(ctx, consoleCampaigns)
	if err != nil {
		return err
	}
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	units, err := src.s.store.UnitsByStatus(ctx, ids)
	if err != nil {
		return err
	}
	// The audit is a column of the rows: without it, the rows and their buttons stay.
	verdicts, err := src.s.store.AuditVerdicts(ctx)
	if err != nil {
		fail("audit verdicts", err)
	}
	byStatus := map[string]map[events.Status]int64{}
	givingUnits := map[string]int64{} // by campaign: units Redis holds still, of orders ended in the store
	for _, u := range units {
		if byStatus[u.Campaign] == nil {
			byStatus[u.Campaign] = map[events.Status]int64{}
		}
		byStatus[u.Campaign][u.Status] += u.Units
		if source := givenBackBy(u.Status, u.Reason); source != "" {
			snap.Compensations[source] += u.Orders
		}
		if source := givingBackBy(u.Status, u.Reason); source != "" {
			snap.GivingBack[source] += u.Orders
			givingUnits[u.Campaign] += u.Units
		}
	}
	src.heldInRedis(ctx, givingUnits, fail)
	// Every sale is asked at once: a shard that does not answer costs its own campaigns, not
	// the time of each one after them.
	sales, errs := make([]lua.Sale, len(cs)), make([]error, len(cs))
	var asked sync.WaitGroup
	for i, c := range cs {
		asked.Go(func() { sales[i], errs[i] = src.s.redis.Sale(ctx, c.ID) })
	}
	asked.Wait()
	for i, c := range cs {
		sale, err := sales[i], errs[i]
		if err != nil {
			src.s.cfg.Logger.Warn("console snapshot: a campaign's sale", "campaign", c.ID, "err", err)
			fail("campaign "+c.ID, events.Wrap(events.Unavailable, err, "Redis cannot tell its sale right now; its row shows the store's figures"))
			sale = lua.Sale{}
		}
		if !sale.Loaded {
			sale.Remaining = c.Stock - c.Sold
		}
		st := byStatus[c.ID]
		cc := ConsoleCampaign{
			CampaignView: ViewCampaign(c, sale, st[events.Paid]),
			// Redis holds the units of the orders the store ended and Redis has not given
			// back yet; sold no longer counts them, and they are no reservation's.
			Pending:   max(0, c.Stock-sale.Remaining-c.Sold-givingUnits[c.ID]),
			Confirmed: st[events.Confirmed],
			Refunded:  st[events.Refunded],
		}
		if v, ok := verdicts[c.ID]; ok {
			cc.Audit = &v
		}
		snap.Campaigns = append(snap.Campaigns, cc)
	}
	return nil
}

// heldInRedis narrows givingUnits, the units by campaign of the orders being given back (their
// reason ""), to those whose reservation Redis still holds, pending or confirmed. The reason
// becomes the source's only once Kafka has the order's announcement, after Redis gave its units
// back: during a Kafka outage, or once a rebuild restored such an order ended, its units are
// in remaining already, and taking them off again hid as many units of pending reservations.
// A read that fails leaves the store's figure, and says so.
func (src *consoleSources) heldInRedis(ctx context.Context, givingUnits map[string]int64, fail func(string, error)) {
	if len(givingUnits) == 0 {
		return
	}
	orders, err := src.s.store.GivingBack(ctx, slices.Sorted(maps.Keys(givingUnits)))
	var held map[string]lua.Reservation
	if err == nil {
		ids := make([]string, len(orders))
		for i, o := range orders {
			ids[i] = o.OrderID
		}
		held, err = src.s.redis.Reservations(ctx, ids)
	}
	if err != nil {
		fail("orders being given back", err)
		return
	}
	clear(givingUnits)
	for _, o := range orders {
		if res, ok := held[o.OrderID]; ok && (res.State == lua.StatePending || res.State == lua.StateConfirmed) {
			givingUnits[o.CampaignID] += o.Quantity
		}
	}
}

// givenBackBy names what gave an order's units back, from its final status and reason: ""
// for an order that holds its units, and for one being given back (givingBackBy).
func givenBackBy(status events.Status, reason string) string {
	switch {
	case givingBackBy(status, reason) != "":
		return ""
	case status == events.Refunded:
		return "operator refund"
	case status == events.Expired:
		return "payment window"
	case status != events.Failed:
		return ""
	case reason == events.ReasonExpired:
		return "sweeper"
	case reason == events.ReasonOperator:
		return "operator"
	case reason == events.ReasonProduce:
		return "api (produce failed)"
	case reason == events.ReasonReleasedBeforeReplay:
		// The reason's name says replay, but the consumer stores it too: what is known is only
		// that Redis gave the units back before the store had the order.
		return "unknown (given back in Redis before the store had the order)"
	}
	return "dead letter (" + reason + ")"
}

// givingBackBy names what is giving an order's units back: a refund or an expiry the store
// holds with reason "", whose units are not back in Redis yet (store.UnfinishedRefunds,
// store.ExpiringOrders). "" for any other order.
func givingBackBy(status events.Status, reason string) string {
	switch {
	case reason != "":
		return ""
	case status == events.Refunded:
		return "operator refund"
	case status == events.Expired:
		return "payment window"
	}
	return ""
}

// maxDeadKinds bounds the kinds of dead letters the console counts apart, each a row in every
// snapshot: anyone who may write to the topic can give each letter a reason of its own, and
// seckill's own are a few dozen kinds. Letters of kinds past it are counted as deadOther.
const maxDeadKinds = 100

const deadOther = "other"

// maxDeadKind bounds a kind's length: a reason may be as long as a record.
const maxDeadKind = 200

// deadLettersTimeout bounds the reading of the dead letters, within the Kafka source's
// sourceTimeout: the consumers' lag is read after them.
const deadLettersTimeout = 500 * time.Millisecond

// readDeadLetters counts the dead letters up to the topic's end as it is now. One poll a
// snapshot counted one fetch's worth: a console opened on a topic of more showed a part of its
// dead letters, then more each second, as if they were arriving. A read that ctx ends first
// keeps what it counted, for the next snapshot to go on from, and says how far it got.
func (src *consoleSources) readDeadLetters(ctx context.Context) error {
	topic := src.s.cfg.Topics.DLQ
	starts, err := events.StartOffsets(ctx, src.adm, topic)
	if err != nil {
		return err
	}
	ends, err := events.EndOffsets(ctx, src.adm, topic)
	if err != nil {
		return err
	}
	behind := func() (left int64) {
		ends.Each(func(end kadm.ListedOffset) {
			at := max(src.deadRead[end.Partition], startOf(starts, end))
			left += max(0, end.Offset-at)
		})
		return left
	}
	for behind() > 0 {
		fs := src.dlq.PollFetches(ctx)
		// Counted first: the client has moved past what it returned, records that came with
		// an error or as ctx ended too, and would not return them again.
		fs.EachRecord(func(r *kgo.Record) {
			src.deadRead[r.Partition] = r.Offset + 1
			if r.Attrs.IsControl() {
				return
			}
			reason := events.Header(r, events.HeaderReason)
			if reason == "" {
				reason = "unknown"
			}
			kind := events.ReasonKind(reason)
			if len(kind) > maxDeadKind {
				kind = strings.ToValidUTF8(kind[:maxDeadKind], "")
			}
			if _, seen := src.dead[kind]; !seen && len(src.dead) >= maxDeadKinds {
				kind = deadOther
			}
			src.dead[kind]++
		})
		if ctx.Err() != nil {
			return events.Errorf(events.Unavailable, "%d offsets of the topic not read yet: the counts are short of them", behind())
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if _, lost := errors.AsType[*kgo.ErrDataLoss](err); !lost { // a rewind: it reads on
				ferr = err
			}
		})
		if ferr != nil { // or it would poll again at once, for as long as ctx lasts
			return fmt.Errorf("read the dead letters: %w", ferr)
		}
	}
	return nil
}

// startOf returns where end's partition starts in starts, or 0 if starts does not hold it.
func startOf(starts kadm.ListedOffsets, end kadm.ListedOffset) int64 {
	if s, ok := starts.Lookup(end.Topic, end.Partition); ok {
		return s.Offset
	}
	return 0
}

// purchaseOutcomes are the console's purchase outcomes, each with the reservations counter it
// reads; rate_limited is read from the requests counter.
var purchaseOutcomes = map[string]string{
	"accepted":    "reserved",
	"sold_out":    string(events.SoldOut),
	"limit":       string(events.LimitExceeded),
	"unavailable": string(events.Unavailable),
}

// purchaseCounts reads this process's purchase counters, by outcome.
func purchaseCounts() map[string]float64 {
	m := map[string]float64{"rate_limited": counterValue(requestCounter(purchaseRoute, http.StatusTooManyRequests))}
	for outcome, label := range purchaseOutcomes {
		m[outcome] = counterValue(reservations.WithLabelValues(label))
	}
	return m
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// latencyBuckets reads the purchase latency histogram's cumulative bucket counts and, last, the
// count of all purchases: the +Inf bucket, which the histogram does not list. Without it the
// purchases slower than the top bucket (every one, while Kafka hangs them for the produce
// timeout) would not count at all.
func latencyBuckets() []uint64 {
	var m dto.Metric
	if err := purchaseSeconds.Write(&m); err != nil {
		return nil
	}
	bs := m.GetHistogram().GetBucket()
	out := make([]uint64, len(bs), len(bs)+1)
	for i, b := range bs {
		out[i] = b.GetCumulativeCount()
	}
	return append(out, m.GetHistogram().GetSampleCount())
}

// p99Ms is the upper bound of the bucket that holds the 99th percentile of the purchases
// between two readings of latencyBuckets (0: none); the top bucket's when it is slower than that.
func p99Ms(before, after []uint64) float64 {
	if len(after) != len(purchaseBuckets)+1 || len(before) != len(after) {
		return 0
	}
	total := after[len(after)-1] - before[len(before)-1]
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(0.99 * float64(total)))
	for i, le := range purchaseBuckets {
		if after[i]-before[i] >= want {
			return le * 1000
		}
	}
	return purchaseBuckets[len(purchaseBuckets)-1] * 1000
}

// consoleEvents streams snapshots to the console: one `snapshot` event a second.
func (s *Server) consoleEvents(c echo.Context) error {
	snaps, unsubscribe, err := s.console.subscribe()
	if err != nil {
		return err
	}
	defer unsubscribe()
	send := startEvents(c)
	if send("retry: 2000\n\n") != nil {
		return nil
	}
	ctx := c.Request().Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.stopping.Done():
			return nil
		case b := <-snaps:
			if send("event: snapshot\ndata: "+string(b)+"\n\n") != nil {
				return nil
			}
		}
	}
}
