package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/seckill/seckill/api"
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
