package compensator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// Check is one invariant's verdict with the figures behind it.
type Check struct {
	Name   string
	OK     bool
	Detail string
}

// CampaignAudit is the audit of one campaign.
type CampaignAudit struct {
	Campaign string
	Checks   []Check
}

// Verdict is the audit of one campaign as the store keeps it (store.RecordAudit): its failed
// checks, one per line.
func (c CampaignAudit) Verdict(at time.Time) store.AuditVerdict {
	v := store.AuditVerdict{Campaign: c.Campaign, AtMs: at.UnixMilli(), OK: true}
	var failed []string
	for _, ch := range c.Checks {
		if !ch.OK {
			failed = append(failed, ch.Name+": "+ch.Detail)
		}
	}
	if len(failed) > 0 {
		v.OK, v.Violations = false, strings.Join(failed, "\n")
	}
	return v
}

// AuditReport is what Audit found.
type AuditReport struct {
	Campaigns []CampaignAudit
	// Lag is how far the consumer and the compensator are behind in Kafka: a figure for the
	// operator, not an invariant, so it never fails.
	Lag Check
}

// OK reports whether every invariant holds.
func (r AuditReport) OK() bool {
	for _, c := range r.Campaigns {
		for _, ch := range c.Checks {
			if !ch.OK {
				return false
			}
		}
	}
	return true
}

// Print writes the report, one line per invariant.
func (r AuditReport) Print(w io.Writer) {
	mark := map[bool]string{true: "ok  ", false: "FAIL"}
	for _, c := range r.Campaigns {
		fmt.Fprintf(w, "campaign %s\n", c.Campaign)
		for _, ch := range c.Checks {
			fmt.Fprintf(w, "  %s %-18s %s\n", mark[ch.OK], ch.Name, ch.Detail)
		}
	}
	fmt.Fprintf(w, "     %-20s %s\n", r.Lag.Name, r.Lag.Detail) // a figure, not a check: no mark
}

// AuditStore is the part of the store the audit reads.
type AuditStore interface {
	Campaigns(ctx context.Context) ([]store.Campaign, error)
	Campaign(ctx context.Context, id string) (store.Campaign, error)
	AuditView(ctx context.Context, campaign string) (store.Campaign, []store.Order, map[string]int64, error)
}

// Auditor checks the invariants I1–I6 of the design across Redis, the store and Kafka.
type Auditor struct {
	Store  AuditStore
	Redis  *lua.Redis
	Admin  *kadm.Client  // nil: Kafka lag is not checked
	Topics events.Topics // whose consumer groups' lag is reported
	// Grace is how long past its deadline a reservation may stay pending before it counts as
	// lost (I5): the compensator's sweep interval. Default: 5s.
	Grace time.Duration
	// Progress, when not nil, is told after each campaign how many of the campaigns the audit
	// has checked, and of how many.
	Progress Progress
}

// ErrNoKafka is the error of an audit that could not read the lag from Kafka.
var ErrNoKafka = errors.New("cannot reach kafka")

// Audit checks one campaign, or every campaign when campaign is "". It returns the report of
// every campaign it could check, and an error naming each one it could not (a Redis shard that
// does not answer, a malformed record) and wrapping ErrNoKafka when Kafka could not tell the
// lag: no invariant reads Kafka, and one shard says nothing of the others' campaigns, so the
// verdicts it has stand, and an outage is when an operator wants them most.
func (a *Auditor) Audit(ctx context.Context, campaign string) (AuditReport, error) {
	var cs []store.Campaign
	if campaign != "" {
		c, err := a.Store.Campaign(ctx, campaign)
		if err != nil {
			return AuditReport{}, err
		}
		cs = []store.Campaign{c}
	} else {
		var err error
		if cs, err = a.Store.Campaigns(ctx); err != nil {
			return AuditReport{}, err
		}
	}
	var rep AuditReport
	var unchecked []error
	for i, c := range cs {
		ca, err := a.auditCampaign(ctx, c)
		if a.Progress != nil {
			a.Progress(i+1, len(cs))
		}
		if err != nil {
			if ctx.Err() != nil {
				return rep, err
			}
			unchecked = append(unchecked, fmt.Errorf("campaign %s not checked: %w", c.ID, err))
			continue
		}
		rep.Campaigns = append(rep.Campaigns, ca)
	}
	var err error
	if rep.Lag, err = a.lag(ctx); err != nil {
		unchecked = append(unchecked, err)
	}
	return rep, errors.Join(unchecked...)
}

// noTopics is the error of a lag Kafka could not tell as it has not the topics: an ErrNoKafka
// too, whose message does not say Kafka was out of reach.
type noTopics struct{ error }

func (e noTopics) Unwrap() []error { return []error{ErrNoKafka, e.error} }

// lag reads the consumer groups' lag; its error wraps ErrNoKafka.
func (a *Auditor) lag(ctx context.Context) (Check, error) {
	ch := Check{Name: "kafka lag", OK: true, Detail: "not checked"}
	if a.Admin == nil {
		return ch, nil
	}
	consumer, err := events.Lag(ctx, a.Admin, a.Topics.Requested, a.Topics.ConsumerGroup())
	var dlq int64
	if err == nil {
		dlq, err = events.Lag(ctx, a.Admin, a.Topics.DLQ, a.Topics.CompensatorGroup())
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		// Kafka answered: "cannot reach kafka" sent the operator looking for an outage.
		ch.Detail = "unknown: kafka has no topic " + a.Topics.Requested + " or " + a.Topics.DLQ
		return ch, noTopics{fmt.Errorf("kafka has no topics of prefix %q (is --topic-prefix right?): %w", a.Topics.Prefix, err)}
	}
	if err != nil {
		ch.Detail = "unknown: " + ErrNoKafka.Error()
		return ch, fmt.Errorf("%w: %w", ErrNoKafka, err)
	}
	ch.Detail = fmt.Sprintf("consumer %d events behind, compensator %d dead letters behind", consumer, dlq)
	return ch, nil
}

func (a *Auditor) auditCampaign(ctx context.Context, c store.Campaign) (CampaignAudit, error) {
	grace := a.Grace
	if grace <= 0 {
		grace = 5 * time.Second
	}
	now, err := a.Redis.Now(ctx, c.ID)
	if err != nil {
		return CampaignAudit{}, err
	}
	snap, err := a.Redis.Snapshot(ctx, c.ID)
	if err != nil {
		return CampaignAudit{}, err
	}
	// The campaign row, its orders and its buyers' totals from one snapshot of the store: read
	// one by one during a sale, they disagree with each other and the audit cries wolf.
	c, orders, holdings, err := a.Store.AuditView(ctx, c.ID)
	if err != nil {
		return CampaignAudit{}, err
	}
	rows := make(map[string]store.Order, len(orders))
	var storeConfirmed, storePaid int64 // units held: confirmed (awaiting payment or not) and paid
	storeByUser := map[string]int64{}
	count := map[events.Status]int{}
	var unpaid []string // past pay_by + grace, neither paid nor expired (I6)
	for _, o := range orders {
		rows[o.OrderID] = o
		count[o.Status]++
		if o.Status == events.Confirmed || o.Status == events.Paid {
			storeConfirmed += o.Quantity
			storeByUser[o.UserID] += o.Quantity
		}
		if o.Status == events.Paid {
			storePaid += o.Quantity
		}
		if o.Status == events.Confirmed && o.PayByMs > 0 && o.PayByMs+grace.Milliseconds() < now {
			unpaid = append(unpaid, o.OrderID)
		}
	}

	var pending, confirmed int64
	redisByUser := map[string]int64{}
	var mismatches, stale []string
	for _, res := range snap.Reservations {
		row := rows[res.OrderID] // Status "" when the store has no row
		switch res.State {
		case lua.StatePending:
			pending += int64(res.Quantity)
			redisByUser[res.User] += int64(res.Quantity)
			if res.Deadline.UnixMilli()+grace.Milliseconds() < now {
				stale = append(stale, res.OrderID)
			}
		case lua.StateConfirmed:
			confirmed += int64(res.Quantity)
			redisByUser[res.User] += int64(res.Quantity)
		}
		// Allowed pairs: the store's final row and the Redis state that follows from it, or a
		// pending record whose resolution is on its way (counted by I5 if it stays).
		allowed := map[events.Status][]string{
			"":               {lua.StatePending},
			events.Confirmed: {lua.StateConfirmed, lua.StatePending},
			events.Failed:    {lua.StateReleased, lua.StatePending},
			events.Refunded:  {lua.StateRefunded, lua.StateConfirmed, lua.StatePending},
			events.Paid:      {lua.StateConfirmed, lua.StatePending},
			events.Expired:   {lua.StateExpired, lua.StateConfirmed, lua.StatePending}, // confirmed: its units are on their way back
		}[row.Status]
		switch {
		case !slices.Contains(allowed, res.State):
			mismatches = append(mismatches, fmt.Sprintf("%s is %q in the store but %s in redis", res.OrderID, row.Status, res.State))
		case res.State == lua.StateConfirmed && (row.Status == events.Refunded || row.Status == events.Expired) &&
			row.UpdatedAtMs+grace.Milliseconds() < now:
			// The compensator gives the units back right after the store's step, and the
			// sweeper finishes one that stopped between the two at its next round (the grace):
			// after that nothing will, and Redis holds for good units the store gave back. A
			// pending record is I5's: the sweeper resolves it at its deadline.
			mismatches = append(mismatches, fmt.Sprintf("%s is %q in the store but still confirmed in redis %v later",
				res.OrderID, row.Status, (time.Duration(now-row.UpdatedAtMs)*time.Millisecond).Round(time.Second)))
		}
	}
	var over []string
	for u, n := range redisByUser {
		if n > c.PerUserLimit || snap.Buyers[u] != n {
			over = append(over, fmt.Sprintf("%s holds %d by its reservations, redis counts %d", u, n, snap.Buyers[u]))
		}
	}
	for u, n := range snap.Buyers {
		if _, ok := redisByUser[u]; !ok && n != 0 {
			over = append(over, fmt.Sprintf("%s counted %d without a reservation", u, n))
		}
	}
	var storeOver []string
	for u, n := range storeByUser {
		if n > c.PerUserLimit || holdings[u] != n {
			storeOver = append(storeOver, fmt.Sprintf("%s has %d confirmed in the store, purchases says %d", u, n, holdings[u]))
		}
	}
	// A total without a confirmed order: a refund or an expiry that did not take its units off
	// the buyer's total, which then refuses them units they may buy.
	for u, n := range holdings {
		if _, ok := storeByUser[u]; !ok {
			storeOver = append(storeOver, fmt.Sprintf("%s counted %d in purchases without a confirmed order", u, n))
		}
	}
	over = append(over, storeOver...)

	var checks []Check
	add := func(name string, ok bool, format string, args ...any) {
		checks = append(checks, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	// I6 reads the store alone, and the sweeper expires an unpaid order whatever Redis holds of
	// its campaign (store.ExpiringOrders): it holds with the keys gone or frozen too.
	i6 := func() {
		if c.PaymentWindowMs > 0 {
			add("I6 paid or expired", len(unpaid) == 0, "%d confirmed orders unpaid past pay_by + %v%s", len(unpaid), grace, first(unpaid))
		}
	}
	storeOnly := func() {
		add("I2 resolution", c.Sold == storeConfirmed, "store: %d units confirmed or paid, sold %d", storeConfirmed, c.Sold)
		add("I3 per-user limit", len(storeOver) == 0, "%d buyers in the store, limit %d; %d violations%s", len(storeByUser), c.PerUserLimit, len(storeOver), first(storeOver))
		add("I4 no oversell", c.Sold <= c.Stock && storeConfirmed <= c.Stock, "sold %d <= stock %d", c.Sold, c.Stock)
		i6()
	}
	if !snap.Exists && c.Over(now) && pending+confirmed == 0 {
		// Its keys left Redis after its end (the retention), or never reached it before an
		// empty window: the store holds what there is.
		add("redis", true, "ended; its keys are not in redis, the store keeps its history")
		storeOnly()
		return CampaignAudit{Campaign: c.ID, Checks: checks}, nil
	}
	if !snap.Exists && !c.OnSale && !snap.Frozen {
		// Being created: the store has it, Redis not yet (the api's next step, or the guard's
		// reconcile once Redis answers). It sold nothing, and nothing was lost.
		add("redis", true, "not on sale yet: its sale is not in redis, the guard puts it there")
		storeOnly()
		return CampaignAudit{Campaign: c.ID, Checks: checks}, nil
	}
	if !snap.Exists {
		add("redis", snap.Frozen, "campaign missing from redis (frozen: %v): lost data awaits the rebuild", snap.Frozen)
		if snap.Frozen { // the rebuild is running: the store's own figures still hold
			storeOnly()
		}
		return CampaignAudit{Campaign: c.ID, Checks: checks}, nil
	}
	if snap.Frozen {
		// Redis's figures are being replaced from the store: only the store's own hold.
		add("redis", true, "frozen: a rebuild is running")
		storeOnly()
		return CampaignAudit{Campaign: c.ID, Checks: checks}, nil
	}
	lost, err := a.unrecorded(ctx, c.ID, snap, orders)
	if err != nil {
		return CampaignAudit{}, err
	}
	mismatches = append(mismatches, lost...)
	// An operator's added stock reaches the store first and Redis second (Sync), the sweeper
	// bringing Redis along within a sweep if that step failed: until then Redis sells, and
	// conserves, the stock of the change it has.
	stock, behind := c.Stock, ""
	if snap.HasStock && snap.Version < c.Version {
		stock = snap.Stock
		behind = fmt.Sprintf(" (redis has the campaign's change %d of %d, with its stock; the store's is %d)", snap.Version, c.Version, c.Stock)
	}
	add("I1 conservation", stock == snap.Remaining+pending+confirmed,
		"stock %d, remaining %d + pending %d + confirmed %d = %d%s", stock, snap.Remaining, pending, confirmed, snap.Remaining+pending+confirmed, behind)
	add("I2 resolution", len(mismatches) == 0 && c.Sold == storeConfirmed,
		"store: %d confirmed, %d paid (%d units, %d paid, sold %d), %d failed, %d refunded, %d expired; %d disagree with redis%s",
		count[events.Confirmed], count[events.Paid], storeConfirmed, storePaid, c.Sold, count[events.Failed], count[events.Refunded],
		count[events.Expired], len(mismatches), first(mismatches))
	add("I3 per-user limit", len(over) == 0, "%d buyers in redis, %d in the store, limit %d; %d violations%s",
		len(redisByUser), len(storeByUser), c.PerUserLimit, len(over), first(over))
	add("I4 no oversell", snap.Remaining >= 0 && c.Sold <= c.Stock, "remaining %d >= 0, sold %d <= stock %d", snap.Remaining, c.Sold, c.Stock)
	add("I5 no lost order", len(stale) == 0, "%d reservations pending past deadline + %v%s", len(stale), grace, first(stale))
	i6()
	return CampaignAudit{Campaign: c.ID, Checks: checks}, nil
}

// unrecorded lists the confirmed and paid orders of a campaign on sale in Redis that Redis holds
// no record of. Such a record stays while the campaign's keys do (a refund gives the units back
// through it), so without one the store holds units Redis may have sold again. An order
// reserved after snap was read and confirmed before the store was is in flight: a second look,
// after the store's read, finds its record. One that finds the campaign frozen or gone judges
// nothing (a rebuild or the retention took the records).
func (a *Auditor) unrecorded(ctx context.Context, campaign string, snap lua.Snapshot, orders []store.Order) ([]string, error) {
	seen := make(map[string]bool, len(snap.Reservations))
	for _, res := range snap.Reservations {
		seen[res.OrderID] = true
	}
	var missing []store.Order
	var ids []string
	for _, o := range orders {
		if (o.Status == events.Confirmed || o.Status == events.Paid) && !seen[o.OrderID] {
			missing, ids = append(missing, o), append(ids, o.OrderID)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	recs, live, err := a.Redis.Records(ctx, campaign, ids)
	if err != nil || !live {
		return nil, err
	}
	var lost []string
	for _, o := range missing {
		if _, ok := recs[o.OrderID]; !ok {
			lost = append(lost, fmt.Sprintf("%s is %q in the store but has no record in redis", o.OrderID, o.Status))
		}
	}
	return lost, nil
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return " (first: " + s[0] + ")"
}
