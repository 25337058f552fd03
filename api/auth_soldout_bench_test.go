package api

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkSoldOut drives the Echo handler in-process with the bench's sold-out scenario: a
// purchase of a campaign this process knows is sold out, each buyer with its own token. It uses
// nothing but New, Config and the sold-out flag, so it runs on older commits too (copy this file
// into a worktree) for a side-by-side figure.
func BenchmarkSoldOut(b *testing.B) {
	secret := []byte("bench-secret-of-at-least-32-bytes!!")
	const campaign = "camp-1"
	for _, buyers := range []int{1, 200_000} {
		b.Run(fmt.Sprintf("buyers=%d", buyers), func(b *testing.B) {
			s := New(Config{JWTSecret: secret, SoldOutTTL: time.Hour, Logger: slog.New(slog.DiscardHandler)}, nil, nil, nil)
			s.soldOut.mark(campaign, 1, time.Now(), s.soldOut.since())
			auths := make([][]string, buyers)
			for i := range auths {
				tok, err := MintToken(secret, "", "", fmt.Sprintf("buyer-%06d", i), time.Hour, time.Now())
				if err != nil {
					b.Fatal(err)
				}
				auths[i] = []string{"Bearer " + tok}
			}
			body := []byte(`{"quantity":1}`)
			req := httptest.NewRequest(http.MethodPost, "/v1/campaigns/"+campaign+"/purchases", nil)
			req.Header.Set("Content-Type", "application/json")
			var rd bytes.Reader
			req.Body = io.NopCloser(&rd)
			w := &discardWriter{h: http.Header{}}
			h := s.Handler()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				req.Header["Authorization"] = auths[i%len(auths)]
				i++
				rd.Reset(body)
				req.ContentLength = int64(len(body))
				clear(w.h)
				w.status = 0
				h.ServeHTTP(w, req)
				if w.status != http.StatusConflict {
					b.Fatalf("status %d", w.status)
				}
			}
		})
	}
}

// discardWriter is a ResponseWriter that keeps only the status.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
