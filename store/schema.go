package store

// migration is one step of the schema: the same SQL on both databases unless sqlite is set.
type migration struct{ sql, sqlite string }

// on returns the migration's SQL for the database.
func (m migration) on(sqlite bool) string {
	if sqlite && m.sqlite != "" {
		return m.sqlite
	}
	return m.sql
}

// migrations are applied in order, each once; a migration is never edited after it shipped.
// Times are Unix milliseconds in BIGINT columns, which read the same on both databases.
var migrations = []migration{
	{sql: `CREATE TABLE campaigns (
		id             TEXT PRIMARY KEY,
		name           TEXT NOT NULL,
		stock          BIGINT NOT NULL CHECK (stock >= 0),
		per_user_limit BIGINT NOT NULL CHECK (per_user_limit >= 1),
		starts_at_ms   BIGINT NOT NULL,
		ends_at_ms     BIGINT NOT NULL DEFAULT 0,
		sold           BIGINT NOT NULL DEFAULT 0 CHECK (sold >= 0 AND sold <= stock),
		created_at_ms  BIGINT NOT NULL
	);
	CREATE TABLE orders (
		order_id      TEXT PRIMARY KEY,
		campaign_id   TEXT NOT NULL,
		user_id       TEXT NOT NULL,
		quantity      BIGINT NOT NULL CHECK (quantity >= 1),
		status        TEXT NOT NULL CHECK (status IN ('confirmed', 'failed', 'refunded')),
		reason        TEXT NOT NULL DEFAULT '',
		created_at_ms BIGINT NOT NULL,
		updated_at_ms BIGINT NOT NULL
	);
	CREATE INDEX orders_by_campaign ON orders (campaign_id, status);
	CREATE TABLE purchases (
		campaign_id TEXT NOT NULL,
		user_id     TEXT NOT NULL,
		bought      BIGINT NOT NULL CHECK (bought >= 0),
		PRIMARY KEY (campaign_id, user_id)
	);`},
	// fences holds the latest fencing token of each lease lock: issued (IssueFence) or written with.
	{sql: `CREATE TABLE fences (
		name  TEXT PRIMARY KEY,
		token BIGINT NOT NULL
	);`},
	// on_sale: the campaign was put on sale in Redis once. Until then the compensator's
	// reconciler may load it; after, only a rebuild may, so a campaign that Redis lost is never
	// put back on sale without the freeze. Every campaign before this column was on sale.
	{sql: `ALTER TABLE campaigns ADD COLUMN on_sale BOOLEAN NOT NULL DEFAULT TRUE;`},
	// The payment window: a campaign's window, an order's deadline to pay (0: no payment step)
	// and its payment's id, and two final states after confirmed, paid and expired. Two partial
	// indexes keep the sweeper's ExpiringOrders off a scan of every order: the unpaid orders by
	// deadline, and the expired ones whose units are not back yet. SQLite cannot change a CHECK constraint:
	// its orders table is made again.
	{
		sql: `ALTER TABLE campaigns ADD COLUMN payment_window_ms BIGINT NOT NULL DEFAULT 0 CHECK (payment_window_ms >= 0);
		ALTER TABLE orders ADD COLUMN pay_by_ms BIGINT NOT NULL DEFAULT 0;
		ALTER TABLE orders ADD COLUMN payment_id TEXT NOT NULL DEFAULT '';
		ALTER TABLE orders DROP CONSTRAINT orders_status_check;
		ALTER TABLE orders ADD CONSTRAINT orders_status_check CHECK (status IN ('confirmed', 'failed', 'refunded', 'paid', 'expired'));
		CREATE INDEX orders_to_expire ON orders (pay_by_ms) WHERE status = 'confirmed' AND pay_by_ms > 0;
		CREATE INDEX orders_expiring ON orders (order_id) WHERE status = 'expired' AND reason = '';`,
		sqlite: `ALTER TABLE campaigns ADD COLUMN payment_window_ms BIGINT NOT NULL DEFAULT 0 CHECK (payment_window_ms >= 0);
		CREATE TABLE orders_v4 (
			order_id      TEXT PRIMARY KEY,
			campaign_id   TEXT NOT NULL,
			user_id       TEXT NOT NULL,
			quantity      BIGINT NOT NULL CHECK (quantity >= 1),
			status        TEXT NOT NULL CHECK (status IN ('confirmed', 'failed', 'refunded', 'paid', 'expired')),
			reason        TEXT NOT NULL DEFAULT '',
			created_at_ms BIGINT NOT NULL,
			updated_at_ms BIGINT NOT NULL,
			pay_by_ms     BIGINT NOT NULL DEFAULT 0,
			payment_id    TEXT NOT NULL DEFAULT ''
		);
		INSERT INTO orders_v4 (order_id, campaign_id, user_id, quantity, status, reason, created_at_ms, updated_at_ms)
			SELECT order_id, campaign_id, user_id, quantity, status, reason, created_at_ms, updated_at_ms FROM orders;
		DROP TABLE orders;
		ALTER TABLE orders_v4 RENAME TO orders;
		CREATE INDEX orders_by_campaign ON orders (campaign_id, status);
		CREATE INDEX orders_to_expire ON orders (pay_by_ms) WHERE status = 'confirmed' AND pay_by_ms > 0;
		CREATE INDEX orders_expiring ON orders (order_id) WHERE status = 'expired' AND reason = '';`,
	},
	// Operators change a live campaign: version counts its changes (close, extend, added stock,
	// cancel), so that Redis applies each once and never an older one after a newer (lua Sync);
	// cancelled_at_ms marks a cancelled campaign (0: not cancelled). audits keeps the last
	// verdict of `seckill audit` per campaign, for the console and the alerts.
	{sql: `ALTER TABLE campaigns ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
		ALTER TABLE campaigns ADD COLUMN cancelled_at_ms BIGINT NOT NULL DEFAULT 0;
		CREATE TABLE audits (
			campaign_id TEXT PRIMARY KEY,
			at_ms       BIGINT NOT NULL,
			ok          BOOLEAN NOT NULL,
			violations  TEXT NOT NULL DEFAULT ''
		);`},
	// A refunded order's reason is "" until its units are back in Redis (Store.MarkRefunded),
	// as an expired order's is: this index lists a campaign's unfinished refunds without a scan
	// of its finished ones. Orders refunded before it have "" too, and are taken as finished:
	// else the first sweeps after an upgrade would go through every refund ever made, each
	// announced again.
	{sql: `UPDATE orders SET reason = 'operator' WHERE status = 'refunded' AND reason = '';
		CREATE INDEX orders_refunding ON orders (campaign_id) WHERE status = 'refunded' AND reason = '';`},
	// payments names the one order each payment paid (PayOrder): a payment id's second order
	// is refused, by this key, across processes and under concurrency. It is a table of its
	// own, not a unique index over orders.payment_id, because a database from before it may
	// hold one payment on several orders (what it closes), and such an index could not be
	// built there without rewriting paid orders. Those orders stay as they were, each still
	// paid with its payment; the id goes to the least of their order ids, and no other
	// order may take it from now on.
	{sql: `CREATE TABLE payments (
			payment_id TEXT PRIMARY KEY,
			order_id   TEXT NOT NULL
		);
		INSERT INTO payments (payment_id, order_id)
			SELECT payment_id, MIN(order_id) FROM orders WHERE payment_id <> '' GROUP BY payment_id;`},
	// The sweeper pages through its lists of orders to finish in key order, each page from
	// where the last one ended (Store.ExpiringOrders, Store.UnfinishedRefunds): a page of
	// orders that keep failing must not hide the rest. These indexes hold each list in its key
	// order, so a page is a short read of an index rather than a sort of the whole list, which
	// an outage can make large. orders_due and orders_expiring_due lead with the columns of
	// orders_to_expire and hold the rows of orders_expiring, which they replace.
	{sql: `CREATE INDEX orders_due ON orders (pay_by_ms, order_id) WHERE status = 'confirmed' AND pay_by_ms > 0;
		DROP INDEX orders_to_expire;
		CREATE INDEX orders_expiring_due ON orders (pay_by_ms, order_id) WHERE status = 'expired' AND reason = '';
		DROP INDEX orders_expiring;
		CREATE INDEX orders_refunding_by_id ON orders (order_id) WHERE status = 'refunded' AND reason = '';`},
	// payment_unannounced says that Kafka may not have a paid order's OrderPaid: PayOrder
	// stores it true, Store.MarkPaidAnnounced false once the announcement is acknowledged, and
	// until then Store.UnannouncedPayments lists the order for the sweeper to announce, as
	// refunds and expiries are listed until theirs is. A column of its own, not the reason as
	// for those: a paid order's reason is "" in every answer and stream, and one that changed
	// there would tell buyers of a change that is not theirs. Orders paid before it take the
	// default, announced: else the first sweeps after an upgrade would announce every payment
	// ever taken again. (False, not a true "announced", is the default so that every order but
	// a payment in flight has Go's zero value.) orders_paid_unannounced keeps the sweeper's
	// read off paid history.
	{sql: `ALTER TABLE orders ADD COLUMN payment_unannounced BOOLEAN NOT NULL DEFAULT FALSE;
		CREATE INDEX orders_paid_unannounced ON orders (order_id) WHERE status = 'paid' AND payment_unannounced;`},
}
