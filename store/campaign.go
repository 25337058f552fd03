package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/seckill/seckill/events"
)

// ChangeCampaign applies an operator's change to the campaign with id: change edits the
// campaign as read under its row lock, and its stock, end and cancellation are written back with
// the version one higher. An error from change (an *events.Error saying why the change is
// refused) leaves the campaign as it was. It returns the changed campaign.
//
// A change that cancels the campaign refunds its confirmed and paid orders in the same
// transaction (refundCampaign), and returns them: a cancel cut short after its store step
// (its process killed, Redis or Kafka down) leaves no order payable or holding its buyer's
// money, and the sweeper finishes each refund's Redis half and announcement
// (UnfinishedRefunds) whether or not the cancel's run does.
func (s *Store) ChangeCampaign(ctx context.Context, id string, change func(*Campaign) error) (Campaign, []Order, error) {
	var c Campaign
	var refunded []Order
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		refunded = nil
		if _, err := s.lockCampaign(ctx, tx, id); err != nil {
			return err
		}
		var err error
		if c, err = s.campaignOn(ctx, tx, id); err != nil {
			return err
		}
		was := c
		if err := change(&c); err != nil {
			return err
		}
		if c.Stock < was.Stock {
			return fmt.Errorf("change campaign %s: stock may only grow (%d to %d)", id, was.Stock, c.Stock)
		}
		c.Version = was.Version + 1
		_, err = tx.ExecContext(ctx, tx.Rebind(`UPDATE campaigns SET stock = ?, ends_at_ms = ?, cancelled_at_ms = ?, version = ?
			WHERE id = ?`), c.Stock, c.EndsAtMs, c.CancelledAtMs, c.Version, id)
		if err != nil || c.CancelledAtMs == 0 || was.CancelledAtMs > 0 {
			return err
		}
		var units int64
		refunded, units, err = s.refundCampaign(ctx, tx, id, time.Now())
		c.Sold -= units
		return err
	})
	switch {
	case err == nil:
		return c, refunded, nil
	case errors.Is(err, sql.ErrNoRows):
		return Campaign{}, nil, events.Errorf(events.CampaignNotFound, "campaign %q not found", id)
	case events.ErrorCode(err) != events.Internal:
		return Campaign{}, nil, err
	}
	return Campaign{}, nil, fmt.Errorf("change campaign %s: %w", id, err)
}

// refundCampaign moves every confirmed and paid order of campaign id to refunded at now, as
// endOrder moves one (reason "" until its units are back in Redis), and takes their units off
// the campaign's sold and their buyers' bought: one statement for the orders, one for each
// total, however many orders. It returns the moved rows and their units. The caller holds the
// campaign's lock, so no batch of the consumer adds an order meanwhile. A payment does not take
// that lock: on PostgreSQL the update waits on an order row a payment is changing, then
// checks the row again as the payment left it, and a paid order matches as a confirmed one
// does, so a payment that commits first is refunded with its payment id, and one that comes
// after finds the order refunded (SQLite runs one writer at a time).
func (s *Store) refundCampaign(ctx context.Context, tx *sqlx.Tx, id string, now time.Time) ([]Order, int64, error) {
	var os []Order
	err := tx.SelectContext(ctx, &os, tx.Rebind(`UPDATE orders SET status = 'refunded', reason = '', updated_at_ms = ?
		WHERE campaign_id = ? AND `+endsFrom[events.Refunded]+` RETURNING *`), now.UnixMilli(), id)
	if err != nil || len(os) == 0 {
		return nil, 0, err
	}
	var units int64
	bought := map[string]int64{}
	for _, o := range os {
		units += o.Quantity
		bought[o.UserID] += o.Quantity
	}
	if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE campaigns SET sold = sold - ? WHERE id = ?`), units, id); err != nil {
		return nil, 0, err
	}
	users := slices.Sorted(maps.Keys(bought))
	rows := make([][]any, len(users))
	for i, u := range users {
		rows[i] = []any{id, u, bought[u]}
	}
	// A parameter's type in VALUES is unknown to PostgreSQL until used, and taken as text: cast.
	err = s.insertValues(ctx, tx, `UPDATE purchases SET bought = bought - CAST(v.column3 AS BIGINT) FROM (VALUES `, ``,
		`) AS v WHERE purchases.campaign_id = v.column1 AND purchases.user_id = v.column2`, rows, nil)
	if err != nil {
		return nil, 0, err
	}
	return os, units, nil
}

// AuditVerdict is the last verdict of `seckill audit` on one campaign.
type AuditVerdict struct {
	Campaign   string `db:"campaign_id" json:"campaign"`
	AtMs       int64  `db:"at_ms" json:"at_ms"`
	OK         bool   `db:"ok" json:"ok"`
	Violations string `db:"violations" json:"violations,omitempty"` // one per line
}

// RecordAudit keeps v as its campaign's last audit verdict.
func (s *Store) RecordAudit(ctx context.Context, v AuditVerdict) error {
	_, err := s.db.NamedExecContext(ctx, `INSERT INTO audits (campaign_id, at_ms, ok, violations)
		VALUES (:campaign_id, :at_ms, :ok, :violations)
		ON CONFLICT (campaign_id) DO UPDATE SET at_ms = excluded.at_ms, ok = excluded.ok, violations = excluded.violations`, v)
	if err != nil {
		return fmt.Errorf("record the audit of %s: %w", v.Campaign, err)
	}
	return nil
}

// AuditVerdicts returns the last audit verdict of every audited campaign, by campaign.
func (s *Store) AuditVerdicts(ctx context.Context) (map[string]AuditVerdict, error) {
	var vs []AuditVerdict
	if err := s.db.SelectContext(ctx, &vs, `SELECT * FROM audits`); err != nil {
		return nil, fmt.Errorf("read the audit verdicts: %w", err)
	}
	m := make(map[string]AuditVerdict, len(vs))
	for _, v := range vs {
		m[v.Campaign] = v
	}
	return m, nil
}

// ViolationCount is how many violations a verdict lists.
func (v AuditVerdict) ViolationCount() int {
	if v.Violations == "" {
		return 0
	}
	return strings.Count(v.Violations, "\n") + 1
}

// Units are the units of a campaign's orders in one status, for one reason.
type Units struct {
	Campaign string        `db:"campaign_id"`
	Status   events.Status `db:"status"`
	Reason   string        `db:"reason"`
	Units    int64         `db:"units"`
	Orders   int64         `db:"orders"`
}

// UnitsByStatus sums the units and counts the orders of the campaigns by status and reason:
// one query, which the orders_by_campaign index answers.
func (s *Store) UnitsByStatus(ctx context.Context, campaigns []string) ([]Units, error) {
	if len(campaigns) == 0 {
		return nil, nil
	}
	q, args, err := sqlx.In(`SELECT campaign_id, status, reason, SUM(quantity) AS units, COUNT(*) AS orders
		FROM orders WHERE campaign_id IN (?) GROUP BY campaign_id, status, reason`, campaigns)
	if err != nil {
		return nil, err
	}
	var us []Units
	if err := s.db.SelectContext(ctx, &us, s.db.Rebind(q), args...); err != nil {
		return nil, fmt.Errorf("units by status: %w", err)
	}
	return us, nil
}
