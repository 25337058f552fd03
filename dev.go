package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"golang.org/x/sync/errgroup"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

func runDev(ctx context.Context, args []string, stdout io.Writer) error {
	return dev(ctx, args, stdout, writeDevAddrs)
}

// dev is runDev with what writes dev.json, for a test to fail it as a full disk does.
func dev(ctx context.Context, args []string, stdout io.Writer, writeAddrs func(dataDir string, a devAddrs) error) error {
	f := newFlags("dev", "Run api, consumer and compensator in one process on embedded Kafka (kfake, kept in\n--data-dir), Redis (miniredis, in memory: every start freezes the campaigns and\nrebuilds them from the store) and SQLite (in --data-dir). Nothing else to install.", stdout)
	addr := f.listenAddr("addr", "127.0.0.1:8080", "listen address of the API")
	dataDir := f.String("data-dir", devDataDir, "where the Kafka log and the SQLite database live, and the addresses operator commands read with --dev")
	adminToken := f.secret("admin-token", "bearer token of the admin endpoints (default: one kept in --data-dir, printed at start)")
	ttl := f.duration("reservation-ttl", 2*time.Minute, false, "how long a reservation may stay pending before the sweeper releases it")
	sweep := f.duration("sweep-interval", time.Second, false, "how often the sweeper looks for expired reservations")
	logFormat := f.logFormat("text") // a terminal's, by default
	guards := f.guards(true)
	if err := f.parse(args); err != nil {
		return err
	}
	log := newLogger(*logFormat, os.Stderr)
	cfg := api.Config{Topics: events.NewTopics(events.DefaultPrefix), ReservationTTL: *ttl, Logger: log}
	if err := os.MkdirAll(*dataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	lock, err := lockDev(*dataDir)
	if err != nil {
		return err
	}
	// Released after every other deferred call, the removal of dev.json among them: dev.json
	// is written and removed only by the dev that holds the lock.
	defer lock.Close()
	if *adminToken == "" {
		// Kept with the data, so the console page and an operator's TOKEN keep working across
		// restarts of make run.
		kept, err := keptSecret(filepath.Join(*dataDir, "admin-token"))
		if err != nil {
			return err
		}
		*adminToken = kept
	}
	cfg.AdminToken = *adminToken
	if *guards.orderIDSecret == "" {
		// Kept with the data, so a keyed retry after a restart names the same order.
		kept, err := keptSecret(filepath.Join(*dataDir, "order-id-secret"))
		if err != nil {
			return err
		}
		*guards.orderIDSecret = kept
	}
	if *guards.secret == "" {
		// Kept too, so that a token from seckill token --dev works across restarts. Buyers may
		// name themselves with X-User-ID as well (dev: on).
		kept, err := keptSecret(filepath.Join(*dataDir, "jwt-secret"))
		if err != nil {
			return err
		}
		*guards.secret = kept
	}
	if err := guards.apply(&cfg, log); err != nil {
		return err
	}

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(filepath.Join(*dataDir, "kafka")))
	if err != nil {
		return fmt.Errorf("embedded kafka: %w", err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return fmt.Errorf("embedded redis: %w", err)
	}
	defer mr.Close()
	r := lua.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}))
	defer r.Close()
	if err := r.Load(ctx); err != nil {
		return err
	}

	st, err := store.Open(ctx, "sqlite:"+filepath.Join(*dataDir, "seckill.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		return err
	}

	topics := events.NewTopics(events.DefaultPrefix)
	if err := createTopics(ctx, brokers, topics, 3, 1, log); err != nil {
		return err
	}
	producer, err := apiProducer(brokers, topics, produceLinger)
	if err != nil {
		return err
	}
	defer events.FlushAndClose(producer)
	cons, err := consumer.New(consumer.Config{Brokers: brokers, Topics: topics, Logger: log}, st, r)
	if err != nil {
		return err
	}
	defer cons.Close()
	comp, err := compensator.New(compensator.Config{Brokers: brokers, Topics: topics, SweepInterval: *sweep, RebuildGrace: time.Second, Logger: log}, st, r)
	if err != nil {
		return err
	}
	defer comp.Close()
	cfg.Brokers = brokers
	srv := api.New(cfg, st, r, producer)
	defer srv.Close()

	ln, err := listen("addr", *addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%w (make run: SECKILL_ADDR=127.0.0.1:8081 make run)", err)
	}
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx := errgroup.WithContext(ctx)
	// The consumer and the compensator stop after the api, once the consumer has stored what the
	// api queued until its last answer: miniredis ends with this process, and an order left in
	// Kafka would stay unconfirmed until the next start, which confirms it where Redis lacks it.
	work, stopWork := context.WithCancel(context.WithoutCancel(gctx))
	defer stopWork()
	g.Go(func() error { return cons.Run(work) })
	// A start that fails from here stops what it started, in order, as a Ctrl-C does: the api
	// (which has not served), then the consumer, waited for before the deferred calls close the
	// servers it runs on.
	abort := func(err error) error {
		ln.Close()
		stop()
		stopWork()
		return errors.Join(err, g.Wait())
	}
	// miniredis starts empty: the start-up rebuild (which waits for the consumer) puts the
	// store's campaigns back on sale before the api answers, so ready means ready.
	if err := comp.CheckRedis(gctx); err != nil {
		return abort(fmt.Errorf("start-up rebuild: %w", err))
	}
	dbPath, err := filepath.Abs(filepath.Join(*dataDir, "seckill.db"))
	if err != nil {
		return abort(err)
	}
	addrs := devAddrs{RedisURL: "redis://" + mr.Addr() + "/0", StoreURL: "sqlite:" + dbPath, KafkaBrokers: strings.Join(brokers, ","),
		APIURL: "http://" + ln.Addr().String(), AdminToken: *adminToken, JWTSecret: *guards.secret, JWTIssuer: *guards.issuer, JWTAudience: *guards.audience}
	if err := writeAddrs(*dataDir, addrs); err != nil {
		return abort(err)
	}
	defer os.Remove(devAddrsFile(*dataDir))
	printQuickStart(stdout, "http://"+ln.Addr().String(), *adminToken, *dataDir, addrs)
	g.Go(func() error {
		defer stopWork()
		if err := srv.Serve(gctx, ln); err != nil || ctx.Err() == nil { // a role failed: no wait
			return err
		}
		wctx, cancel := context.WithTimeout(context.Background(), devDrainWait)
		defer cancel()
		if err := comp.WaitConsumed(wctx); err != nil {
			log.Warn("stopping before the consumer stored every order the api queued; the next start stores them", "err", err)
		}
		return nil
	})
	g.Go(func() error { return comp.Run(work) })
	err = g.Wait()
	if err != nil && ctx.Err() == nil { // stopped by itself: something failed
		log.Error("seckill dev stopped", "err", err)
	} else {
		log.Info("seckill dev stopped", "err", err)
	}
	return err
}

// devDrainWait bounds how long a stopping dev waits for its consumer to store what the api
// queued: a Ctrl-C must stay prompt, and Kafka keeps the rest for the next start.
const devDrainWait = 5 * time.Second

// devLockFile is the file whose lock a running seckill dev holds in its data directory.
func devLockFile(dataDir string) string { return filepath.Join(dataDir, "dev.lock") }

// lockDev takes the lock of dataDir for a seckill dev, held until the returned file is closed or
// the process ends, however it ends: two devs on one directory would share the embedded Kafka's
// log and the SQLite file, and each would overwrite the other's dev.json. A dev killed with -9
// leaves dev.json behind but not the lock (the kernel drops it), so the next dev starts and
// overwrites dev.json.
func lockDev(dataDir string) (*os.File, error) {
	f, err := os.OpenFile(devLockFile(dataDir), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock the data dir: %w", err)
	}
	// A dev holds the lock for its life, devRunning for an instant: a few tries tell them apart.
	for range 5 {
		if err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err == nil {
		// A dev.json here is a killed dev's: its servers are gone. Removed now, not when this
		// dev writes its own after the start-up rebuild, so --dev does not dial them meanwhile.
		if err := os.Remove(devAddrsFile(dataDir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			f.Close()
			return nil, fmt.Errorf("remove the addresses of a killed dev: %w", err)
		}
		return f, nil
	}
	f.Close()
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, fmt.Errorf("lock %s: %w", devLockFile(dataDir), err)
	}
	msg := "another seckill dev is running on " + dataDir
	// dev.json names its api once it is up; until then the lock is all there is.
	if a, err := readDevAddrs(dataDir); err == nil && a.APIURL != "" {
		msg += " (api at " + a.APIURL + ")"
	}
	return nil, errors.New(msg)
}

// devRunning reports whether a seckill dev holds the lock of dataDir: whether its dev.json, if
// there is one, names servers that are there. It takes a shared lock and lets go at once, so
// operator commands asking at the same time do not see each other as a dev.
func devRunning(dataDir string) bool {
	f, err := os.Open(devLockFile(dataDir))
	if err != nil {
		return false // no dev ever ran here
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB) != nil
}

// keptSecret returns the secret in path, writing a new one there first if there is none.
func keptSecret(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(b) >= api.MinSecretLen {
		return string(b), nil
	}
	s := randomToken()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		return "", fmt.Errorf("keep a secret in %s: %w", path, err)
	}
	return s, nil
}

func randomToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// writeDevAddrs writes a for the operator commands' --dev. The file holds the admin token: it is
// written under a new name (os.CreateTemp makes it the owner's only) and renamed into place, so a
// dev.json left world-readable by an older seckill or a killed dev never receives the token, and
// a reader never sees half of it.
func writeDevAddrs(dataDir string, a devAddrs) error {
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dataDir, "dev.json.*")
	if err != nil {
		return fmt.Errorf("write the addresses for --dev: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err = errors.Join(err, f.Close()); err == nil {
		err = os.Rename(f.Name(), devAddrsFile(dataDir))
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write the addresses for --dev: %w", err)
	}
	return nil
}

func printQuickStart(w io.Writer, base, token, dataDir string, a devAddrs) {
	// Operator commands find this dev by its data directory: the default one from the module's
	// directory, any other from anywhere.
	dev := "--dev"
	if dataDir != devDataDir {
		if abs, err := filepath.Abs(dataDir); err == nil {
			dataDir = abs
		}
		dev += " --data-dir " + shellQuote(dataDir)
	}
	fmt.Fprintf(w, `seckill dev: api at %[1]s, state in %[3]s (Ctrl-C stops and drains)
console: %[8]s
admin token: %[2]s
embedded servers: redis %[4]s, kafka %[5]s, store %[6]s
operator commands reach them with %[7]s:
  go run . audit %[7]s        go run . replay %[7]s --from start        go run . compensate %[7]s --order <order_id>
a sale for the console to show: make demo (go run . demo %[7]s) in another terminal

  curl -s -X POST %[1]s/v1/campaigns -H 'Authorization: Bearer %[2]s' \
       -H 'Content-Type: application/json' -d '{"id":"demo","name":"Demo sale","stock":100,"per_user_limit":2}'
  curl -s -X POST %[1]s/v1/campaigns/demo/purchases -H 'X-User-ID: alice' \
       -H 'Content-Type: application/json' -H 'Idempotency-Key: first-try' -d '{"quantity":1}'
  curl -s -X POST %[1]s/v1/campaigns/demo/purchases -H "Authorization: Bearer $(go run . token %[7]s --user bob)" \
       -H 'Content-Type: application/json' -d '{"quantity":1}'
  curl -s %[1]s/v1/orders/<order_id> -H 'X-User-ID: alice'
  curl -sN %[1]s/v1/orders/<order_id>/events -H 'X-User-ID: alice'
  curl -s %[1]s/v1/campaigns/demo

`, base, token, dataDir, a.RedisURL, a.KafkaBrokers, a.StoreURL, dev, consoleLink(base, token))
}

// shellQuote returns s as one word of a POSIX shell's command line: as it is if no character
// of it is special to the shell, in single quotes otherwise, where a single quote of s closes
// the quoting, is escaped, and opens it again:
//
//	it's here → 'it'\''s here'
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// consoleLink is the address of the console at base that signs the page in with token. The
// token rides in the fragment, which no request carries, escaped so that any token (one given
// with --admin-token may hold '&', '%' or '#') reaches the page as it is.
func consoleLink(base, token string) string {
	return base + "/console#" + url.Values{"token": {token}}.Encode()
}
