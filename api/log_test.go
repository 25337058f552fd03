package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/apitest"
)

// lockedBuffer is a log that the server writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// refusingProducer is Kafka refusing every record at once.
type refusingProducer struct{}

func (refusingProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	promise(r, errors.New("kafka refused the record"))
}

// TestRefusedAnnouncementLogsToConfigLogger: when Kafka refuses a purchase, the api cancels the
// order and announces it; the refused announcement is logged by Config.Logger (JSON with
// --log-format json), not by the process's default text logger.
func TestRefusedAnnouncementLogsToConfigLogger(t *testing.T) {
	var logs lockedBuffer
	h := newHarness(t, func(c *api.Config) { c.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	h.createCampaign(t, `{"id": "logs", "name": "Logs", "stock": 5, "per_user_limit": 5}`)
	srv := api.New(h.cfg, h.store, h.redis, refusingProducer{})
	t.Cleanup(srv.Close)
	rec := apitest.Serve(t, h.spec, srv.Handler(), request("POST", "/v1/campaigns/logs/purchases", `{"quantity": 1}`, user("alice")...))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("purchase with Kafka refusing: %d %s", rec.Code, rec.Body)
	}
	for line := range strings.Lines(logs.String()) {
		var r struct{ Level, Msg, Type string }
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if r.Level == "WARN" && r.Msg == "announce an order's outcome" && r.Type == "OrderFailed" {
			return
		}
	}
	t.Errorf("no JSON warning of the refused OrderFailed in the api's log:\n%s", logs.String())
}
