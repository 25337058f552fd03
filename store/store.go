package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"modernc.org/sqlite" // registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/redact"
)

func init() { sqlx.BindDriver("sqlite", sqlx.QUESTION) }

// Store is the order database.
type Store struct {
	db     *sqlx.DB
	sqlite bool
	// readsOnly makes PostgreSQL confirm every batch as SQLite does, with the reads, never the
	// optimistic way: for the test that holds the two to the same answers.
	readsOnly bool
}

// Open connects to the database named by dsn: a postgres:// or postgresql:// URL, or
// sqlite:PATH for a SQLite file (created if missing).
func Open(ctx context.Context, dsn string) (*Store, error) {
	if err := CheckURL(dsn); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	var (
		db  *sqlx.DB
		err error
	)
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		db, err = sqlx.Open("postgres", pqDefaults(dsn))
		if err == nil {
			db.SetMaxOpenConns(20)
			db.SetMaxIdleConns(20)
		}
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(dsn, "sqlite:")
		// WAL lets readers run beside the writer; one connection makes SQLite's single writer
		// explicit instead of a busy error, and busy_timeout covers other processes. Every
		// transaction begins IMMEDIATE, taking the file's write lock at its start: one that
		// reads before it writes (a batch, a refund, an order's end) and began deferred could
		// not become a writer once another process (a --dev command beside seckill dev) had
		// written meanwhile, and failed at once with "database is locked" where busy_timeout
		// should have made it wait.
		// The path goes into a file: URI, where SQLite reads '?', '#' and '%' as URI syntax:
		// escaped, a directory named "x#y" holds the database instead of a file "x" beside it.
		path = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
		db, err = sqlx.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
		if err == nil {
			db.SetMaxOpenConns(1)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		err = fmt.Errorf("open store %s: %w", redact.URL(dsn), err)
		if unopenable(err) {
			return nil, events.Permanent(err)
		}
		return nil, err
	}
	return &Store{db: db, sqlite: db.DriverName() == "sqlite"}, nil
}

// unopenable reports whether err is the database's refusal of what the URL asks for, which no
// wait mends, and a role that waits for its store retried for ever (events.Permanent stops its
// wait). On SQLite: a path it cannot open (a directory that does not exist or is not writable, a
// directory named as the file) or a file that is not a database; a busy or locked database is
// not one, as the other process lets go of it. On PostgreSQL: a wrong user or password (SQLSTATE
// class 28) or a database that does not exist (3D), sslmode=require (or verify-*) against a
// server without SSL, and a setting of the URL's query, which lib/pq sends the server at the
// start, that the server does not know (a mistyped name: 42704) or whose value it refuses
// (22023). A server starting up, shutting down or out of connections is waited for.
func unopenable(err error) bool {
	var e *sqlite.Error
	if errors.As(err, &e) {
		switch e.Code() & 0xff { // the primary code of an extended one (SQLITE_CANTOPEN_ISDIR, …)
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_NOTADB:
			return true
		}
		return false
	}
	if errors.Is(err, pq.ErrSSLNotSupported) {
		return true
	}
	var pe *pq.Error
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code.Class() {
	case "28", "3D":
		return true
	}
	return pe.Code == "42704" || pe.Code == "22023"
}

// CheckURL says what is wrong with a store URL, before anything connects: postgres://… as lib/pq
// reads it when it connects (its port and its options' values included), or sqlite:PATH.
func CheckURL(dsn string) error {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		if _, err := pq.ParseURL(dsn); err != nil {
			return redact.ParseError(dsn, err)
		}
		// ParseURL only converts: lib/pq reads the port and the options' values when it
		// connects, and a role took its "wrong value for sslmode" for an outage, retrying it
		// for ever. NewConfig reads them as a connection would (the PG* variables too), and
		// dials nothing. Its errors quote a number's or a mode's value, never a password.
		cfg, err := pq.NewConfig(dsn)
		if err != nil {
			return err
		}
		ports := []uint16{cfg.Port}
		for _, m := range cfg.Multi {
			ports = append(ports, m.Port)
		}
		for _, p := range ports {
			if p == 0 { // lib/pq takes it and dials it
				return errors.New("port 0: want 1 to 65535")
			}
		}
	case strings.HasPrefix(dsn, "sqlite:"):
		if strings.TrimPrefix(dsn, "sqlite:") == "" {
			return errors.New("sqlite: names no file (want sqlite:PATH)")
		}
	default:
		return fmt.Errorf("unsupported url %q (want postgres://… or sqlite:PATH)", redact.URL(dsn))
	}
	return nil
}

// pqDefaults sets two lib/pq parameters the URL does not set itself.
//
// binary_parameters=yes: a query with arguments then goes out as one Parse/Bind/Execute in one
// round trip, where lib/pq's default prepares it first and waits twice. Our arguments are
// strings and numbers, which it still sends as text.
//
// connect_timeout=10 (seconds): lib/pq reads a new connection's start-up answer with no
// deadline and without the context, so a server that accepts and never answers (a host stalled
// mid-failover, a proxy whose backend is gone) held Open, or any query needing a new
// connection, forever, deaf to SIGTERM. A connection takes milliseconds to set up. The
// environment's PGCONNECT_TIMEOUT, which lib/pq reads too, wins over this default.
func pqDefaults(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	for k, v := range map[string]string{"binary_parameters": "yes", "connect_timeout": "10"} {
		if !q.Has(k) && !(k == "connect_timeout" && os.Getenv("PGCONNECT_TIMEOUT") != "") {
			q.Set(k, v)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// DB returns the underlying database, for tests and the audit.
func (s *Store) DB() *sqlx.DB { return s.db }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// ErrSchemaBehind is a database that lacks migrations this build needs: seckill migrate (or a
// deployment's migrate job) applies them.
var ErrSchemaBehind = errors.New("the order database's schema is behind this seckill")

// CheckSchema reports, as an error wrapping ErrSchemaBehind, a database that lacks migrations
// of this build. Without the check a role started before seckill migrate (or on the wrong
// database) ran, and failed every write with "relation does not exist" for as long as it ran.
// A schema ahead of this build (a rollback after a newer release's migrate) is not refused:
// the check is for the missing step.
func (s *Store) CheckSchema(ctx context.Context) error {
	exists := `SELECT to_regclass('schema_migrations') IS NOT NULL`
	if s.sqlite {
		exists = `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations')`
	}
	var found bool
	if err := s.db.GetContext(ctx, &found, exists); err != nil {
		return fmt.Errorf("read the schema's version: %w", err)
	}
	var have int
	if found {
		if err := s.db.GetContext(ctx, &have, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`); err != nil {
			return fmt.Errorf("read the schema's version: %w", err)
		}
	}
	if have < len(migrations) {
		return fmt.Errorf("%w: it is at version %d, this seckill needs %d; run seckill migrate with the same --postgres-url", ErrSchemaBehind, have, len(migrations))
	}
	return nil
}

// DefaultLockTimeout is how long a migration waits for a table's lock on PostgreSQL when
// LockTimeout does not say.
const DefaultLockTimeout = 5 * time.Second

// MigrateOption changes how Migrate runs.
type MigrateOption func(*migrateOptions)

type migrateOptions struct {
	lockTimeout time.Duration
	log         *slog.Logger
}

// LockTimeout bounds each wait of a migration for a table's lock on PostgreSQL (its
// transaction's lock_timeout); d must be positive. A migration whose wait runs out is rolled
// back and tried again after as long again, until Migrate's context ends. Default:
// DefaultLockTimeout. SQLite, which has one writer and its busy_timeout, ignores it.
func LockTimeout(d time.Duration) MigrateOption {
	return func(o *migrateOptions) { o.lockTimeout = d }
}

// MigrateLog makes Migrate say on log each migration it applied, or that it had none to apply
// (INFO), that a migration waits for a lock and tries again (WARN, at most every 10 s), and when
// it got it. Default: nothing is logged.
func MigrateLog(log *slog.Logger) MigrateOption {
	return func(o *migrateOptions) { o.log = log }
}

// Migrate applies the migrations the database lacks. Concurrent callers on PostgreSQL wait for
// each other on an advisory lock.
func (s *Store) Migrate(ctx context.Context, opts ...MigrateOption) error {
	return s.migrateTo(ctx, len(migrations), opts...)
}

// migrateTo applies the migrations the database lacks up to version last: Migrate, or a test's
// database as an earlier release left it.
func (s *Store) migrateTo(ctx context.Context, last int, opts ...MigrateOption) error {
	o := migrateOptions{lockTimeout: DefaultLockTimeout, log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	if o.lockTimeout <= 0 {
		return fmt.Errorf("migrate: lock timeout %v: want a positive duration", o.lockTimeout)
	}
	conn, err := s.db.Connx(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Close()
	if !s.sqlite {
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock(727274)`); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(727274)`)
	}
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var have int
	if err := conn.GetContext(ctx, &have, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if have >= last {
		o.log.Info("nothing to apply: the schema is at the latest migration", "version", have)
		return nil
	}
	for v := have + 1; v <= last; v++ {
		if err := s.apply(ctx, conn, v, o); err != nil {
			return err
		}
		o.log.Info("migration applied", "version", v, "of", last)
	}
	return nil
}

// apply runs migration v, retrying it while a lock it needs is held by others. On PostgreSQL an
// ALTER TABLE waits for an ACCESS EXCLUSIVE lock, and while it waits behind any open
// transaction that read the table (a slow report, the console, a stuck session) every new
// query on that table queues behind the ALTER: the order path stops for as long as the
// blocker lasts. So a wait is bounded by o.lockTimeout; when it runs out the migration rolls
// back, the queue drains for as long again, and the migration tries again until ctx ends.
func (s *Store) apply(ctx context.Context, conn *sqlx.Conn, v int, o migrateOptions) error {
	var lockErr error       // the last lock timeout, nil while there has been none
	var waits events.Outage // a WARN when the waits start, at most one every 10 s after
	for tries := 1; ; tries++ {
		err := s.applyOnce(ctx, conn, v, o.lockTimeout)
		switch {
		case err == nil:
			waits.Answered(o.log, fmt.Sprintf("migration %d applied after waiting for its lock", v))
			return nil
		case isLockTimeout(err):
			lockErr = err
		case lockErr != nil && ctx.Err() != nil: // ended while it waited for the lock again
			return lockWaitError(v, tries, o.lockTimeout, lockErr, context.Cause(ctx))
		default:
			return fmt.Errorf("migrate %d: %w", v, err)
		}
		waits.Failed(o.log, "migration waits for a table lock another transaction holds; it let go so that the queries queued behind it run, and retries",
			"migration", v, "tries", tries, "lock_timeout", o.lockTimeout, "sqlstate", lockNotAvailable)
		backoff := time.NewTimer(o.lockTimeout)
		select {
		case <-ctx.Done():
			backoff.Stop()
			return lockWaitError(v, tries, o.lockTimeout, lockErr, context.Cause(ctx))
		case <-backoff.C:
		}
	}
}

// applyOnce runs migration v and records it, in one transaction: rolled back on any error.
func (s *Store) applyOnce(ctx context.Context, conn *sqlx.Conn, v int, lockTimeout time.Duration) error {
	tx, err := conn.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after Commit, a no-op
	if !s.sqlite {
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = '%dms'`, max(lockTimeout.Milliseconds(), 1))); err != nil {
			return fmt.Errorf("set lock_timeout: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, migrations[v-1].on(s.sqlite)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO schema_migrations (version) VALUES (?)`), v); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// lockNotAvailable is PostgreSQL's SQLSTATE for a lock wait that ran out its lock_timeout.
const lockNotAvailable = "55P03"

func isLockTimeout(err error) bool {
	var pe *pq.Error
	return errors.As(err, &pe) && pe.Code == lockNotAvailable
}

// lockWaitError is the error of migration v whose context ended (cause) while it waited for a
// lock: it wraps cause and the last lock timeout.
func lockWaitError(v, tries int, lockTimeout time.Duration, lockErr, cause error) error {
	times := fmt.Sprintf("%d times", tries)
	if tries == 1 {
		times = "once"
	}
	return fmt.Errorf("migrate %d: could not get its lock, waited %s for %v (SQLSTATE %s, lock_not_available: another transaction holds a table it alters; pg_locks and pg_stat_activity show which): %w: %w",
		v, times, lockTimeout, lockNotAvailable, cause, lockErr)
}

// Campaign is a sale of one item.
type Campaign struct {
	ID           string `db:"id"`
	Name         string `db:"name"`
	Stock        int64  `db:"stock"`
	PerUserLimit int64  `db:"per_user_limit"`
	StartsAtMs   int64  `db:"starts_at_ms"`
	EndsAtMs     int64  `db:"ends_at_ms"` // 0: no end
	Sold         int64  `db:"sold"`       // units of confirmed orders
	CreatedAtMs  int64  `db:"created_at_ms"`
	OnSale       bool   `db:"on_sale"` // put on sale in Redis once (see MarkOnSale)
	// PaymentWindowMs is how long a confirmed order has to be paid; 0: no payment step.
	PaymentWindowMs int64 `db:"payment_window_ms"`
	// Version counts the operators' changes to the campaign (ChangeCampaign).
	Version int64 `db:"version"`
	// CancelledAtMs is when an operator cancelled the campaign; 0: not cancelled.
	CancelledAtMs int64 `db:"cancelled_at_ms"`
}

// Over reports whether c's sale is over at nowMs: its end has passed, or it was closed before
// it opened (an end at its start, the empty window Operator.Close leaves).
func (c Campaign) Over(nowMs int64) bool {
	return c.EndsAtMs > 0 && (c.EndsAtMs <= nowMs || c.EndsAtMs <= c.StartsAtMs)
}

// CreateCampaign inserts c; a campaign with the same id is an events.CampaignExists error.
func (s *Store) CreateCampaign(ctx context.Context, c Campaign) error {
	_, err := s.db.NamedExecContext(ctx, `INSERT INTO campaigns
		(id, name, stock, per_user_limit, starts_at_ms, ends_at_ms, sold, created_at_ms, on_sale, payment_window_ms)
		VALUES (:id, :name, :stock, :per_user_limit, :starts_at_ms, :ends_at_ms, 0, :created_at_ms, :on_sale, :payment_window_ms)`, c)
	if isUniqueViolation(err) {
		return events.Errorf(events.CampaignExists, "campaign %q exists already", c.ID)
	}
	if err != nil {
		return fmt.Errorf("create campaign %s: %w", c.ID, err)
	}
	return nil
}

// MarkOnSale records that the campaign with id was put on sale in Redis.
func (s *Store) MarkOnSale(ctx context.Context, id string) error {
	if _, err := s.db.ExecContext(ctx, s.db.Rebind(`UPDATE campaigns SET on_sale = TRUE WHERE id = ?`), id); err != nil {
		return fmt.Errorf("mark campaign %s on sale: %w", id, err)
	}
	return nil
}

// Campaign returns the campaign with id, or an events.CampaignNotFound error.
func (s *Store) Campaign(ctx context.Context, id string) (Campaign, error) {
	return s.campaignOn(ctx, s.db, id)
}

// campaignOn is Campaign on q: the database, or a transaction (AuditView).
func (s *Store) campaignOn(ctx context.Context, q sqlx.QueryerContext, id string) (Campaign, error) {
	var c Campaign
	err := sqlx.GetContext(ctx, q, &c, s.db.Rebind(`SELECT * FROM campaigns WHERE id = ?`), id)
	if errors.Is(err, sql.ErrNoRows) {
		return c, events.Errorf(events.CampaignNotFound, "campaign %q not found", id)
	}
	if err != nil {
		return c, fmt.Errorf("read campaign %s: %w", id, err)
	}
	return c, nil
}

// NewestCampaigns returns the n campaigns created last, newest first (by id among those created
// in the same millisecond), for a page that shows a few: the server keeps the top n, and the
// rest never cross the wire.
func (s *Store) NewestCampaigns(ctx context.Context, n int) ([]Campaign, error) {
	var cs []Campaign
	if err := s.db.SelectContext(ctx, &cs, s.db.Rebind(`SELECT * FROM campaigns ORDER BY created_at_ms DESC, id LIMIT ?`), n); err != nil {
		return nil, fmt.Errorf("list the newest campaigns: %w", err)
	}
	return cs, nil
}

// Campaigns returns every campaign, oldest first.
func (s *Store) Campaigns(ctx context.Context) ([]Campaign, error) {
	var cs []Campaign
	if err := s.db.SelectContext(ctx, &cs, `SELECT * FROM campaigns ORDER BY created_at_ms, id`); err != nil {
		return nil, fmt.Errorf("list campaigns: %w", err)
	}
	return cs, nil
}

// Holdings returns the units each buyer holds in confirmed orders of a campaign.
func (s *Store) Holdings(ctx context.Context, campaign string) (map[string]int64, error) {
	return s.holdingsOn(ctx, s.db, campaign)
}

// holdingsOn is Holdings on q: the database, or a transaction (AuditView).
func (s *Store) holdingsOn(ctx context.Context, q sqlx.QueryerContext, campaign string) (map[string]int64, error) {
	var rows []struct {
		User   string `db:"user_id"`
		Bought int64  `db:"bought"`
	}
	err := sqlx.SelectContext(ctx, q, &rows, s.db.Rebind(`SELECT user_id, bought FROM purchases WHERE campaign_id = ? AND bought > 0`), campaign)
	if err != nil {
		return nil, fmt.Errorf("holdings of %s: %w", campaign, err)
	}
	m := make(map[string]int64, len(rows))
	for _, r := range rows {
		m[r.User] = r.Bought
	}
	return m, nil
}

// Order is a final order row.
type Order struct {
	OrderID     string        `db:"order_id"`
	CampaignID  string        `db:"campaign_id"`
	UserID      string        `db:"user_id"`
	Quantity    int64         `db:"quantity"`
	Status      events.Status `db:"status"`
	Reason      string        `db:"reason"`
	CreatedAtMs int64         `db:"created_at_ms"`
	UpdatedAtMs int64         `db:"updated_at_ms"`
	PayByMs     int64         `db:"pay_by_ms"`  // confirmed: when it must be paid by; 0: no payment step
	PaymentID   string        `db:"payment_id"` // paid: the payment service's id
	// PaymentUnannounced is true for a paid order whose OrderPaid Kafka may not have yet
	// (MarkPaidAnnounced); false for every other order.
	PaymentUnannounced bool `db:"payment_unannounced"`
}

// Order returns the order with id, or an events.OrderNotFound error.
func (s *Store) Order(ctx context.Context, id string) (Order, error) {
	var o Order
	err := s.db.GetContext(ctx, &o, s.db.Rebind(`SELECT * FROM orders WHERE order_id = ?`), id)
	if errors.Is(err, sql.ErrNoRows) {
		return o, events.Errorf(events.OrderNotFound, "order %q not found", id)
	}
	if err != nil {
		return o, fmt.Errorf("read order %s: %w", id, err)
	}
	return o, nil
}

// Result is what ConfirmOrders did with one event.
type Result struct {
	// Status is the order's final state in the store after the call: Confirmed when this call or
	// an earlier one confirmed it, Failed or Refunded when the compensator got there first, and ""
	// when the store refused it (see Reason).
	Status events.Status
	// Duplicate is true when the order was in the store already, so this call changed nothing.
	Duplicate bool
	// Reason says why the store refused the order: events.ReasonStoreSoldOut,
	// events.ReasonStoreLimit, events.CampaignNotFound, or events.CampaignCancelled.
	Reason string
}

// FailOrder records the order of e as failed for reason unless the store holds it already, and
// returns the order's row either way: the caller releases the reservation only when the row says
// Failed, so a confirmed order is never released.
func (s *Store) FailOrder(ctx context.Context, e events.Event, reason string) (Order, error) {
	return s.FailOrderFenced(ctx, e, reason, Fence{})
}

// Fence is the fencing token of one holder of a lease lock (lua.Lock), issued by IssueFence:
// tokens grow with every acquisition, so a write carrying a token lower than the latest one
// comes from a holder whose lease ran out.
type Fence struct {
	Name  string // the lock's name; "" means unfenced
	Token int64
}

// ErrStaleFence is returned by FailOrderFenced when a later token of its lock has been issued:
// the caller lost its lease (a pause, a partition) and must stop acting on it.
var ErrStaleFence = errors.New("stale fencing token: the lease passed to another holder")

// IssueFence returns a fencing token for the lock name, one above every token issued for it
// before and at least floor, and records it as the latest: from then on FailOrderFenced refuses
// the earlier ones. floor is the lock's count of acquisitions in Redis (lua.Lock.Count): a
// compensator from before the store issued tokens took that count as its token, and during a
// rolling upgrade a new holder's token must still be above it.
//
// The store issues the tokens, not Redis beside the lock, because the store is what checks them
// and it keeps what it saw: a counter in Redis starts again at 1 when Redis loses its data (a
// wipe, a restart without the last writes, `seckill dev` on a fresh miniredis over the same
// SQLite file), and every holder is then refused as stale until the counter climbs back past
// the store's. Issuing in one statement also means two holders never get the same token.
func (s *Store) IssueFence(ctx context.Context, name string, floor int64) (Fence, error) {
	greatest := "GREATEST"
	if s.sqlite {
		greatest = "MAX" // SQLite's max of many arguments
	}
	f := Fence{Name: name}
	err := s.db.GetContext(ctx, &f.Token, s.db.Rebind(`INSERT INTO fences (name, token) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET token = `+greatest+`(fences.token + 1, excluded.token) RETURNING token`), name, max(floor, 1))
	if err != nil {
		return Fence{}, fmt.Errorf("issue fence %s: %w", name, err)
	}
	return f, nil
}

// FailOrderFenced is FailOrder for a lock holder: in the same transaction it records f as the
// latest token of its lock, and refuses with ErrStaleFence if a later token was issued or
// recorded first.
//
// On PostgreSQL it writes under the campaign's lock, as ConfirmOrders decides: a batch that has
// read its orders then stores them before this fail is stored, and this one returns the
// confirmed row. Without the lock the failed row could land between a batch's read and its
// insert, and the batch, having counted the order's units as taken, would refuse a neighbour as
// sold out while those units were free.
func (s *Store) FailOrderFenced(ctx context.Context, e events.Event, reason string, f Fence) (Order, error) {
	now := time.Now().UnixMilli()
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		// An unknown campaign has no row to lock, and no batch confirms its orders.
		if _, err := s.lockCampaign(ctx, tx, e.CampaignID); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if f.Name != "" {
			n, err := rowsAffected(tx.ExecContext(ctx, tx.Rebind(`INSERT INTO fences (name, token) VALUES (?, ?)
				ON CONFLICT (name) DO UPDATE SET token = excluded.token WHERE fences.token <= excluded.token`), f.Name, f.Token))
			if err != nil {
				return err
			}
			if n == 0 {
				return ErrStaleFence
			}
		}
		_, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO orders
			(order_id, campaign_id, user_id, quantity, status, reason, created_at_ms, updated_at_ms)
			VALUES (?, ?, ?, ?, 'failed', ?, ?, ?) ON CONFLICT (order_id) DO NOTHING`),
			e.OrderID, e.CampaignID, e.UserID, e.Quantity, reason, e.OccurredAt.UnixMilli(), now)
		return err
	})
	if err != nil {
		return Order{}, fmt.Errorf("fail order %s: %w", e.OrderID, err)
	}
	return s.Order(ctx, e.OrderID)
}

// RecordGivenBack makes the store hold orders as the giving back of their units ended them, when
// the store has lost that change (restored from a backup that lacks the last minutes) and Redis,
// whose record outlived it, tells it: each order comes with the final status (failed, refunded or
// expired) and reason the caller gives. An order the store lacks is stored so, holding no units.
// One it holds confirmed or paid is moved on so, as RefundOrder or ExpireOrder and then
// MarkRefunded or MarkUnpaid would: its units off its campaign's sold and its buyer's bought; one
// it holds paid is refunded unfinished (reason ""), its OrderRefunded, which names the payment,
// to be announced again by the sweeper. Any other order is left as it is: failed was never
// confirmed, and an order paid in the store is not expired by this (Redis holds a paid order as
// confirmed, so one it expired was not paid when it did). It returns how many orders it stored
// and how many it moved on.
//
// The consumer and the replay record this way what Redis says of a batch's orders before they
// persist it, and the replay's catch-up what it says of the orders the store holds. On
// PostgreSQL it writes under the campaigns' locks, as FailOrderFenced does and for the same
// reason: a consumer's batch deciding the same order meanwhile would count its units as taken.
func (s *Store) RecordGivenBack(ctx context.Context, orders []Order) (stored, moved int, err error) {
	now := time.Now()
	rows := make([][]any, len(orders))
	campaigns := make([]string, len(orders))
	for i, o := range orders {
		campaigns[i] = o.CampaignID
		if o.Status != events.Failed && o.Status != events.Refunded && o.Status != events.Expired {
			return 0, 0, fmt.Errorf("record order %s as given back: %q is not a status that gives units back", o.OrderID, o.Status)
		}
		rows[i] = []any{o.OrderID, o.CampaignID, o.UserID, o.Quantity, string(o.Status), o.Reason, o.CreatedAtMs, now.UnixMilli()}
	}
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		stored, moved = 0, 0
		if _, err := s.lockCampaigns(ctx, tx, campaigns); err != nil {
			return err
		}
		err := s.insertValues(ctx, tx, `INSERT INTO orders (order_id, campaign_id, user_id, quantity, status, reason, created_at_ms, updated_at_ms) VALUES `,
			``, ` ON CONFLICT (order_id) DO NOTHING RETURNING order_id`, rows, func(rs *sqlx.Rows) error {
				for rs.Next() {
					stored++
				}
				return rs.Err()
			})
		if err != nil {
			return err
		}
		for _, o := range orders {
			if o.Status == events.Failed {
				continue
			}
			row, ok, err := endOrder(ctx, tx, o.OrderID, o.Status, o.Reason, now)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			moved++
			if row.Status == events.Refunded && row.PaymentID != "" {
				// Its OrderRefunded names the payment to give back, and may have been lost
				// with the store: unfinished, the sweeper announces it again.
				if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE orders SET reason = '' WHERE order_id = ?`), o.OrderID); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("record %d given-back orders: %w", len(orders), err)
	}
	return stored, moved, nil
}

// endsFrom are the states from which an order moves to refunded or expired (at now, the
// argument), its units given back. An order expires only once past its pay_by: one Redis
// expired by the compensator's clock stays confirmed here if this clock disagrees, and the
// sweeper expires it once past, its units already back in Redis.
var endsFrom = map[events.Status]string{
	events.Refunded: `status IN ('confirmed', 'paid')`,
	events.Expired:  `status = 'confirmed' AND pay_by_ms > 0 AND pay_by_ms <= ?`,
}

// endOrder moves order orderID to status (refunded or expired) with reason, if it is in a state
// that moves there at now (endsFrom), and takes its units off its campaign's sold and its
// buyer's bought; it returns the moved row and whether it moved it. The caller holds the
// campaign's lock.
func endOrder(ctx context.Context, tx *sqlx.Tx, orderID string, status events.Status, reason string, now time.Time) (Order, bool, error) {
	args := []any{string(status), reason, now.UnixMilli(), orderID}
	if status == events.Expired {
		args = append(args, now.UnixMilli())
	}
	var o Order
	err := tx.GetContext(ctx, &o, tx.Rebind(`UPDATE orders SET status = ?, reason = ?, updated_at_ms = ?
		WHERE order_id = ? AND `+endsFrom[status]+` RETURNING *`), args...)
	if errors.Is(err, sql.ErrNoRows) {
		return Order{}, false, nil
	}
	if err != nil {
		return Order{}, false, err
	}
	return o, true, giveBack(ctx, tx, o)
}

// Orders returns every order row of a campaign.
func (s *Store) Orders(ctx context.Context, campaign string) ([]Order, error) {
	return s.ordersOn(ctx, s.db, campaign)
}

// ordersOn is Orders on q: the database, or a transaction (AuditView).
func (s *Store) ordersOn(ctx context.Context, q sqlx.QueryerContext, campaign string) ([]Order, error) {
	var os []Order
	if err := sqlx.SelectContext(ctx, q, &os, s.db.Rebind(`SELECT * FROM orders WHERE campaign_id = ?`), campaign); err != nil {
		return nil, fmt.Errorf("orders of %s: %w", campaign, err)
	}
	return os, nil
}

// AuditView returns a campaign, its orders and its buyers' totals as of one moment: one
// read-only, repeatable-read transaction on PostgreSQL (SQLite's transactions are serializable
// already).
func (s *Store) AuditView(ctx context.Context, campaign string) (Campaign, []Order, map[string]int64, error) {
	opts := &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead}
	if s.sqlite {
		opts = nil
	}
	tx, err := s.db.BeginTxx(ctx, opts)
	if err != nil {
		return Campaign{}, nil, nil, fmt.Errorf("audit view of %s: %w", campaign, err)
	}
	defer tx.Rollback()
	c, err := s.campaignOn(ctx, tx, campaign)
	if err != nil {
		return c, nil, nil, err
	}
	orders, err := s.ordersOn(ctx, tx, campaign)
	if err != nil {
		return c, nil, nil, err
	}
	holdings, err := s.holdingsOn(ctx, tx, campaign)
	return c, orders, holdings, err
}

// Confirmed returns the orders of a campaign that hold units, confirmed or paid (which Redis
// knows both as confirmed).
func (s *Store) Confirmed(ctx context.Context, campaign string) ([]Order, error) {
	return s.confirmedOn(ctx, s.db, campaign)
}

func (s *Store) confirmedOn(ctx context.Context, q sqlx.QueryerContext, campaign string) ([]Order, error) {
	var os []Order
	err := sqlx.SelectContext(ctx, q, &os, s.db.Rebind(`SELECT * FROM orders WHERE campaign_id = ? AND status IN ('confirmed', 'paid')`), campaign)
	if err != nil {
		return nil, fmt.Errorf("confirmed orders of %s: %w", campaign, err)
	}
	return os, nil
}

// Refunding returns the refunded orders of a campaign whose units may not be back in Redis:
// their reason is still "" until MarkRefunded, so a refund that stopped between the store and
// Redis is listed until it is finished. The orders_refunding index keeps the finished ones out
// of the read, however many a cancelled campaign has.
func (s *Store) Refunding(ctx context.Context, campaign string) ([]Order, error) {
	var os []Order
	err := s.db.SelectContext(ctx, &os, s.db.Rebind(`SELECT * FROM orders WHERE campaign_id = ? AND status = 'refunded' AND reason = ''`), campaign)
	if err != nil {
		return nil, fmt.Errorf("unfinished refunds of %s: %w", campaign, err)
	}
	return os, nil
}

// UnfinishedRefunds returns up to limit refunded orders of any campaign whose units are not
// back in Redis yet (their reason is still ""), in order id order from the first after after
// ("": from the first), read from the orders_refunding_by_id index. The order is what lets
// the sweeper page through the list: with none, every call returned the same rows, and a page
// of orders that kept failing (their Redis shard down) hid the orders behind it for good.
func (s *Store) UnfinishedRefunds(ctx context.Context, after string, limit int) ([]Order, error) {
	var os []Order
	err := s.db.SelectContext(ctx, &os, s.db.Rebind(`SELECT * FROM orders WHERE status = 'refunded' AND reason = '' AND order_id > ?
		ORDER BY order_id LIMIT ?`), after, limit)
	if err != nil {
		return nil, fmt.Errorf("unfinished refunds: %w", err)
	}
	return os, nil
}

// GivingBack returns the refunded and expired orders of the campaigns whose reason is still
// "": their units may not be back in Redis yet, and their announcement is not in Kafka yet.
// The orders_refunding index reads the refunds; the expiries are few unless the sweeper is
// behind.
func (s *Store) GivingBack(ctx context.Context, campaigns []string) ([]Order, error) {
	if len(campaigns) == 0 {
		return nil, nil
	}
	q, args, err := sqlx.In(`SELECT * FROM orders WHERE campaign_id IN (?) AND status IN ('refunded', 'expired') AND reason = ''`, campaigns)
	if err != nil {
		return nil, err
	}
	var os []Order
	if err := s.db.SelectContext(ctx, &os, s.db.Rebind(q), args...); err != nil {
		return nil, fmt.Errorf("orders being given back: %w", err)
	}
	return os, nil
}

// MarkRefunded records that a refunded order's units are back in Redis.
func (s *Store) MarkRefunded(ctx context.Context, orderID string) error {
	return s.markBack(ctx, orderID, events.Refunded, events.ReasonOperator)
}

// markBack records that order orderID, of status, has its units back in Redis: its reason,
// empty until then, becomes reason.
func (s *Store) markBack(ctx context.Context, orderID string, status events.Status, reason string) error {
	_, err := s.db.ExecContext(ctx, s.db.Rebind(`UPDATE orders SET reason = ? WHERE order_id = ? AND status = ?`), reason, orderID, string(status))
	if err != nil {
		return fmt.Errorf("mark order %s %s with its units back: %w", orderID, status, err)
	}
	return nil
}

// Held is what a campaign holds in the store at one moment: the campaign (its sold), its
// buyers' units, its orders that hold units, confirmed or paid, and those that gave theirs
// back.
type Held struct {
	Campaign Campaign
	Holdings map[string]int64
	Orders   []Order
	// Ended are the orders that ended with their units back on sale (failed, refunded or
	// expired) since WhileHeld's endedSince. A rebuild restores their records, which a keyed
	// retry of such an order finds.
	Ended []Order
}

// WhileHeld reads what campaign holds and runs fn with it while holding the campaign's lock, so
// that no change of the campaign commits between the read and fn's end: an expiry, a refund, a
// cancel or a batch of orders waits, then lands on what fn wrote. A Redis rebuild writes Redis
// in fn: otherwise a change committed after the read would be undone by the restore (its units
// given back in the store, taken again in Redis, for good). Of the orders that gave their units
// back it reads those that ended since endedSince only: a campaign's whole history of failures
// is not read under its lock for the few a rebuild restores.
func (s *Store) WhileHeld(ctx context.Context, campaign string, endedSince time.Time, fn func(Held) error) error {
	return s.inTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := s.lockCampaign(ctx, tx, campaign); errors.Is(err, sql.ErrNoRows) {
			return events.Errorf(events.CampaignNotFound, "campaign %q not found", campaign)
		} else if err != nil {
			return err
		}
		if s.sqlite { // no row locks: a write takes the database's, which every writer waits for
			if _, err := tx.ExecContext(ctx, `UPDATE campaigns SET version = version WHERE id = ?`, campaign); err != nil {
				return err
			}
		}
		var h Held
		var err error
		if h.Campaign, err = s.campaignOn(ctx, tx, campaign); err != nil {
			return err
		}
		if h.Holdings, err = s.holdingsOn(ctx, tx, campaign); err != nil {
			return err
		}
		if h.Orders, err = s.confirmedOn(ctx, tx, campaign); err != nil {
			return err
		}
		err = tx.SelectContext(ctx, &h.Ended, tx.Rebind(`SELECT * FROM orders
			WHERE campaign_id = ? AND status IN ('failed', 'refunded', 'expired') AND updated_at_ms >= ?`), campaign, endedSince.UnixMilli())
		if err != nil {
			return fmt.Errorf("ended orders of %s: %w", campaign, err)
		}
		return fn(h)
	})
}

// RefundOrder moves a confirmed or paid order to refunded and takes its units off the campaign's
// and the buyer's totals, once. It returns the order's row, and whether this call refunded it;
// an order in another state is returned unchanged. The refunded row's reason stays "" until
// MarkRefunded says its units are back in Redis.
func (s *Store) RefundOrder(ctx context.Context, orderID string) (Order, bool, error) {
	var refunded bool
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		var campaign string
		err := tx.GetContext(ctx, &campaign, tx.Rebind(`SELECT campaign_id FROM orders WHERE order_id = ?`), orderID)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		// The campaign's lock comes before the order's, as in ConfirmOrders.
		if _, err := s.lockCampaign(ctx, tx, campaign); err != nil {
			return err
		}
		_, refunded, err = endOrder(ctx, tx, orderID, events.Refunded, "", time.Now())
		return err
	})
	if err != nil {
		return Order{}, false, fmt.Errorf("refund order %s: %w", orderID, err)
	}
	o, err := s.Order(ctx, orderID)
	return o, refunded, err
}

// giveBack takes an order's units off its campaign's sold and its buyer's bought.
func giveBack(ctx context.Context, tx *sqlx.Tx, o Order) error {
	if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE campaigns SET sold = sold - ? WHERE id = ?`), o.Quantity, o.CampaignID); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE purchases SET bought = bought - ? WHERE campaign_id = ? AND user_id = ?`),
		o.Quantity, o.CampaignID, o.UserID)
	return err
}

// PayOrder records the payment paymentID of a confirmed order whose window is open at now, and
// returns the order. The first final row wins: an order expired or refunded first is not paid.
// Refusals are *events.Error: OrderNotFound (no row: pending or unknown, the caller tells
// which), PaymentReused (paymentID paid another order), AlreadyPaid (paid with another
// payment), PaymentWindowClosed (expired, or past its pay_by), OrderNotPayable (failed,
// refunded, or of a campaign without a payment step), CampaignCancelled (refunded unpaid, of a
// cancelled campaign: its cancel refunded it). Paying again with the same paymentID
// returns the paid order, changed nothing.
func (s *Store) PayOrder(ctx context.Context, orderID, paymentID string, now time.Time) (o Order, changed bool, err error) {
	err = s.inTx(ctx, func(tx *sqlx.Tx) error {
		owner, err := claimPayment(ctx, tx, paymentID, orderID)
		if err != nil {
			return err
		}
		if owner == orderID {
			// A cancel refunds the campaign's confirmed orders in its own transaction
			// (ChangeCampaign), so an order of a cancelled campaign is not confirmed here.
			err := tx.GetContext(ctx, &o, tx.Rebind(`UPDATE orders SET status = 'paid', payment_id = ?, updated_at_ms = ?, payment_unannounced = TRUE
				WHERE order_id = ? AND status = 'confirmed' AND pay_by_ms > ? RETURNING *`),
				paymentID, now.UnixMilli(), orderID, now.UnixMilli())
			if err == nil {
				changed = true
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		if err := tx.GetContext(ctx, &o, tx.Rebind(`SELECT * FROM orders WHERE order_id = ?`), orderID); errors.Is(err, sql.ErrNoRows) {
			return events.Errorf(events.OrderNotFound, "order %q not found", orderID)
		} else if err != nil {
			return err
		}
		switch {
		// Before the owner's check: an order paid with the payment before payments named
		// one order per payment (store/schema.go) may not be its owner, and is paid still.
		case o.Status == events.Paid && o.PaymentID == paymentID:
			return nil
		case owner != orderID:
			return events.Errorf(events.PaymentReused, "payment %q paid order %q already; a payment pays one order", paymentID, owner)
		case o.Status == events.Paid:
			return events.Errorf(events.AlreadyPaid, "order %q is paid already, with another payment", orderID)
		case o.Status == events.Refunded && o.PaymentID == "":
			// Said so when the cancel of its campaign refunded it: the payer's answer is why,
			// and the payment service refunds the payer on it. Not for one refunded paid, whose
			// OrderRefunded names its payment already (a replay records that payment again).
			var cancelled int64
			if err := tx.GetContext(ctx, &cancelled, tx.Rebind(`SELECT cancelled_at_ms FROM campaigns WHERE id = ?`), o.CampaignID); err != nil {
				return err
			}
			if cancelled > 0 {
				return events.Errorf(events.CampaignCancelled, "campaign %q was cancelled; its orders are refunded, not paid", o.CampaignID)
			}
		case o.Status == events.Expired, o.Status == events.Confirmed && o.PayByMs > 0:
			return events.Errorf(events.PaymentWindowClosed, "order %q was not paid by %s; its units go back on sale", orderID,
				time.UnixMilli(o.PayByMs).UTC().Format(time.RFC3339))
		}
		return events.Errorf(events.OrderNotPayable, "order %q is %s and cannot be paid", orderID, o.Status)
	})
	if err != nil && events.ErrorCode(err) == events.Internal {
		err = fmt.Errorf("pay order %s: %w", orderID, err)
	}
	return o, changed, err
}

// NameRefundedPayment records paymentID, a payment the order was paid with before its refund,
// on order orderID, which the store holds refunded without one, and leaves the refund to finish
// again (its reason "": Refunding and UnfinishedRefunds list it), so that its OrderRefunded is
// announced again, naming the payment. It reports whether it changed the order; one refunded
// with a payment, or in another state, is left as it is. A payment that names another order is
// refused (events.PaymentReused), as PayOrder refuses it.
//
// A replay needs it: Redis keeps no payment, so an order the store lost comes back refunded as
// Redis ended it, without its payment, and marked finished; had Kafka refused the refund's
// announcement, and its compensator died before a sweep announced it again, nothing would
// name the payment to give back.
func (s *Store) NameRefundedPayment(ctx context.Context, orderID, paymentID string) (bool, error) {
	errUnchanged := errors.New("unchanged") // rolls the claim back
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		// The payment first, then the order, as PayOrder locks them.
		owner, err := claimPayment(ctx, tx, paymentID, orderID)
		if err != nil {
			return err
		}
		if owner != orderID {
			return events.Errorf(events.PaymentReused, "payment %q paid order %q already; a payment pays one order", paymentID, owner)
		}
		n, err := rowsAffected(tx.ExecContext(ctx, tx.Rebind(`UPDATE orders SET payment_id = ?, reason = ''
			WHERE order_id = ? AND status = 'refunded' AND payment_id = ''`), paymentID, orderID))
		if err == nil && n == 0 {
			return errUnchanged
		}
		return err
	})
	switch {
	case errors.Is(err, errUnchanged):
		return false, nil
	case err != nil && events.ErrorCode(err) == events.Internal:
		return false, fmt.Errorf("name the payment of refunded order %s: %w", orderID, err)
	}
	return err == nil, err
}

// claimPayment names orderID as the one order paymentID pays, unless the payment names an
// order already, and returns the order it names. A refusal rolls the claim back with the rest
// of the transaction. On PostgreSQL a claim of the same id by another transaction waits on the
// key until that one ends, then finds its order if it committed.
func claimPayment(ctx context.Context, tx *sqlx.Tx, paymentID, orderID string) (string, error) {
	n, err := rowsAffected(tx.ExecContext(ctx, tx.Rebind(`INSERT INTO payments (payment_id, order_id) VALUES (?, ?)
		ON CONFLICT (payment_id) DO NOTHING`), paymentID, orderID))
	if err != nil || n == 1 {
		return orderID, err
	}
	var owner string
	err = tx.GetContext(ctx, &owner, tx.Rebind(`SELECT order_id FROM payments WHERE payment_id = ?`), paymentID)
	return owner, err
}

// UnannouncedPayments returns up to limit paid orders whose OrderPaid Kafka may not have
// (MarkPaidAnnounced has not run for them) and that were paid at or before paidBy, in order id
// order from the first after after ("": from the first), read from the
// orders_paid_unannounced index. paidBy keeps out the payments whose own announcement may
// still be on its way; the order lets the sweeper page through the list (see
// UnfinishedRefunds).
func (s *Store) UnannouncedPayments(ctx context.Context, paidBy time.Time, after string, limit int) ([]Order, error) {
	var os []Order
	err := s.db.SelectContext(ctx, &os, s.db.Rebind(`SELECT * FROM orders WHERE status = 'paid' AND payment_unannounced
		AND updated_at_ms <= ? AND order_id > ? ORDER BY order_id LIMIT ?`), paidBy.UnixMilli(), after, limit)
	if err != nil {
		return nil, fmt.Errorf("unannounced payments: %w", err)
	}
	return os, nil
}

// MarkPaidAnnounced records that Kafka has the OrderPaid of a paid order. Marking an order
// again, or one not paid, changes nothing.
func (s *Store) MarkPaidAnnounced(ctx context.Context, orderID string) error {
	_, err := s.db.ExecContext(ctx, s.db.Rebind(`UPDATE orders SET payment_unannounced = FALSE
		WHERE order_id = ? AND status = 'paid' AND payment_unannounced`), orderID)
	if err != nil {
		return fmt.Errorf("mark the payment of order %s announced: %w", orderID, err)
	}
	return nil
}

// ExpiryKey is where an order stands in ExpiringOrders' list: by pay_by, then by order id (a
// batch of orders confirmed together shares its pay_by). The zero ExpiryKey is before every
// order.
type ExpiryKey struct {
	PayByMs int64
	OrderID string
}

// ExpiryKey returns where o stands in ExpiringOrders' list.
func (o Order) ExpiryKey() ExpiryKey { return ExpiryKey{o.PayByMs, o.OrderID} }

// ExpiringOrders returns up to limit orders to expire at now: confirmed, unpaid and past their
// pay_by, or expired already with their units not yet back in Redis (their reason is still "":
// an expiry that stopped between the store and Redis); in ExpiryKey order, from the first
// after after. The order is what lets the sweeper page through the list (see
// UnfinishedRefunds). By pay_by, not by order id alone: the orders_due index then reads the
// orders past their pay_by only, not every unpaid order of a sale still in its window. Each
// half of the list reads its own index (orders_due, orders_expiring_due) in that order, and
// the two pages merge.
func (s *Store) ExpiringOrders(ctx context.Context, now time.Time, after ExpiryKey, limit int) ([]Order, error) {
	var os []Order
	err := s.db.SelectContext(ctx, &os, s.db.Rebind(`SELECT * FROM (SELECT * FROM orders
			WHERE status = 'confirmed' AND pay_by_ms > 0 AND pay_by_ms <= ? AND (pay_by_ms, order_id) > (?, ?)
			ORDER BY pay_by_ms, order_id LIMIT ?) AS due
		UNION ALL SELECT * FROM (SELECT * FROM orders
			WHERE status = 'expired' AND reason = '' AND (pay_by_ms, order_id) > (?, ?)
			ORDER BY pay_by_ms, order_id LIMIT ?) AS unfinished
		ORDER BY pay_by_ms, order_id LIMIT ?`),
		now.UnixMilli(), after.PayByMs, after.OrderID, limit, after.PayByMs, after.OrderID, limit, limit)
	if err != nil {
		return nil, fmt.Errorf("orders to expire: %w", err)
	}
	return os, nil
}

// ExpireOrder moves a confirmed order that was not paid by its pay_by (at now) to expired and
// takes its units off the campaign's and the buyer's totals, once. It returns the order's row;
// an order paid, refunded or still in its window is returned unchanged. The expired row's
// reason stays "" until MarkUnpaid says its units are back in Redis.
func (s *Store) ExpireOrder(ctx context.Context, orderID string, now time.Time) (Order, error) {
	var o Order
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := tx.GetContext(ctx, &o, tx.Rebind(`SELECT * FROM orders WHERE order_id = ?`), orderID); err != nil {
			return err
		}
		if _, err := s.lockCampaign(ctx, tx, o.CampaignID); err != nil {
			return err
		}
		moved, ok, err := endOrder(ctx, tx, orderID, events.Expired, "", now)
		if err != nil || ok {
			o = moved
			return err
		}
		// Not moved: as it is now, under the lock, not as first read.
		return tx.GetContext(ctx, &o, tx.Rebind(`SELECT * FROM orders WHERE order_id = ?`), orderID)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return o, events.Errorf(events.OrderNotFound, "order %q not found", orderID)
	}
	if err != nil {
		return o, fmt.Errorf("expire order %s: %w", orderID, err)
	}
	return o, nil
}

// MarkUnpaid records that an expired order's units are back in Redis.
func (s *Store) MarkUnpaid(ctx context.Context, orderID string) error {
	return s.markBack(ctx, orderID, events.Expired, events.ReasonUnpaid)
}

// PaidUnits returns the units of a campaign's paid orders.
func (s *Store) PaidUnits(ctx context.Context, campaign string) (int64, error) {
	var n int64
	err := s.db.GetContext(ctx, &n, s.db.Rebind(`SELECT COALESCE(SUM(quantity), 0) FROM orders WHERE campaign_id = ? AND status = 'paid'`), campaign)
	if err != nil {
		return 0, fmt.Errorf("paid units of %s: %w", campaign, err)
	}
	return n, nil
}

// lockCampaign returns the campaign's per-user limit and, on PostgreSQL, holds the campaign's
// row lock until tx ends (sql.ErrNoRows if there is no such campaign). Every transaction that
// writes an order, a purchase or sold takes this lock first, so concurrent transactions queue on
// it instead of deadlocking on each other's order rows: without it, a batch holding the row
// (from its sold update) waits on an order another batch inserted, which waits on the row.
// SQLite has a single writer and no row locks.
func (s *Store) lockCampaign(ctx context.Context, tx *sqlx.Tx, id string) (int64, error) {
	q := `SELECT per_user_limit FROM campaigns WHERE id = ?`
	if !s.sqlite {
		q += ` FOR UPDATE`
	}
	var limit int64
	err := tx.GetContext(ctx, &limit, tx.Rebind(q), id)
	return limit, err
}

// inTx runs fn in a transaction and commits it, or rolls it back if fn fails.
func (s *Store) inTx(ctx context.Context, fn func(*sqlx.Tx) error) error {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

func rowsAffected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func isUniqueViolation(err error) bool {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return pqErr.Code == "23505"
	}
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}
