package store_test

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua/luatest"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestOpenGivesUpOnASilentServer: a server that accepts the connection and never answers (a
// PostgreSQL host stalled mid-failover, a proxy whose backend is gone) fails Open, so that a
// role waiting for its store retries, says so, and stops when told. lib/pq reads the start-up
// answer with no deadline and without the context: Open waited forever, deaf to SIGTERM.
func TestOpenGivesUpOnASilentServer(t *testing.T) {
	addr, hangUp := luatest.Silent(t)
	done := make(chan error, 1)
	go func() {
		_, err := store.Open(context.Background(), "postgres://u:p@"+addr+"/db?sslmode=disable")
		done <- err
	}()
	defer func() { // unblocks an Open that still waits, so that the test ends
		hangUp()
		recvWithin(t, done, "Open (its server's connections closed)")
	}()
	select {
	case err := <-done:
		done <- err
		if err == nil {
			t.Fatal("Open of a server that never answered succeeded")
		}
		t.Logf("Open: %v", err)
	case <-time.After(time.Minute): // a hang, not a slow answer: the fix gives up after 10s
		t.Fatal("Open still waits for a server that never answers, a minute on")
	}
}

// TestOpenOfAnUnopenableSQLiteFileIsPermanent: a SQLite path SQLite cannot open (its directory
// does not exist, or it names a directory) or a file that is not a database is a setting no
// wait mends. A role waits for its store with events.Retry: the error must stop the wait, not
// be retried with a WARN every few seconds for as long as the process lives.
func TestOpenOfAnUnopenableSQLiteFileIsPermanent(t *testing.T) {
	dir := t.TempDir()
	notADB := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notADB, []byte("not a database, but long enough to have a header of sorts.......\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "missing", "seckill.db"), dir, notADB} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		tries := 0
		err := events.Retry(ctx, slog.New(slog.DiscardHandler), "open the store", func() error {
			tries++
			st, err := store.Open(ctx, "sqlite:"+path)
			if err == nil {
				st.Close()
			}
			return err
		})
		cancel()
		if err == nil || tries != 1 {
			t.Errorf("sqlite:%s: opened %d times, then %v; want one failed try", path, tries, err)
		}
	}
}

// TestOpenRefusedIsPermanent: a PostgreSQL URL the server refuses at the start (a wrong
// password or user, a database that does not exist, an SSL mode the server does not offer, a
// setting of its query it does not know or a value it does not take) is refused the same way on
// every try: the error stops a role's wait for its store rather than being retried with a WARN
// every few seconds for ever.
func TestOpenRefusedIsPermanent(t *testing.T) {
	base := storetest.PostgresURL(t)
	for _, change := range []string{"password=wrong-password", "user=nobody-here", "database=no_such_db",
		"sslmode=require", "statement_timeuot=5s", "statement_timeout=abc"} {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		k, v, _ := strings.Cut(change, "=")
		switch k {
		case "password":
			u.User = url.UserPassword(u.User.Username(), v)
		case "user":
			p, _ := u.User.Password()
			u.User = url.UserPassword(v, p)
		case "database":
			u.Path = "/" + v
		default:
			q := u.Query()
			q.Set(k, v)
			u.RawQuery = q.Encode()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		tries := 0
		err = events.Retry(ctx, slog.New(slog.DiscardHandler), "open the store", func() error {
			tries++
			st, err := store.Open(ctx, u.String())
			if err == nil {
				st.Close()
			}
			return err
		})
		cancel()
		if err == nil || tries != 1 {
			t.Errorf("%s: opened %d times, then %v; want one failed try", change, tries, err)
		}
	}
}

// TestOpenSQLitePathAsGiven: sqlite:PATH opens the file at PATH whatever characters its
// directories hold. The path went into a file: URI as it was, and SQLite read '#' as the start
// of a fragment, '?' as a query and '%' as an escape: seckill dev --data-dir 'x#y' kept its
// database in a file x beside the directory, shared with any other 'x#…', and the --dev
// commands, which name the file by its absolute path, opened another one for a project cloned
// under such a directory.
func TestOpenSQLitePathAsGiven(t *testing.T) {
	for _, name := range []string{"a#b", "a?b", "100%25", "a b"} {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "seckill.db")
		st, err := store.Open(context.Background(), "sqlite:"+path)
		if err != nil {
			t.Errorf("%q: %v", name, err)
			continue
		}
		err = st.Migrate(context.Background())
		st.Close()
		if err != nil {
			t.Errorf("%q: migrate: %v", name, err)
		}
		if _, err := os.Stat(path); err != nil {
			entries, _ := os.ReadDir(filepath.Dir(dir))
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Errorf("directory %q: no database at %s (%v); beside it: %v", name, path, err, names)
		}
	}
}
