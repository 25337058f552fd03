package api_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/api"
)

// hog opens n keep-alive connections from local (an address on the loopback network), each
// after one GET /healthz, and returns those the server kept and the number it closed at once.
func hog(t *testing.T, addr, local string, n int) (kept []net.Conn, refused int) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 10 * time.Second}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan struct{})
	for range 32 {
		wg.Go(func() {
			for range next {
				c, err := d.Dial("tcp", addr)
				if err != nil {
					mu.Lock()
					refused++
					mu.Unlock()
					continue
				}
				c.SetDeadline(time.Now().Add(30 * time.Second))
				_, err = fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
				var status string
				if err == nil {
					status, err = bufio.NewReader(c).ReadString('\n')
				}
				mu.Lock()
				if err == nil && strings.Contains(status, " 200 ") {
					kept = append(kept, c)
				} else {
					refused++
					c.Close()
				}
				mu.Unlock()
			}
		})
	}
	for range n {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	return kept, refused
}

// healthy asks for /healthz from local on a connection of its own.
func healthy(t *testing.T, addr, local string) bool {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}).DialContext}}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// serve runs a server over h's dependencies with cfg's connection caps on a loopback port.
func serve(t *testing.T, maxConns, perAddr int) string {
	t.Helper()
	h := newHarness(t, func(c *api.Config) { c.MaxConns, c.MaxConnsPerAddr = maxConns, perAddr })
	return h.listen(t)
}

// listen runs h's server as the api command does (Serve, with its http.Server's timeouts and
// caps) on a loopback port until the test ends, and returns the address.
func (h *harness) listen(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// TestConnectionCaps: one client opening 20,000 keep-alive connections, each after a GET /healthz
// (the attack, which reached the process's file limit), against a cap of 1,000 per
// address, the api's default: it neither starves another client nor outlasts its own hang-up.
func TestConnectionCaps(t *testing.T) {
	t.Run("per address", func(t *testing.T) {
		addr := serve(t, 0, 1000)
		kept, refused := hog(t, addr, "127.0.0.1", 20_000)
		defer closeAll(kept)
		if len(kept) != 1000 || refused != 19_000 {
			t.Errorf("the hog kept %d connections and was refused %d; want 1000 and 19000", len(kept), refused)
		}
		if !healthy(t, addr, "127.0.0.2") {
			t.Error("another client is not served while the hog holds its connections")
		}
		closeAll(kept)
		// Its places are free again once the server has seen the hang-ups: the hog is served.
		for deadline := time.Now().Add(20 * time.Second); !healthy(t, addr, "127.0.0.1"); {
			if time.Now().After(deadline) {
				t.Fatal("the hog's address is still refused after it hung up")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	t.Run("in total", func(t *testing.T) {
		addr := serve(t, 500, 0)
		var all []net.Conn
		defer func() { closeAll(all) }()
		refusedAll := 0
		for _, local := range []string{"127.0.0.3", "127.0.0.4", "127.0.0.5"} {
			kept, refused := hog(t, addr, local, 300)
			all, refusedAll = append(all, kept...), refusedAll+refused
		}
		if len(all) != 500 || refusedAll != 400 {
			t.Errorf("the server kept %d connections and refused %d; want 500 and 400", len(all), refusedAll)
		}
		closeAll(all)
		for deadline := time.Now().Add(20 * time.Second); !healthy(t, addr, "127.0.0.6"); {
			if time.Now().After(deadline) {
				t.Fatal("still refused after every connection closed")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// TestTooLargeBodyEndsCleanly: a purchase whose body is far too large is answered 413 and its
// connection closed; under the connection caps as without them, the server half-closes first
// (net/http's closeWriteAndWait, golang.org/issue/3595), so the client reads the answer and an
// end, not a reset that may take the answer with it.
func TestTooLargeBodyEndsCleanly(t *testing.T) {
	for _, caps := range []struct{ max, perAddr int }{{0, 0}, {500, 100}} {
		t.Run(fmt.Sprintf("max %d per address %d", caps.max, caps.perAddr), func(t *testing.T) {
			addr := serve(t, caps.max, caps.perAddr)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			body := strings.Repeat("x", 512<<10)
			go fmt.Fprintf(c, "POST /v1/campaigns/big/purchases HTTP/1.1\r\nHost: x\r\nX-User-ID: ann\r\n"+
				"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", 10<<20, body)
			got, err := io.ReadAll(c)
			if !strings.HasPrefix(string(got), "HTTP/1.1 413 ") || err != nil {
				t.Errorf("read %q, %v; want a 413 and the connection's end", firstLine(got), err)
			}
		})
	}
}

func firstLine(b []byte) string {
	line, _, _ := strings.Cut(string(b), "\r\n")
	return line
}

// TestServeCutsWhatOutlivesTheDrain: a request still open when the drain runs out (a purchase
// held at Redis) has its connection closed by the time Serve returns, and the log says how
// many were cut. The connection stayed open until the process exited, so a caller that went on
// running (a test, an embedding program) kept it, and the client its wait.
func TestServeCutsWhatOutlivesTheDrain(t *testing.T) {
	logs, err := os.Create(filepath.Join(t.TempDir(), "api.log")) // the server writes as the test reads
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	h := newHarness(t, func(c *api.Config) {
		c.ShutdownTimeout = 100 * time.Millisecond
		c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	h.createCampaign(t, `{"id": "cut", "name": "Cut", "stock": 5, "per_user_limit": 1}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- h.srv.Serve(ctx, ln) }()

	h.gate.close()
	answered := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/v1/campaigns/cut/purchases", strings.NewReader(`{"quantity": 1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User-ID", "ann")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("answered %d", resp.StatusCode)
		}
		answered <- err
	}()
	within(t, 10*time.Second, "the purchase waits at Redis", func() bool { return h.gate.held.Load() > 0 })
	cancel()
	if err := <-served; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Serve: %v, want the drain's deadline", err)
	}
	// Only now may the purchase go on: had its connection stayed open, it would answer on it.
	h.gate.open()
	if err := <-answered; err == nil || strings.HasPrefix(err.Error(), "answered") {
		t.Errorf("the purchase open past the drain: %v; want its connection closed", err)
	}
	written, err := os.ReadFile(logs.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(written), `"level":"WARN","msg":"the drain timed out: connections still open are cut","connections":1`) {
		t.Errorf("no warning of the one connection cut:\n%s", written)
	}
}
