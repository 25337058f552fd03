package store

// migrations are applied in order, each once; a migration is never edited after it shipped.
// Times are Unix milliseconds in BIGINT columns, which read the same on both databases.
var migrations = []string{
	`CREATE TABLE campaigns (
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
	);`,
	// fences holds the latest fencing token each lease lock has written with.
	`CREATE TABLE fences (
		name  TEXT PRIMARY KEY,
		token BIGINT NOT NULL
	);`,
	// on_sale: the campaign was put on sale in Redis once. Until then the compensator's
	// reconciler may load it; after, only a rebuild may, so a campaign that Redis lost is never
	// put back on sale without the freeze. Every campaign before this column was on sale.
	`ALTER TABLE campaigns ADD COLUMN on_sale BOOLEAN NOT NULL DEFAULT TRUE;`,
}
