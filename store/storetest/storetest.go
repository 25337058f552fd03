// Package storetest opens throwaway stores for tests: a fresh schema on the PostgreSQL server
// named by SECKILL_TEST_POSTGRES_URL, or a fresh SQLite file.
package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/lib/pq"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
)

// PostgresEnv names the variable that points the tests at a PostgreSQL server.
const PostgresEnv = "SECKILL_TEST_POSTGRES_URL"

// PostgresURL returns a URL of a new, empty schema on the test server; the schema is dropped
// when the test ends. A missing or unreachable server fails the test with the reason.
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	base := os.Getenv(PostgresEnv)
	if base == "" {
		tb.Fatalf("%s is not set: start the test services with `deploy/local/services.sh up` and `eval $(deploy/local/services.sh env)`, or run `make test`", PostgresEnv)
	}
	admin, err := sql.Open("postgres", base)
	if err != nil {
		tb.Fatalf("open %s: %v", PostgresEnv, err)
	}
	defer admin.Close()
	schema := "t_" + strings.ToLower(events.NewID())
	if _, err := admin.Exec(`CREATE SCHEMA ` + schema); err != nil {
		tb.Fatalf("postgres at %s=%s is unreachable: %v", PostgresEnv, base, err)
	}
	tb.Cleanup(func() {
		db, err := sql.Open("postgres", base)
		if err != nil {
			return
		}
		defer db.Close()
		db.Exec(`DROP SCHEMA ` + schema + ` CASCADE`)
	})
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatalf("parse %s: %v", PostgresEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema) // lib/pq sends unknown parameters to the server as settings
	u.RawQuery = q.Encode()
	return u.String()
}

// SQLiteURL returns the URL of a new SQLite file in the test's temporary directory.
func SQLiteURL(tb testing.TB) string {
	tb.Helper()
	return "sqlite:" + filepath.Join(tb.TempDir(), "seckill.db")
}

// MustOpen opens and migrates the store at url and closes it when the test ends.
func MustOpen(tb testing.TB, url string) *store.Store {
	tb.Helper()
	s, err := store.Open(context.Background(), url)
	if err != nil {
		tb.Fatalf("open store: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return s
}

// Each runs fn once on PostgreSQL and once on SQLite, as named subtests, each with a fresh,
// migrated store: the conformance suite's entry point.
func Each(t *testing.T, fn func(t *testing.T, s *store.Store)) {
	t.Helper()
	EachURL(t, func(t *testing.T, url string) { fn(t, MustOpen(t, url)) })
}

// EachURL runs fn once with the URL of a fresh PostgreSQL schema and once with that of a fresh
// SQLite file, as named subtests, neither opened nor migrated: for a test that migrates itself.
func EachURL(t *testing.T, fn func(t *testing.T, url string)) {
	t.Helper()
	for _, db := range []struct {
		name string
		url  func(testing.TB) string
	}{{"postgres", PostgresURL}, {"sqlite", SQLiteURL}} {
		t.Run(db.name, func(t *testing.T) { fn(t, db.url(t)) })
	}
}

// Name returns a fresh campaign id for a test, so tests can share servers.
func Name(prefix string) string { return fmt.Sprintf("%s-%s", prefix, events.NewID()[14:]) }
