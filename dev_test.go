package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
)

// TestConsoleLink: the printed console link gives the page the admin token as it is, whatever
// it holds; the page reads the fragment as a query (URLSearchParams).
func TestConsoleLink(t *testing.T) {
	for _, token := range []string{"0123abcdef", "a&token=b", "100%", "x#y", "p+q r"} {
		link := consoleLink("http://127.0.0.1:8080", token)
		u, err := url.Parse(link)
		if err != nil {
			t.Fatalf("%q: %v", link, err)
		}
		q, err := url.ParseQuery(u.EscapedFragment())
		if err != nil || q.Get("token") != token || u.Path != "/console" {
			t.Errorf("token %q: link %s gives the page %q at %s (%v)", token, link, q.Get("token"), u.Path, err)
		}
	}
}

// TestDevRestart runs seckill dev twice on one data directory, as `make run` would: the second
// start finds an empty miniredis, freezes the campaign, rebuilds it from SQLite, and sells again
// with what the first run sold still sold, and the admin token and the buyers' token secret are
// the ones it kept in the data directory.
func TestDevRestart(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	base := "http://" + addr
	start := func() func() {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		var out bytes.Buffer
		go func() {
			defer wg.Done()
			if code := run(ctx, []string{"dev", "--addr", addr, "--data-dir", dir}, &out, &out); code != 0 {
				t.Errorf("dev exited %d:\n%s", code, out.String())
			}
		}()
		eventually(t, 30*time.Second, "dev answers", func() bool {
			resp, err := http.Get(base + "/healthz")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil
		})
		return func() { cancel(); wg.Wait() }
	}
	post := func(path, user, body string, hdr ...string) (int, map[string]any) {
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if user != "" {
			req.Header.Set("X-User-ID", user)
		}
		if len(hdr) == 2 {
			req.Header.Set(hdr[0], hdr[1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	remaining := func() any {
		resp, err := http.Get(base + "/v1/campaigns/demo")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return m["remaining"]
	}

	adminToken := func() string {
		a, err := readDevAddrs(dir)
		if err != nil || a.AdminToken == "" {
			t.Fatalf("the running dev's admin token: %+v, %v", a, err)
		}
		return a.AdminToken
	}

	stop := start()
	token := adminToken()
	if code, body := post("/v1/campaigns", "", `{"id":"demo","name":"Demo","stock":10,"per_user_limit":2}`, "Authorization", "Bearer "+token); code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	eventually(t, 30*time.Second, "a first purchase", func() bool {
		code, _ := post("/v1/campaigns/demo/purchases", "alice", `{"quantity":2}`)
		return code == 202
	})
	eventually(t, 30*time.Second, "alice's order is confirmed", func() bool { return remaining() == 8.0 })
	// The operator commands reach the running dev's embedded servers with --dev.
	var audit bytes.Buffer
	if code := run(context.Background(), []string{"audit", "--dev", "--data-dir", dir}, &audit, &audit); code != 0 ||
		!strings.Contains(audit.String(), "campaign demo") || !strings.Contains(audit.String(), "every invariant holds") {
		t.Errorf("audit --dev exited %d:\n%s", code, audit.String())
	}
	// A buyer's bearer token from seckill token --dev, signed with the secret the dev keeps.
	var tok bytes.Buffer
	if code := run(context.Background(), []string{"token", "--dev", "--data-dir", dir, "--user", "carol"}, &tok, &tok); code != 0 {
		t.Fatalf("token --dev exited %d:\n%s", code, tok.String())
	}
	stop()
	// With no dev running on it, --dev says so.
	audit.Reset()
	if code := run(context.Background(), []string{"audit", "--dev", "--data-dir", dir}, &audit, &audit); code == 0 || !strings.Contains(audit.String(), "no seckill dev is running") {
		t.Errorf("audit --dev with no dev running exited %d:\n%s", code, audit.String())
	}

	stop = start()
	defer stop()
	if got := adminToken(); got != token {
		t.Errorf("the admin token changed across the restart: %q, then %q", token, got)
	}
	var code int
	eventually(t, 30*time.Second, "sales resume after the rebuild", func() bool {
		code, _ = post("/v1/campaigns/demo/purchases", "bob", `{"quantity":1}`)
		return code == 202
	})
	// alice's two units survived the restart: her limit is reached, 7 units are left.
	if code, body := post("/v1/campaigns/demo/purchases", "alice", `{"quantity":1}`); code != 409 {
		t.Errorf("alice past her limit after the restart: %d %v", code, body)
	}
	eventually(t, 30*time.Second, "bob's unit is taken", func() bool { return remaining() == 7.0 })
	// The token minted before the restart still names carol: the dev kept its secret.
	if code, body := post("/v1/campaigns/demo/purchases", "", `{"quantity":1}`, "Authorization", "Bearer "+strings.TrimSpace(tok.String())); code != 202 {
		t.Errorf("carol's bearer token from before the restart: %d %v", code, body)
	}
}

// TestDevOneAtATime: a second seckill dev on the data directory of a running one stops at once,
// naming the first's api, and leaves it its dev.json, so --dev still reaches the first. A lock
// that is let go, as the kernel does for a dev killed with -9, is taken by the next dev.
func TestDevOneAtATime(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	out := startDev(t, ctx, addr, dir)
	defer cancel()
	eventually(t, 60*time.Second, "seckill dev is up", func() bool { return strings.Contains(out.String(), "console: ") })
	if !devRunning(dir) {
		t.Error("devRunning says no dev runs on the directory of a running dev")
	}

	second, stop := context.WithTimeout(context.Background(), 20*time.Second)
	defer stop()
	var out2 bytes.Buffer
	code := run(second, []string{"dev", "--addr", freeAddr(t), "--data-dir", dir}, &out2, &out2)
	want := "another seckill dev is running on " + dir + " (api at http://" + addr + ")"
	if code != 1 || second.Err() != nil || !strings.Contains(out2.String(), want) {
		t.Errorf("a second dev on the same directory exited %d (after its deadline: %v):\n%s\nwant 1 at once: %s", code, second.Err() != nil, out2.String(), want)
	}
	if a, err := readDevAddrs(dir); err != nil || a.APIURL != "http://"+addr {
		t.Errorf("dev.json after the second dev: %+v, %v: want the first's api", a, err)
	}
	var audit bytes.Buffer
	if code := run(context.Background(), []string{"audit", "--dev", "--data-dir", dir}, &audit, &audit); code != 0 {
		t.Errorf("audit --dev of the first dev exited %d:\n%s", code, audit.String())
	}

	cancel()
	eventually(t, 30*time.Second, "the first dev lets go of its lock", func() bool { return !devRunning(dir) })
	// What a dev killed with -9 leaves: its dev.json, and no lock.
	if err := writeDevAddrs(dir, devAddrs{APIURL: "http://" + addr}); err != nil {
		t.Fatal(err)
	}
	if devRunning(dir) {
		t.Error("devRunning says a dev runs on a directory whose dev is gone")
	}
	var stale bytes.Buffer
	if code := run(context.Background(), []string{"audit", "--dev", "--data-dir", dir}, &stale, &stale); code != 1 || !strings.Contains(stale.String(), "is not running (its dev.json is left") {
		t.Errorf("audit --dev with a stale dev.json exited %d:\n%s", code, stale.String())
	}

	f, err := lockDev(dir)
	if err != nil {
		t.Fatalf("lock after the first dev stopped: %v", err)
	}
	f.Close()
}

// TestDevPortTaken: a seckill dev whose address another process holds stops at once and says
// how to give it another, make run included (it passes no flags: SECKILL_ADDR is the way).
func TestDevPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	code := run(ctx, []string{"dev", "--addr", ln.Addr().String(), "--data-dir", t.TempDir()}, &out, &out)
	want := "give another with --addr (make run: SECKILL_ADDR=127.0.0.1:8081 make run)"
	if code != 1 || ctx.Err() != nil || !strings.Contains(out.String(), want) {
		t.Errorf("seckill dev on a taken port exited %d (after its deadline: %v):\n%s\nwant 1 at once, saying: %s", code, ctx.Err() != nil, out.String(), want)
	}
}

// TestMakeRunCtrlC runs make run as a terminal does and stops it with Ctrl-C: SIGINT to the
// whole foreground process group. seckill dev drains and exits 0, and make must not call that
// a failure: go run exits 1 whenever it was interrupted, whatever its program did, and make
// then ended a clean stop with "make: *** [Makefile:10: run] Error 1".
func TestMakeRunCtrlC(t *testing.T) {
	out, ctrlC := makeJob(t, "run", "SECKILL_ADDR="+freeAddr(t), "SECKILL_DATA_DIR="+t.TempDir())
	// The first make run compiles seckill.
	eventually(t, 5*time.Minute, "make run is up", func() bool { return strings.Contains(out.String(), "console: ") })
	// The drains take 15 s at most.
	waitErr := ctrlC(2 * time.Minute)
	// make dies of the SIGINT itself, as any make interrupted in a terminal does, and the shell
	// says nothing of that; what must not be there is make's report of a failed recipe.
	if got := out.String(); strings.Contains(got, "make: ***") || !strings.Contains(got, `"seckill dev stopped" err=<nil>`) {
		t.Errorf("make run after Ctrl-C (%v): want seckill dev stopped cleanly and no error from make:\n%s", waitErr, got)
	}
}

// makeJob starts make target as a terminal starts a job: in a process group of its own, with
// env added and a binary of the test's own. ctrlC sends SIGINT to the whole group, as a
// terminal's Ctrl-C does, and returns make's exit, failing the test if make still runs after
// wait: a make that does not stop would hang the whole run until go test's timeout, with no
// word of which test. The cleanup kills the group if it still runs.
func makeJob(t *testing.T, target string, env ...string) (out *syncBuffer, ctrlC func(wait time.Duration) error) {
	t.Helper()
	mk, err := exec.LookPath("make")
	if err != nil {
		t.Fatal("no make: install Debian's make package (.ci/run does)")
	}
	out = &syncBuffer{}
	cmd := exec.Command(mk, target, "BIN="+filepath.Join(t.TempDir(), "seckill"))
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	group := -cmd.Process.Pid
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			syscall.Kill(group, syscall.SIGKILL)
			<-exited
		}
	})
	return out, func(wait time.Duration) error {
		t.Helper()
		if err := syscall.Kill(group, syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case <-exited:
			return waitErr
		case <-time.After(wait):
			t.Fatalf("make %s still runs %v after Ctrl-C:\n%s", target, wait, out.String())
			return nil
		}
	}
}

// TestDevCtrlCConfirmsWhatItAccepted: Ctrl-C in the middle of a burst of purchases. The consumer
// stopped with the api, so the orders the api queued in its last moments stayed in the
// embedded Kafka, unconfirmed, while their reservations died with the in-memory Redis: a buyer
// told 202 waited for a next `make run`, which then warned "the store holds orders confirmed
// that Redis does not; see the audit's I2" of them. Every accepted order is in the store,
// confirmed, when seckill dev returns.
func TestDevCtrlCConfirmsWhatItAccepted(t *testing.T) {
	dir, addr := t.TempDir(), freeAddr(t)
	base := "http://" + addr
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, []string{"dev", "--addr", addr, "--data-dir", dir}, &out, &out) }()
	eventually(t, 30*time.Second, "dev answers", func() bool {
		a, err := readDevAddrs(dir)
		return err == nil && a.AdminToken != ""
	})
	a, _ := readDevAddrs(dir)
	post := func(path, user, body string) (int, map[string]any) {
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User-ID", user)
		req.Header.Set("Authorization", "Bearer "+a.AdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	if code, body := post("/v1/campaigns", "", `{"id":"burst","name":"Burst","stock":1000,"per_user_limit":1}`); code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	var (
		mu       sync.Mutex
		accepted []string
		wg       sync.WaitGroup
		first    sync.Once
	)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, body := post("/v1/campaigns/burst/purchases", "buyer"+strconv.Itoa(i), `{"quantity":1}`); code == 202 {
				first.Do(cancel) // Ctrl-C while the others are in flight: the api drains them
				mu.Lock()
				accepted = append(accepted, body["order_id"].(string))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if code := <-exited; code != 0 {
		t.Fatalf("dev exited %d:\n%s", code, out.String())
	}
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(dir, "seckill.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var unconfirmed []string
	for _, id := range accepted {
		if o, err := st.Order(context.Background(), id); err != nil || o.Status != events.Confirmed {
			unconfirmed = append(unconfirmed, fmt.Sprintf("%s %q %v", id, o.Status, err))
		}
	}
	if len(accepted) == 0 || len(unconfirmed) > 0 {
		t.Errorf("after Ctrl-C, %d of %d accepted orders are not confirmed in the store:\n%s", len(unconfirmed), len(accepted), strings.Join(unconfirmed, "\n"))
	}
}

// TestDevStartingAfterKill: a dev killed with -9 leaves its dev.json; the next dev on the
// directory holds the lock from its start, seconds before it writes its own dev.json (the
// start-up rebuild). Meanwhile --dev read the dead one's addresses and dialled them: "audit:
// open redis redis://127.0.0.1:35235/0: ... connection refused: nothing answers there; ... or
// give --dev to reach make run", with --dev given; and a second dev named the dead api as the
// running one's.
func TestDevStartingAfterKill(t *testing.T) {
	dir := t.TempDir()
	if err := writeDevAddrs(dir, devAddrs{RedisURL: "redis://127.0.0.1:1/0", APIURL: "http://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	lock, err := lockDev(dir) // what a starting dev holds before it writes its dev.json
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if a, err := readDevAddrs(dir); err == nil || !strings.Contains(err.Error(), "is starting") {
		t.Errorf("--dev while a dev starts after one was killed: %+v, %v: want no addresses, and that it is starting", a, err)
	}
	if _, err := lockDev(dir); err == nil || strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("a second dev while the first starts: %v: want refused, naming no dead api", err)
	}
}

// TestMakeDemoCtrlC: Ctrl-C in make demo's terminal stops the crowd, and the demo, which runs
// until stopped, exits 0 with its summary. make must not call that a failure: make demo ran
// go run, which exits 1 whenever it was interrupted, and make ended the stop with
// "make: *** [Makefile:19: demo] Error 1", as make run did before it ran the built binary.
func TestMakeDemoCtrlC(t *testing.T) {
	dir, addr := t.TempDir(), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dev := startDev(t, ctx, addr, dir)
	eventually(t, 60*time.Second, "seckill dev is up", func() bool { return strings.Contains(dev.String(), "console: ") })
	out, ctrlC := makeJob(t, "demo", "SECKILL_DATA_DIR="+dir)
	// The first make demo compiles seckill.
	eventually(t, 5*time.Minute, "make demo sells", func() bool { return strings.Contains(out.String(), "demo: campaign ") })
	time.Sleep(time.Second) // Ctrl-C a second into the sale
	ctrlC(time.Minute)
	if got := out.String(); strings.Contains(got, "make: ***") || !strings.Contains(got, " purchases: ") {
		t.Errorf("make demo after Ctrl-C: want its summary and no error from make:\n%s", got)
	}
}

// TestDevStopsWhatItStartedWhenDevJSONFails: a dev that cannot write its dev.json (a full disk,
// a read-only data dir) returned the error at once, leaving its consumer running and its api's
// address held, with the embedded servers closed under them. It stops what it started, as on
// Ctrl-C, and returns the reason.
func TestDevStopsWhatItStartedWhenDevJSONFails(t *testing.T) {
	dir, addr := t.TempDir(), freeAddr(t)
	full := errors.New("write /data/dev.json.123: no space left on device")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := dev(ctx, []string{"--addr", addr, "--data-dir", dir}, &out, func(string, devAddrs) error { return full })
	if !errors.Is(err, full) || ctx.Err() != nil {
		t.Errorf("dev whose dev.json cannot be written returned %v (after its deadline: %v), want at once: %v", err, ctx.Err() != nil, full)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the api's address after the dev returned: %v: want it let go", err)
	}
	ln.Close()
}

// TestQuickStartQuotesTheDataDir: the start-up hints name a data dir other than the default in
// the operator commands they print. Unquoted, a path with a space or a quote in it broke the
// command pasted into a shell; a POSIX shell now reads it back as the one argument.
func TestQuickStartQuotesTheDataDir(t *testing.T) {
	for _, dir := range []string{"/srv/seckill", "/tmp/my data", "/tmp/it's here", `/tmp/a"b$c`, "/tmp/tab\there"} {
		var out bytes.Buffer
		printQuickStart(&out, "http://127.0.0.1:8080", "token", dir, devAddrs{})
		_, hint, _ := strings.Cut(out.String(), "operator commands reach them with ")
		hint, _, _ = strings.Cut(hint, ":\n")
		words, err := exec.Command("sh", "-c", `for w in `+hint+`; do printf '%s\n' "$w"; done`).Output()
		if err != nil {
			t.Errorf("%q: the shell refused %s: %v", dir, hint, err)
			continue
		}
		if got, want := string(words), "--dev\n--data-dir\n"+dir+"\n"; got != want {
			t.Errorf("%q: the shell reads %s as %q, want %q", dir, hint, got, want)
		}
	}
}
