package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/failpoint"
)

// ConfirmOrders stores a batch of OrderRequested events as confirmed orders in one transaction,
// idempotently: an order that is in the store already is left alone. An order the store refuses
// (past the stock, past the buyer's limit, unknown campaign) is not stored at all and its Result
// has a Reason. Results are in input order; within the batch, earlier events go first.
//
// The batch costs a fixed handful of statements, whatever its size: lock its campaigns, read its
// known orders and its buyers' totals, decide in Go, insert the new rows in one statement, and
// write one conditional update per campaign and one upsert of the buyers' totals. Every write
// that changes sold or bought, or ends an order, holds its campaign's row lock (taken here in id
// order, and by RefundOrder, ExpireOrder, FailOrderFenced and RecordGivenBack), so the decisions
// cannot race; the conditional update stays as the second line of defence.
//
// On PostgreSQL every batch first goes the optimistic way (confirmOptimistic), which skips the
// two reads, and only a batch that finds it was wrong is done again as above.
func (s *Store) ConfirmOrders(ctx context.Context, evs []events.Event) ([]Result, error) {
	results := make([]Result, len(evs))
	if len(evs) == 0 {
		return results, nil
	}
	if !s.sqlite && !s.readsOnly {
		done, err := s.confirmOptimistic(ctx, evs, results)
		if err != nil {
			return nil, fmt.Errorf("confirm %d orders: %w", len(evs), err)
		}
		if done {
			return results, nil
		}
		clear(results)
	}
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		b, err := s.loadBatch(ctx, tx, evs, false)
		if err != nil {
			return err
		}
		accepted, repeats := b.decide(evs, results)
		if err := s.insertConfirmed(ctx, tx, b, evs, accepted, results); err != nil {
			return err
		}
		// An order stored meanwhile, which the campaign lock should prevent, is a duplicate now, adding nothing.
		inserted := slices.DeleteFunc(slices.Clone(accepted), func(i int) bool { return results[i].Duplicate })
		if err := s.addTotals(ctx, tx, sumTotals(evs, inserted)); err != nil {
			return err
		}
		copyRepeats(results, repeats)
		failpoint.Inject(failpoint.StoreBeforeConfirmCommit)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("confirm %d orders: %w", len(evs), err)
	}
	return results, nil
}

// errRecheck rolls back an optimistic batch whose assumption did not hold.
var errRecheck = errors.New("recheck the batch")

// confirmOptimistic is ConfirmOrders' common case on PostgreSQL, in four round trips: it locks
// the campaigns, decides as if no order of the batch were stored and its buyers had bought
// nothing before, and writes the orders, the campaigns' sold and the buyers' totals in one
// statement that fails if an order is stored already and says how many buyers' totals it took
// past their limit. It commits only a batch whose every order it accepted, inserted as new, and left
// its buyer within the limit: the reads would have found no such order stored and each buyer's
// total lower than the limit by at least the batch's units, so ConfirmOrders would have decided
// the same. Otherwise (a refusal, a redelivered order, a buyer with earlier orders at the limit)
// it rolls back and returns false, and the caller does the batch with the reads.
func (s *Store) confirmOptimistic(ctx context.Context, evs []events.Event, results []Result) (bool, error) {
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		b, err := s.loadBatch(ctx, tx, evs, true)
		if err != nil {
			return err
		}
		accepted, repeats := b.decide(evs, results)
		if len(accepted)+len(repeats) != len(evs) {
			// A refusal: the order may be stored already (a redelivery), which the reads tell.
			return errRecheck
		}
		t := sumTotals(evs, accepted)
		now := time.Now().UnixMilli()
		// The orders' insert has no ON CONFLICT: a stored order fails the statement, which is
		// then done again with the reads, and a new order costs one primary key descent, not
		// a check and then an insert.
		var got struct {
			Updated int `db:"updated"`
			Over    int `db:"over"`
		}
		err = tx.GetContext(ctx, &got, `WITH
			ins AS (
				INSERT INTO orders (order_id, campaign_id, user_id, quantity, created_at_ms, pay_by_ms, updated_at_ms, status, reason)
				SELECT o.*, $6::bigint, 'confirmed', '' FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $12::bigint[]) AS o),
			upd AS (
				UPDATE campaigns SET sold = campaigns.sold + x.n FROM unnest($7::text[], $8::bigint[]) AS x (id, n)
				WHERE campaigns.id = x.id AND campaigns.sold + x.n <= campaigns.stock RETURNING 1),
			tot AS (
				INSERT INTO purchases (campaign_id, user_id, bought) SELECT * FROM unnest($9::text[], $10::text[], $11::bigint[])
				ON CONFLICT (campaign_id, user_id) DO UPDATE SET bought = purchases.bought + excluded.bought
				RETURNING campaign_id, bought)
			SELECT (SELECT count(*) FROM upd) AS updated,
				(SELECT count(*) FROM tot JOIN campaigns c ON c.id = tot.campaign_id WHERE tot.bought > c.per_user_limit) AS over`,
			append(orderColumns(evs, accepted), now,
				pq.StringArray(t.campaigns), pq.Int64Array(t.sold), pq.StringArray(t.buyerCampaigns), pq.StringArray(t.buyers), pq.Int64Array(t.bought),
				pq.Int64Array(b.payBy(evs, accepted, now)))...)
		switch {
		case isUniqueViolation(err):
			return errRecheck
		case err != nil:
			return err
		case got.Over > 0:
			return errRecheck
		case got.Updated != len(t.campaigns): // impossible while the rows are locked: stop rather than oversell
			return fmt.Errorf("campaigns %v: sold exceeds the stock under the batch's lock", t.campaigns)
		}
		copyRepeats(results, repeats)
		failpoint.Inject(failpoint.StoreBeforeConfirmCommit)
		return nil
	})
	if errors.Is(err, errRecheck) {
		return false, nil
	}
	return err == nil, err
}

// batch is what the store holds about a batch's campaigns, orders and buyers.
type batch struct {
	campaigns map[string]*Campaign
	existing  map[string]events.Status // order id -> status of orders stored before
	held      map[[2]string]int64      // (campaign, user) -> units bought
}

// loadBatch reads what the store holds about evs, the campaigns only when campaignsOnly.
func (s *Store) loadBatch(ctx context.Context, tx *sqlx.Tx, evs []events.Event, campaignsOnly bool) (*batch, error) {
	campaignIDs := distinct(evs, func(e events.Event) string { return e.CampaignID })
	orderIDs := func() []string { return distinct(evs, func(e events.Event) string { return e.OrderID }) }
	b := &batch{campaigns: map[string]*Campaign{}, existing: make(map[string]events.Status), held: make(map[[2]string]int64, len(evs))}

	type knownOrder struct {
		ID     string        `db:"order_id"`
		Status events.Status `db:"status"`
	}
	type holding struct {
		Campaign string `db:"campaign_id"`
		User     string `db:"user_id"`
		Bought   int64  `db:"bought"`
	}
	var (
		known []knownOrder
		held  []holding
	)
	cs, err := s.lockCampaigns(ctx, tx, campaignIDs)
	if err != nil {
		return nil, err
	}
	if !campaignsOnly {
		users := distinct(evs, func(e events.Event) string { return e.UserID })
		err := inChunks(orderIDs(), 0, func(ids []string) error {
			var rows []knownOrder
			err := s.selectIn(ctx, tx, &rows, `SELECT order_id, status FROM orders WHERE order_id IN (?)`, ids)
			known = append(known, rows...)
			return err
		})
		if err != nil {
			return nil, err
		}
		err = inChunks(users, len(campaignIDs), func(users []string) error {
			var rows []holding
			err := s.selectIn(ctx, tx, &rows, `SELECT campaign_id, user_id, bought FROM purchases WHERE campaign_id IN (?) AND user_id IN (?)`, campaignIDs, users)
			held = append(held, rows...)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	for i := range cs {
		b.campaigns[cs[i].ID] = &cs[i]
	}
	for _, o := range known {
		b.existing[o.ID] = o.Status
	}
	for _, h := range held {
		b.held[[2]string{h.Campaign, h.User}] = h.Bought
	}
	return b, nil
}

// lockCampaigns reads the campaigns ids (repeats allowed) and, on PostgreSQL, holds their row
// locks until tx ends, taken in id order so that two transactions locking several campaigns
// never deadlock (SQLite has one writer at a time).
func (s *Store) lockCampaigns(ctx context.Context, tx *sqlx.Tx, ids []string) ([]Campaign, error) {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	lock := " FOR UPDATE"
	if s.sqlite {
		lock = ""
	}
	var cs []Campaign
	err := s.selectIn(ctx, tx, &cs, `SELECT * FROM campaigns WHERE id IN (?) ORDER BY id`+lock, ids)
	return cs, err
}

// decide fills results for the events the store refuses or knows already, and returns the
// indexes of those to insert, updating the batch's view of sold and held as it accepts, and the
// events repeated within the batch (index -> index of the first).
func (b *batch) decide(evs []events.Event, results []Result) (accepted []int, repeats map[int]int) {
	repeats = map[int]int{}
	first := map[string]int{} // order id -> index of its first event in the batch
	for i, e := range evs {
		if j, ok := first[e.OrderID]; ok {
			repeats[i] = j
			continue
		}
		first[e.OrderID] = i
		c := b.campaigns[e.CampaignID]
		key := [2]string{e.CampaignID, e.UserID}
		q := int64(e.Quantity)
		switch st, ok := b.existing[e.OrderID]; {
		case ok:
			results[i] = Result{Status: st, Duplicate: true}
		case c == nil:
			results[i] = Result{Reason: string(events.CampaignNotFound)}
		// Redis may sell a cancelled campaign for a while (the cancel's Redis step failed, or
		// the campaign was frozen), and the cancel's refunds ran before such an order existed:
		// confirmed, it would stay charged. The campaign lock orders this against the cancel.
		case c.CancelledAtMs > 0:
			results[i] = Result{Reason: string(events.CampaignCancelled)}
		// Compared with what is left, never as held+q or sold+q: a quantity near 2^63 would
		// wrap the sum negative and pass. held, limit, sold and stock are all from 0 to
		// 2^63-1, so neither difference wraps.
		case q > c.PerUserLimit-b.held[key]:
			results[i] = Result{Reason: events.ReasonStoreLimit}
		case q > c.Stock-c.Sold:
			results[i] = Result{Reason: events.ReasonStoreSoldOut}
		default:
			c.Sold += q
			b.held[key] += q
			results[i] = Result{Status: events.Confirmed}
			accepted = append(accepted, i)
		}
	}
	return accepted, repeats
}

// payBy returns, for each accepted order, when it must be paid by if confirmed at now: now plus
// its campaign's payment window, or 0 for a campaign without one.
func (b *batch) payBy(evs []events.Event, accepted []int, now int64) []int64 {
	out := make([]int64, len(accepted))
	for n, i := range accepted {
		if c := b.campaigns[evs[i].CampaignID]; c != nil && c.PaymentWindowMs > 0 {
			out[n] = now + c.PaymentWindowMs
		}
	}
	return out
}

// insertConfirmed inserts the accepted orders. A row that conflicts was inserted between
// loadBatch and now, which every writer of orders prevents by taking the campaign lock: should
// one not, that order becomes a duplicate with that writer's status and takes nothing from the
// totals.
func (s *Store) insertConfirmed(ctx context.Context, tx *sqlx.Tx, b *batch, evs []events.Event, accepted []int, results []Result) error {
	now := time.Now().UnixMilli()
	payBy := b.payBy(evs, accepted, now)
	got := make(map[string]bool, len(accepted))
	each := func(rs *sqlx.Rows) error {
		for rs.Next() {
			var id string
			if err := rs.Scan(&id); err != nil {
				return err
			}
			got[id] = true
		}
		return rs.Err()
	}
	rows := make([][]any, len(accepted))
	for n, i := range accepted {
		e := evs[i]
		rows[n] = []any{e.OrderID, e.CampaignID, e.UserID, e.Quantity, e.OccurredAt.UnixMilli(), payBy[n], now}
	}
	err := s.insertValues(ctx, tx, `INSERT INTO orders (order_id, campaign_id, user_id, quantity, created_at_ms, pay_by_ms, updated_at_ms, status, reason) VALUES `,
		`, 'confirmed', ''`, ` ON CONFLICT (order_id) DO NOTHING RETURNING order_id`, rows, each)
	if err != nil {
		return err
	}
	if len(got) == len(accepted) {
		return nil
	}
	for _, i := range accepted {
		if !got[evs[i].OrderID] {
			var st events.Status
			if err := tx.GetContext(ctx, &st, tx.Rebind(`SELECT status FROM orders WHERE order_id = ?`), evs[i].OrderID); err != nil {
				return err
			}
			results[i] = Result{Status: st, Duplicate: true}
		}
	}
	return nil
}

// addTotals adds the inserted orders' units to their campaigns' sold and their buyers' bought.
func (s *Store) addTotals(ctx context.Context, tx *sqlx.Tx, t totals) error {
	for k, id := range t.campaigns {
		n, err := rowsAffected(tx.ExecContext(ctx, tx.Rebind(`UPDATE campaigns SET sold = sold + ? WHERE id = ? AND sold + ? <= stock`), t.sold[k], id, t.sold[k]))
		if err != nil {
			return err
		}
		if n == 0 { // impossible while the campaign row is locked: stop rather than oversell
			return fmt.Errorf("campaign %s: sold + %d exceeds the stock under the batch's lock", id, t.sold[k])
		}
	}
	rows := make([][]any, len(t.buyers))
	for k := range t.buyers {
		rows[k] = []any{t.buyerCampaigns[k], t.buyers[k], t.bought[k]}
	}
	return s.insertValues(ctx, tx, `INSERT INTO purchases (campaign_id, user_id, bought) VALUES `, ``,
		` ON CONFLICT (campaign_id, user_id) DO UPDATE SET bought = purchases.bought + excluded.bought`, rows, nil)
}

// totals are the units a set of orders adds, as columns: to each campaign's sold (campaigns in
// id order, the order rows are locked and updated in) and to each buyer's bought.
type totals struct {
	campaigns []string
	sold      []int64
	// buyerCampaigns[k] and buyers[k] name a buyer, who bought bought[k] more units.
	buyerCampaigns, buyers []string
	bought                 []int64
}

// sumTotals adds up the units of the orders evs[i], i in idx: orders decide accepted, whose sums
// it bounded by their campaigns' stock and limits, so no sum wraps.
func sumTotals(evs []events.Event, idx []int) totals {
	sold := map[string]int64{}
	bought := make(map[[2]string]int64, len(idx))
	for _, i := range idx {
		e := &evs[i]
		sold[e.CampaignID] += int64(e.Quantity)
		bought[[2]string{e.CampaignID, e.UserID}] += int64(e.Quantity)
	}
	var t totals
	for id := range sold {
		t.campaigns = append(t.campaigns, id)
	}
	sort.Strings(t.campaigns)
	for _, id := range t.campaigns {
		t.sold = append(t.sold, sold[id])
	}
	for key, n := range bought {
		t.buyerCampaigns, t.buyers, t.bought = append(t.buyerCampaigns, key[0]), append(t.buyers, key[1]), append(t.bought, n)
	}
	return t
}

// orderColumns returns the orders evs[i], i in idx, as the first five arguments of an insert
// from unnest($1::text[], …, $5::bigint[]): order id, campaign, user, quantity, created at.
func orderColumns(evs []events.Event, idx []int) []any {
	ids, campaigns, users := make([]string, len(idx)), make([]string, len(idx)), make([]string, len(idx))
	qty, created := make([]int64, len(idx)), make([]int64, len(idx))
	for n, i := range idx {
		e := &evs[i]
		ids[n], campaigns[n], users[n], qty[n], created[n] = e.OrderID, e.CampaignID, e.UserID, int64(e.Quantity), e.OccurredAt.UnixMilli()
	}
	return []any{pq.StringArray(ids), pq.StringArray(campaigns), pq.StringArray(users), pq.Int64Array(qty), pq.Int64Array(created)}
}

// copyRepeats gives an event repeated within the batch its first event's result.
func copyRepeats(results []Result, repeats map[int]int) {
	for i, j := range repeats {
		results[i] = results[j]
		results[i].Duplicate = results[j].Status != ""
	}
}

// maxParams bounds the parameters of one statement, below SQLite's 32,766 and PostgreSQL's
// 65,535.
const maxParams = 30_000

// insertValues runs head, then one "(?, …, ?"+constants+")" per row, then tail, in as few
// statements as the parameter limit allows. each reads the rows a RETURNING tail yields.
func (s *Store) insertValues(ctx context.Context, tx *sqlx.Tx, head, constants, tail string, rows [][]any, each func(*sqlx.Rows) error) error {
	if len(rows) == 0 {
		return nil
	}
	per := max(1, maxParams/len(rows[0]))
	placeholders := "(" + strings.Repeat("?, ", len(rows[0])-1) + "?" + constants + ")"
	for len(rows) > 0 {
		chunk := rows[:min(len(rows), per)]
		rows = rows[len(chunk):]
		var q strings.Builder
		q.WriteString(head)
		args := make([]any, 0, len(chunk)*len(chunk[0]))
		for n, r := range chunk {
			if n > 0 {
				q.WriteString(", ")
			}
			q.WriteString(placeholders)
			args = append(args, r...)
		}
		q.WriteString(tail)
		if each == nil {
			if _, err := tx.ExecContext(ctx, tx.Rebind(q.String()), args...); err != nil {
				return err
			}
			continue
		}
		if err := queryEach(ctx, tx, each, tx.Rebind(q.String()), args...); err != nil {
			return err
		}
	}
	return nil
}

// queryEach runs query and hands its rows to each.
func queryEach(ctx context.Context, tx *sqlx.Tx, each func(*sqlx.Rows) error, query string, args ...any) error {
	rs, err := tx.QueryxContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rs.Close()
	return each(rs)
}

// inChunks calls fn with ids a chunk at a time, each small enough for a statement of one
// parameter per id and others more to stay within maxParams: a batch's reads name each of its
// orders and buyers, and a batch larger than a statement takes (--batch-size 70000) failed on
// every retry, stalling the consumer.
func inChunks(ids []string, others int, fn func(chunk []string) error) error {
	for chunk := range slices.Chunk(ids, max(1, maxParams-others)) {
		if err := fn(chunk); err != nil {
			return err
		}
	}
	return nil
}

// selectIn runs a query whose (?) placeholders take slices.
func (s *Store) selectIn(ctx context.Context, tx *sqlx.Tx, dest any, query string, args ...any) error {
	q, a, err := sqlx.In(query, args...)
	if err != nil {
		return err
	}
	return tx.SelectContext(ctx, dest, tx.Rebind(q), a...)
}

// distinct returns the distinct values of f over evs.
func distinct(evs []events.Event, f func(events.Event) string) []string {
	seen := make(map[string]bool, len(evs))
	var out []string
	for _, e := range evs {
		if v := f(e); !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
