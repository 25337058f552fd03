package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/apitest"
)

// refusingProducer is Kafka refusing every record at once.
type refusingProducer struct{}

func (refusingProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	promise(r, errors.New("kafka refused the record"))
}

func (p refusingProducer) TryProduce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.Produce(ctx, r, promise)
}

// TestRefusedAnnouncementLogsToConfigLogger: when Kafka refuses a purchase, the api cancels the
// order and announces it; the refused announcement is logged by Config.Logger (JSON with
// --log-format json), not by the process's default text logger.
func TestRefusedAnnouncementLogsToConfigLogger(t *testing.T) {
	// A file: the server's goroutines write it while the test reads, with no buffer to share.
	logs, err := os.Create(filepath.Join(t.TempDir(), "api.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	h := newHarness(t, func(c *api.Config) { c.Logger = slog.New(slog.NewJSONHandler(logs, nil)) })
	h.createCampaign(t, `{"id": "logs", "name": "Logs", "stock": 5, "per_user_limit": 5}`)
	srv := api.New(h.cfg, h.store, h.redis, refusingProducer{})
	t.Cleanup(srv.Close)
	rec := apitest.Serve(t, h.spec, srv.Handler(), request("POST", "/v1/campaigns/logs/purchases", `{"quantity": 1}`, user("alice")...))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("purchase with Kafka refusing: %d %s", rec.Code, rec.Body)
	}
	written, err := os.ReadFile(logs.Name())
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(written)) {
		var r struct{ Level, Msg, Type string }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if r.Level == "WARN" && r.Msg == "announce an order's outcome" && r.Type == "OrderFailed" {
			return
		}
	}
	t.Errorf("no JSON warning of the refused OrderFailed in the api's log:\n%s", written)
}
