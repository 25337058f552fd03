package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// migrateLockTimeout is the tests' lock timeout: short, so that a test waits a few of them.
const migrateLockTimeout = 100 * time.Millisecond

// lockedTable is the table the last migration alters (ALTER TABLE orders ADD COLUMN …), which
// asks for an ACCESS EXCLUSIVE lock: what a reader's ACCESS SHARE blocks. waitForLockWait fails
// the tests, naming it, if a later last migration takes no such lock on it.
const lockedTable = "orders"

// TestMigrationLetsTheServiceRunWhileBlocked: a migration whose ALTER TABLE waits behind a long
// reader must not hold every other query on the table in the queue behind it. It waited with
// no bound, and a slow report during seckill migrate stopped every purchase's persistence for
// as long as the report ran. With a lock timeout it lets go, says so, and tries again: a third
// session's read is answered while the reader still holds its lock, and once the reader
// commits the migration completes.
func TestMigrationLetsTheServiceRunWhileBlocked(t *testing.T) {
	url := storetest.PostgresURL(t)
	s := openAt(t, url, store.Migrations()-1)
	db := openSQL(t, url)
	blocker := holdShareLock(t, db, lockedTable)

	var log lockedBuffer
	done := migrateAside(t, context.Background(), s, &log)
	waitForLockWait(t, db, lockedTable)

	// The bound is ten lock timeouts: the read may arrive while a retry waits, and waits out
	// at most one. Queued behind a migration that never lets go, it waits until the blocker
	// commits, which it does only after this read.
	bound := 10 * migrateLockTimeout
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	start := time.Now()
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+lockedTable).Scan(&n)
	cancel()
	if err != nil {
		t.Errorf("a read of %s while the migration waits for its lock: %v after %v; want it answered within %v, not queued behind the migration", lockedTable, err, time.Since(start).Round(time.Millisecond), bound)
	} else {
		t.Logf("a read of %s while the blocker holds its lock: answered in %v", lockedTable, time.Since(start).Round(time.Millisecond))
	}

	if err := blocker.Commit(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("migrate once the blocker committed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("migrate: not done 10 s after the blocker committed")
	}
	t.Logf("migrated %v after the blocker committed", time.Since(start).Round(time.Millisecond))
	if err := s.CheckSchema(context.Background()); err != nil {
		t.Errorf("after the migration: %v", err)
	}
	want := fmt.Sprintf("level=WARN msg=\"migration waits for a table lock another transaction holds; it let go so that the queries queued behind it run, and retries\" migration=%d", store.Migrations())
	if got := log.String(); !strings.Contains(got, want) || !strings.Contains(got, fmt.Sprintf("level=INFO msg=\"migration %d applied after waiting for its lock\"", store.Migrations())) {
		t.Errorf("the log:\n%s\nwant a WARN line %q, and an INFO line once it is applied", got, want)
	}
	if c := strings.Count(log.String(), "level=WARN"); c != 1 {
		t.Errorf("the log has %d WARN lines, want 1: a migration that keeps waiting warns every 10 s, not every try\n%s", c, log.String())
	}
}

// TestMigrationThatCannotGetItsLock: a migration whose context ends while it waits for its lock
// returns an error that says so, and leaves the schema as it was: the migration is undone as a
// whole, and a later migrate applies it.
func TestMigrationThatCannotGetItsLock(t *testing.T) {
	url := storetest.PostgresURL(t)
	s := openAt(t, url, store.Migrations()-1)
	db := openSQL(t, url)
	blocker := holdShareLock(t, db, lockedTable)

	var log lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := migrateAside(t, ctx, s, &log)
	waitForLockWait(t, db, lockedTable)
	// Its first lock timeout, if it comes, lets the error name the lock; without one the
	// migration waited on, and the context ends it anyway.
	poll(t, 3*time.Second, func() bool { return strings.Contains(log.String(), "level=WARN") })
	cancel()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("migrate: not done 10 s after its context ended")
	}
	for _, want := range []string{fmt.Sprintf("migrate %d: could not get its lock", store.Migrations()), "SQLSTATE 55P03"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("migrate whose context ended while it waited for its lock: %v; want an error saying %q", err, want)
		}
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("migrate whose context ended: %v; want it to wrap context.Canceled", err)
	}
	t.Logf("migrate whose context ended: %v", err)

	behind := fmt.Sprintf("at version %d", store.Migrations()-1)
	if err := s.CheckSchema(context.Background()); err == nil || !strings.Contains(err.Error(), behind) {
		t.Errorf("the schema after the migration gave up: %v; want it %s", err, behind)
	}
	var added int
	if err := db.QueryRow(`SELECT count(*) FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'orders' AND column_name = 'payment_unannounced'`).Scan(&added); err != nil {
		t.Fatal(err)
	}
	if added != 0 {
		t.Errorf("the migration that gave up left its column behind")
	}

	if err := blocker.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background(), store.LockTimeout(migrateLockTimeout)); err != nil {
		t.Fatalf("migrate once the blocker committed: %v", err)
	}
	if err := s.CheckSchema(context.Background()); err != nil {
		t.Errorf("after the migration: %v", err)
	}
}

// TestMigrateOptions: SQLite, one writer with its busy_timeout, migrates as before whatever the
// lock timeout (PostgreSQL's SET LOCAL is not SQL it knows); a lock timeout that is not positive,
// which PostgreSQL reads as no bound, is refused on both.
func TestMigrateOptions(t *testing.T) {
	storetest.EachURL(t, func(t *testing.T, url string) {
		ctx := context.Background()
		s := openAt(t, url, store.Migrations()-1)
		if err := s.Migrate(ctx, store.LockTimeout(0)); err == nil || !strings.Contains(err.Error(), "want a positive duration") {
			t.Errorf("Migrate with a lock timeout of 0: %v; want it refused", err)
		}
		var log lockedBuffer
		if err := s.Migrate(ctx, store.LockTimeout(time.Millisecond), store.MigrateLog(slog.New(slog.NewTextHandler(&log, nil)))); err != nil {
			t.Fatalf("migrate: %v", err)
		}
		if err := s.CheckSchema(ctx); err != nil {
			t.Errorf("after the migration: %v", err)
		}
		// Only that it was applied: no wait, no lock got.
		if got := strings.TrimSpace(log.String()); strings.Count(got, "\n") != 0 || !strings.Contains(got, `level=INFO msg="migration applied"`) {
			t.Errorf("a migration that waited for nothing logged:\n%s\nwant its one line, applied", log.String())
		}
	})
}

// migrateAside migrates s to the last version in a goroutine, with the tests' lock timeout and
// a text log to log, and returns where its result comes. The test's end waits for it.
func migrateAside(t *testing.T, ctx context.Context, s *store.Store, log *lockedBuffer) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		done <- s.Migrate(ctx, store.LockTimeout(migrateLockTimeout), store.MigrateLog(slog.New(slog.NewTextHandler(log, nil))))
	}()
	t.Cleanup(func() {
		cancel()
		<-ended
	})
	return done
}

// openSQL opens the database at url with database/sql, for sessions beside the store's.
func openSQL(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// holdShareLock opens a transaction that reads table, as a slow report does, and so holds its
// ACCESS SHARE lock until it ends; the test's end rolls it back if the test did not commit it.
func holdShareLock(t *testing.T, db *sql.DB, table string) *sql.Tx {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	if _, err := tx.Exec(`SELECT 1 FROM ` + table + ` LIMIT 1`); err != nil {
		t.Fatal(err)
	}
	return tx
}

// waitForLockWait returns once a session waits for a lock on table (pg_locks).
func waitForLockWait(t *testing.T, db *sql.DB, table string) {
	t.Helper()
	waiting := func() bool {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM pg_locks WHERE relation = $1::regclass AND NOT granted`, table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	if !poll(t, 5*time.Second, waiting) {
		t.Fatalf("no session waits for a lock on %s within 5 s: does the last migration still alter it?", table)
	}
}

// poll reports whether cond held within d, asking every few milliseconds.
func poll(t *testing.T, d time.Duration, cond func() bool) bool {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// lockedBuffer is a bytes.Buffer a migration's log writes to while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
