//go:build linux

package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

func parkedCount() int { return int(parked.Load()) }

// parkServer serves "ok" behind parkIdle, parking after after.
func parkServer(t testing.TB, after, idle time.Duration) (*http.Server, *parkListener) {
	t.Helper()
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, ok := parkIdle(tl, after).(*parkListener)
	if !ok {
		t.Fatal("parkIdle did not wrap the listener")
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			io.WriteString(w, "ok "+r.URL.Path)
		}),
		IdleTimeout: idle,
		ConnState:   parkConnState,
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return srv, ln
}

func (l *parkListener) parked() int {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	return len(l.p.conns)
}

type client struct {
	c  net.Conn
	br *bufio.Reader
}

func dial(t testing.TB, l *parkListener) *client {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c: c, br: bufio.NewReader(c)}
}

func (c *client) send(t testing.TB, raw string) {
	t.Helper()
	if _, err := io.WriteString(c.c, raw); err != nil {
		t.Fatal(err)
	}
}

func (c *client) expect(t testing.TB, body string) {
	t.Helper()
	c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != body {
		t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, b, body)
	}
}

func get(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestParkIdleConnections(t *testing.T) {
	_, l := parkServer(t, 50*time.Millisecond, time.Minute)
	before := runtime.NumGoroutine()
	var cs []*client
	for range 50 {
		c := dial(t, l)
		c.send(t, get("/a"))
		c.expect(t, "ok /a")
		cs = append(cs, c)
	}
	waitFor(t, "50 parked connections", func() bool { return l.parked() == 50 })
	// Their goroutines are gone: net/http holds none of them.
	waitFor(t, "the goroutines to end", func() bool { return runtime.NumGoroutine() <= before+5 })
	// Each is served again when its next request comes, and parks again when idle.
	for _, c := range cs {
		c.send(t, get("/b"))
		c.expect(t, "ok /b")
	}
	waitFor(t, "the connections to park again", func() bool { return l.parked() == 50 })
	// A connection with requests coming faster than the park delay is never parked.
	c := dial(t, l)
	for range 10 {
		c.send(t, get("/busy"))
		c.expect(t, "ok /busy")
		time.Sleep(5 * time.Millisecond)
	}
	if n := l.parked(); n != 50 {
		t.Errorf("%d parked, want the 50 idle ones", n)
	}
}

// TestParkKeepsEveryByte checks that no byte of a request is lost to parking: pipelined
// requests, a request whose first bytes came before the pause, and a body after a pause.
func TestParkKeepsEveryByte(t *testing.T) {
	_, l := parkServer(t, 30*time.Millisecond, time.Minute)
	c := dial(t, l)
	c.send(t, get("/1")+get("/2")+get("/3")[:3]) // two and a bit, in one write
	c.expect(t, "ok /1")
	c.expect(t, "ok /2")
	time.Sleep(150 * time.Millisecond) // net/http holds "GET" of the third, in its buffer
	c.send(t, get("/3")[3:])
	c.expect(t, "ok /3")

	// A pipelined request read up to a line's end, with the rest after a pause: net/http's
	// wait for it found bytes enough, so the reads that follow are not a wait for a request.
	c.send(t, get("/4")+"GET /5 HTTP/1.1\r\n")
	c.expect(t, "ok /4")
	time.Sleep(150 * time.Millisecond)
	c.send(t, "Host: x\r\n\r\n")
	c.expect(t, "ok /5")

	// The wait for a request reads its first bytes, then the rest comes after more than the
	// park delay: fewer than the 4 bytes net/http peeks for, and more.
	for i, cut := range []int{2, 6} {
		req := get(fmt.Sprintf("/5.%d", i))
		c.send(t, req[:cut])
		time.Sleep(150 * time.Millisecond)
		c.send(t, req[cut:])
		c.expect(t, fmt.Sprintf("ok /5.%d", i))
	}

	time.Sleep(150 * time.Millisecond)
	waitFor(t, "the connection to park", func() bool { return l.parked() == 1 })
	c.send(t, "G") // wakes it: one byte, then the rest after more than the park delay
	time.Sleep(150 * time.Millisecond)
	c.send(t, get("/6")[1:])
	c.expect(t, "ok /6")

	c.send(t, "POST /7 HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
	time.Sleep(150 * time.Millisecond) // a pause inside a body is not an idle connection
	c.send(t, "cd")
	c.expect(t, "ok /7")
}

// parkedClient dials l, has one request served and waits until the connection is parked.
func parkedClient(t *testing.T, l *parkListener) *client {
	t.Helper()
	c := dial(t, l)
	c.send(t, get("/a"))
	c.expect(t, "ok /a")
	waitFor(t, "the connection to park", func() bool { return l.parked() == 1 })
	return c
}

func TestParkedConnectionsClose(t *testing.T) {
	t.Run("idle timeout", func(t *testing.T) {
		_, l := parkServer(t, 20*time.Millisecond, 300*time.Millisecond)
		c := parkedClient(t, l)
		c.c.SetReadDeadline(time.Now().Add(3 * time.Second))
		start := time.Now()
		if _, err := c.br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Fatalf("parked connection past the idle timeout: %v, want EOF", err)
		}
		if d := time.Since(start); d > pollEvery+time.Second {
			t.Errorf("closed after %v", d)
		}
		waitFor(t, "no parked connection", func() bool { return l.parked() == 0 })
	})
	t.Run("peer hangs up", func(t *testing.T) {
		_, l := parkServer(t, 20*time.Millisecond, time.Minute)
		c := parkedClient(t, l)
		c.c.Close()
		waitFor(t, "the connection to be let go", func() bool { return l.parked() == 0 })
	})
	t.Run("shutdown", func(t *testing.T) {
		srv, l := parkServer(t, 20*time.Millisecond, time.Minute)
		c := parkedClient(t, l)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		c.c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Fatalf("parked connection after shutdown: %v, want EOF", err)
		}
		if n := l.parked(); n != 0 {
			t.Errorf("%d parked after shutdown", n)
		}
	})
}

// TestServerParks checks the api's own server: its idle connections leave net/http.
func TestServerParks(t *testing.T) {
	s := New(Config{InsecureUserHeader: true, IdleParkAfter: 20 * time.Millisecond}, nil, nil, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	before := parkedCount()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl := &client{c: c, br: bufio.NewReader(c)}
	for range 3 {
		cl.send(t, get("/healthz"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(cl.br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz: %v %v", resp, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), "ok") {
			t.Fatalf("healthz: %s", b)
		}
		waitFor(t, "the connection to park", func() bool { return parkedCount() == before+1 })
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// BenchmarkParkedRequest measures a request's round trip on a parked connection (woken by the
// poller, served by a new goroutine) against one on a connection net/http still holds. On 2
// shared cores: held ~50 us, parked ~170 us.
func BenchmarkParkedRequest(b *testing.B) {
	for _, tc := range []struct {
		name  string
		after time.Duration
	}{{"held", time.Hour}, {"parked", time.Millisecond}} {
		b.Run(tc.name, func(b *testing.B) {
			_, l := parkServer(b, tc.after, time.Hour)
			c := dial(b, l)
			c.send(b, get("/a")) // a connection parks once it has served a request
			c.expect(b, "ok /a")
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				if tc.after < time.Second {
					for l.parked() != 1 {
						time.Sleep(100 * time.Microsecond)
					}
				}
				b.StartTimer()
				c.send(b, get("/a"))
				c.expect(b, "ok /a")
			}
			b.StopTimer()
		})
	}
}
