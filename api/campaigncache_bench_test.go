package api_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/lua/luatest"
	"github.com/seckill/seckill/store/storetest"
)

// BenchmarkGetCampaign: buyers' pages polling one campaign with a payment window, on the test
// PostgreSQL and Redis, 64 goroutines per CPU: what campaignTTL is for. Copy this file into a
// worktree of an older commit for a side-by-side figure.
func BenchmarkGetCampaign(b *testing.B) {
	st := storetest.MustOpen(b, storetest.PostgresURL(b))
	r := lua.New(luatest.MustRedis(b))
	b.Cleanup(func() { r.Close() })
	s := api.New(api.Config{AdminToken: "admin-token-for-the-bench", Logger: slog.New(slog.DiscardHandler)}, st, r, nil)
	b.Cleanup(s.Close)
	h := s.Handler()
	id := storetest.Name("page")
	req := httptest.NewRequest(http.MethodPost, "/v1/campaigns", strings.NewReader(`{"id":"`+id+`","name":"x","stock":100,"per_user_limit":1,"payment_window_seconds":600}`))
	req.Header.Set("Authorization", "Bearer admin-token-for-the-bench")
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusCreated && w.Code != http.StatusOK {
		b.Fatalf("create: %d %s", w.Code, w.Body)
	}
	b.SetParallelism(64)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/campaigns/"+id, nil))
			if w.Code != http.StatusOK {
				b.Errorf("get: %d %s", w.Code, w.Body)
				return
			}
		}
	})
}
