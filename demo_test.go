package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
)

// TestDemo runs make demo's command against a seckill dev it finds by its data directory: the
// crowd sells the campaign out, and every purchase is counted once in the summary.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	// A dev.json left world-readable (by an older seckill, or a dev killed before it removed
	// it) must not receive the admin token as it is.
	if err := os.WriteFile(filepath.Join(dir, "dev.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := startDev(t, ctx, addr, dir)
	eventually(t, 60*time.Second, "seckill dev is up", func() bool { return strings.Contains(out.String(), "console: ") })
	if st, err := os.Stat(filepath.Join(dir, "dev.json")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("dev.json: %v, mode %v: want the owner's only, as it holds the admin token", err, st.Mode())
	}
	if a, err := readDevAddrs(dir); err != nil || a.APIURL != "http://"+addr || a.AdminToken == "" {
		t.Errorf("dev.json: %+v, %v: want the api's address and the admin token", a, err)
	}

	var demo strings.Builder
	if code := run(context.Background(), []string{"demo", "--dev", "--data-dir", dir, "--duration", "2s", "--rate", "100", "--stock", "30", "--buyers", "40"}, &demo, &demo); code != 0 {
		t.Fatalf("demo exited %d:\n%s", code, demo.String())
	}
	t.Log(demo.String())
	m := regexp.MustCompile(`campaign (demo-\d+-[0-9a-z]{4})`).FindStringSubmatch(demo.String())
	sum := regexp.MustCompile(`demo: (\d+) purchases: (.*) \((\d+) units accepted\)`).FindStringSubmatch(demo.String())
	if m == nil || sum == nil {
		t.Fatalf("no campaign or no summary:\n%s", demo.String())
	}
	total, _ := strconv.Atoi(sum[1])
	units, _ := strconv.ParseFloat(sum[3], 64)
	counts := map[string]int{}
	n := 0
	for _, part := range strings.Split(sum[2], ", ") {
		k, v, _ := strings.Cut(part, " ")
		counts[k], _ = strconv.Atoi(v)
		n += counts[k]
	}
	if n != total || counts["accepted"] == 0 || counts["sold_out"] == 0 || counts["error"] > 0 {
		t.Errorf("summary %v of %d purchases: want them all counted once, some accepted, some sold out, no errors", counts, total)
	}
	eventually(t, 20*time.Second, "the demo campaign is sold out", func() bool {
		resp, err := http.Get("http://" + addr + "/v1/campaigns/" + m[1])
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var c map[string]any
		json.NewDecoder(resp.Body).Decode(&c)
		return c["remaining"] == 0.0 && c["sold"] == 30.0
	})
	if units != 30 {
		t.Errorf("the summary says %v units accepted, the campaign sold 30: an accepted purchase lost or counted twice", units)
	}

	// Without a seckill dev on the directory: a clear error.
	var none strings.Builder
	if code := run(context.Background(), []string{"demo", "--data-dir", t.TempDir()}, &none, &none); code == 0 || !strings.Contains(none.String(), "no seckill dev is running") {
		t.Errorf("demo with no dev: %d %s", code, none.String())
	}
}

// TestDemoWhenTheAPIGoes runs the demo against an api that stops answering part way, as a
// make run stopped with Ctrl-C does: the crowd stops at once and says why.
func TestDemoWhenTheAPIGoes(t *testing.T) {
	var purchases atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/campaigns" {
			w.WriteHeader(http.StatusCreated)
			return
		}
		purchases.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(srv.Close)
	// The api goes after 20 purchases, or the watch ends with the demo if it stopped first.
	demoDone, gone, watched := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for purchases.Load() < 20 {
			select {
			case <-demoDone:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		close(gone)
		srv.Close()
	}()
	start := time.Now()
	var out strings.Builder
	code := run(context.Background(), []string{"demo", "--api-url", srv.URL, "--admin-token", "t", "--duration", "20s", "--rate", "100"}, &out, &out)
	close(demoDone)
	<-watched
	select {
	case <-gone:
	default:
		t.Fatalf("the demo stopped after %d purchases, before its api went:\n%s", purchases.Load(), out.String())
	}
	if code == 0 || !strings.Contains(out.String(), "stopped answering: is make run still running?") || !strings.Contains(out.String(), "accepted ") {
		t.Errorf("demo exited %d:\n%s\nwant a failure that says the api went, after the summary", code, out.String())
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the demo went on %s after its api had gone", took)
	}
}

// TestDemoCampaignsDoNotClash: two demos started in the same second name two campaigns (the
// second one's create answered 409 when the name was the time of day alone), each one a valid
// campaign id.
func TestDemoCampaignsDoNotClash(t *testing.T) {
	now := time.Now()
	a, b := demoCampaign(now), demoCampaign(now)
	if a == b || !events.ValidCampaignID(a) || !events.ValidCampaignID(b) {
		t.Errorf("two demos at %v: campaigns %q and %q; want two valid, different ids", now, a, b)
	}
}
