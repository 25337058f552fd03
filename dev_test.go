package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDevRestart runs seckill dev twice on one data directory, as `make run` would: the second
// start finds an empty miniredis, freezes the campaign, rebuilds it from SQLite, and sells again
// with what the first run sold still sold.
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
			if code := run(ctx, []string{"dev", "--addr", addr, "--data-dir", dir, "--admin-token", "dev-test-admin-token-of-32-bytes!"}, &out, &out); code != 0 {
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

	stop := start()
	if code, body := post("/v1/campaigns", "", `{"id":"demo","name":"Demo","stock":10,"per_user_limit":2}`, "Authorization", "Bearer dev-test-admin-token-of-32-bytes!"); code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	eventually(t, 10*time.Second, "a first purchase", func() bool {
		code, _ := post("/v1/campaigns/demo/purchases", "alice", `{"quantity":2}`)
		return code == 202
	})
	eventually(t, 10*time.Second, "alice's order is confirmed", func() bool { return remaining() == 8.0 })
	// The operator commands reach the running dev's embedded servers with --dev.
	var audit bytes.Buffer
	if code := run(context.Background(), []string{"audit", "--dev", "--data-dir", dir}, &audit, &audit); code != 0 ||
		!strings.Contains(audit.String(), "campaign demo") || !strings.Contains(audit.String(), "every invariant holds") {
		t.Errorf("audit --dev exited %d:\n%s", code, audit.String())
	}
	stop()
	// With no dev running on it, --dev says so.
	audit.Reset()
	if code := run(context.Background(), []string{"audit", "--dev", "--data-dir", dir}, &audit, &audit); code == 0 || !strings.Contains(audit.String(), "no seckill dev is running") {
		t.Errorf("audit --dev with no dev running exited %d:\n%s", code, audit.String())
	}

	stop = start()
	defer stop()
	var code int
	eventually(t, 30*time.Second, "sales resume after the rebuild", func() bool {
		code, _ = post("/v1/campaigns/demo/purchases", "bob", `{"quantity":1}`)
		return code == 202
	})
	// alice's two units survived the restart: her limit is reached, 7 units are left.
	if code, body := post("/v1/campaigns/demo/purchases", "alice", `{"quantity":1}`); code != 409 {
		t.Errorf("alice past her limit after the restart: %d %v", code, body)
	}
	eventually(t, 10*time.Second, "bob's unit is taken", func() bool { return remaining() == 7.0 })
}
