package main

import (
	"bytes"
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/store/storetest"
)

// TestMigrateLockTimeout: seckill migrate --lock-timeout bounds each wait of a migration for a
// table's lock, and a migrate stopped while it waits says that it could not get its lock. The
// blocker is a SHARE lock on schema_migrations, where every migration records itself.
func TestMigrateLockTimeout(t *testing.T) {
	url := storetest.PostgresURL(t)
	db, err := sql.Open("postgres", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	blocker, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback()
	if _, err := blocker.Exec(`LOCK TABLE schema_migrations IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"migrate", "--postgres-url", url, "--lock-timeout", "100ms", "--log-format", "text"}, &bytes.Buffer{}, &stderr)
	}()
	waiting := func() bool {
		select {
		case got := <-code:
			t.Fatalf("seckill migrate ended with exit %d before its wait for the lock ended, stderr %q", got, stderr.String())
		default:
		}
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM pg_locks WHERE relation = 'schema_migrations'::regclass AND NOT granted`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	// A wait that ends while the blocker holds on is a lock timeout: with --lock-timeout
	// 100ms it comes within a few polls, with the default of 5s not within the 3 s allowed.
	eventually(t, 10*time.Second, "migrate waits for the lock of schema_migrations", waiting)
	for deadline := time.Now().Add(3 * time.Second); waiting() && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	var got int
	select {
	case got = <-code:
	case <-time.After(10 * time.Second):
		t.Fatal("seckill migrate: not done 10 s after it was stopped")
	}
	if want := "could not get its lock, waited"; got != 1 || !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "for 100ms") {
		t.Errorf("seckill migrate --lock-timeout 100ms stopped while it waited: exit %d, stderr %q; want exit 1 saying %q … for 100ms", got, stderr.String(), want)
	}
}

// TestMigrateSaysWhatItApplies: seckill migrate logs each migration as it applies it, so that
// an operator sees how far a long one (an ALTER of a big table) has got and which one is slow,
// and a run with nothing to apply says so. It printed "migrate: schema is up to date" alone,
// whether it had applied every migration or none.
func TestMigrateSaysWhatItApplies(t *testing.T) {
	url := storetest.SQLiteURL(t)
	migrate := func() string {
		t.Helper()
		logged := captureStderr(t) // where it logs
		var out bytes.Buffer
		code := run(context.Background(), []string{"migrate", "--postgres-url", url, "--log-format", "text"}, &out, &out)
		log := logged()
		if code != 0 {
			t.Fatalf("seckill migrate: exit %d\n%s%s", code, out.String(), log)
		}
		return log + out.String()
	}
	if out := migrate(); !strings.Contains(out, "migration applied") || !strings.Contains(out, "version=1 ") {
		t.Errorf("seckill migrate of an empty store said %q; want each migration applied, from version 1", out)
	}
	if out := migrate(); strings.Contains(out, "migration applied") || !strings.Contains(out, "nothing to apply") {
		t.Errorf("seckill migrate run again said %q; want nothing to apply", out)
	}
}
