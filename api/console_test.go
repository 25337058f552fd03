package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
)

// TestConsoleContract checks what the console's endpoints answer: the page with a policy that
// allows only its own files, and the admin-only stream of snapshots, each checked against the
// ConsoleSnapshot schema, that sees a sale as it happens.
func TestConsoleContract(t *testing.T) {
	h := newHarness(t)
	srv := httptest.NewServer(h.srv.Handler())
	defer srv.Close()

	page, err := http.Get(srv.URL + "/console")
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	if csp := page.Header.Get("Content-Security-Policy"); page.StatusCode != http.StatusOK || !strings.Contains(csp, "script-src 'self'") ||
		strings.Contains(csp, "unsafe-inline") || page.Header.Get("X-Frame-Options") != "DENY" || page.Header.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("the page: %d %v", page.StatusCode, page.Header)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	root, err := noRedirect.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	root.Body.Close()
	if root.StatusCode != http.StatusFound || root.Header.Get("Location") != "/console" {
		t.Errorf("GET /: %d %s", root.StatusCode, root.Header.Get("Location"))
	}
	h.fail(t, request("GET", "/v1/admin/console/events", ""), http.StatusUnauthorized, "unauthorized")

	h.createCampaign(t, `{"id": "live", "name": "Live", "stock": 10, "per_user_limit": 3}`)
	h.buy(t, "live", "ann", 3)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/admin/console/events", nil)
	req.Header.Set("Authorization", "Bearer "+h.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("the stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	schema := h.spec.Components.Schemas["ConsoleSnapshot"].Value
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(nil, 1<<20)
	var snaps []api.ConsoleSnapshot
	for len(snaps) < 3 && lines.Scan() {
		data, ok := strings.CutPrefix(lines.Text(), "data: ")
		if !ok {
			continue
		}
		var raw any
		if err := json.Unmarshal([]byte(data), &raw); err != nil {
			t.Fatal(err)
		}
		if err := schema.VisitJSON(raw, openapi3.MultiErrors()); err != nil {
			t.Errorf("a snapshot breaks the ConsoleSnapshot schema: %v\n%s", err, data)
		}
		var s api.ConsoleSnapshot
		if err := json.Unmarshal([]byte(data), &s); err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, s)
		if len(snaps) == 1 {
			h.buy(t, "live", "bob", 2) // the next snapshots see it
		}
	}
	if len(snaps) < 3 {
		t.Fatalf("%d snapshots before the stream ended: %v", len(snaps), lines.Err())
	}
	if gap := snaps[2].At.Sub(snaps[1].At); gap < 500*time.Millisecond || gap > 3*time.Second {
		t.Errorf("snapshots %v apart, want about a second", gap)
	}
	var live *api.ConsoleCampaign
	for i := range snaps[2].Campaigns {
		if snaps[2].Campaigns[i].ID == "live" {
			live = &snaps[2].Campaigns[i]
		}
	}
	if live == nil || live.Remaining != 5 || live.Pending != 5 || live.State != "on_sale" {
		t.Fatalf("the campaign in the last snapshot: %+v", live)
	}
	var accepted float64
	for _, s := range snaps[1:] {
		accepted += s.Purchases["accepted"]
	}
	if accepted <= 0 || snaps[1].ConsumerLag < 0 {
		t.Errorf("the purchase after the first snapshot is not in the next ones: %+v %+v", snaps[1], snaps[2])
	}
}

// countingStore counts the console's per-snapshot query.
type countingStore struct {
	api.Store
	calls atomic.Int64
}

func (c *countingStore) UnitsByStatus(ctx context.Context, campaigns []string) ([]store.Units, error) {
	c.calls.Add(1)
	return c.Store.UnitsByStatus(ctx, campaigns)
}

// TestConsoleQueriesOncePerSecond opens three consoles at once: the store is asked once a
// second for all of them, not once per page, and with none open it is not asked at all.
func TestConsoleQueriesOncePerSecond(t *testing.T) {
	h := newHarness(t)
	st := &countingStore{Store: h.store}
	srv := api.New(h.cfg, st, h.redis, newProducer(t, h.brokers))
	defer srv.Close()
	web := httptest.NewServer(srv.Handler())
	defer web.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var snapshots atomic.Int64
	start := time.Now()
	for range 3 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", web.URL+"/v1/admin/console/events", nil)
			req.Header.Set("Authorization", "Bearer "+h.admin)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			lines := bufio.NewScanner(resp.Body)
			for lines.Scan() {
				if strings.HasPrefix(lines.Text(), "data: ") && snapshots.Add(1) == 9 {
					cancel() // three snapshots each
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	calls := st.calls.Load()
	t.Logf("%d snapshots to 3 pages in %v: %d store queries", snapshots.Load(), elapsed.Round(time.Millisecond), calls)
	if snapshots.Load() < 9 || calls > int64(elapsed/time.Second)+2 {
		t.Errorf("%d snapshots, %d queries in %v: want one query a second for all the pages", snapshots.Load(), calls, elapsed)
	}
	time.Sleep(1500 * time.Millisecond) // every page gone: the loop stops
	if after := st.calls.Load(); after > calls+1 {
		t.Errorf("the store was asked %d more times with no page open", after-calls)
	}
}

func TestGivenBackBy(t *testing.T) {
	for _, tc := range []struct {
		status events.Status
		reason string
		want   string
	}{
		{events.Confirmed, "", ""},
		{events.Paid, "", ""},
		{events.Refunded, "", "operator refund"},
		{events.Expired, events.ReasonUnpaid, "payment window"},
		{events.Failed, events.ReasonExpired, "sweeper"},
		{events.Failed, events.ReasonOperator, "operator"},
		{events.Failed, events.ReasonProduce, "api (produce failed)"},
		{events.Failed, events.ReasonStoreSoldOut, "dead letter (store_sold_out)"},
	} {
		if got := api.GivenBackBy(tc.status, tc.reason); got != tc.want {
			t.Errorf("GivenBackBy(%s, %q) = %q, want %q", tc.status, tc.reason, got, tc.want)
		}
	}
}
