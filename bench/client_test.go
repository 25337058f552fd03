package bench

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// server answers like the api: a 202 with a length, a chunked 200, a 409 error body, and a
// 200 that closes the connection; it counts the connections it accepted.
func server(t *testing.T) (addr string, conns *atomic.Int64) {
	t.Helper()
	conns = new(atomic.Int64)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/accepted":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, `{"order_id":"c.1","status":"pending"}`)
		case "/chunked":
			w.WriteHeader(http.StatusOK)
			for i := range 3 {
				fmt.Fprintf(w, "part%d;", i)
				w.(http.Flusher).Flush()
			}
		case "/sold-out":
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"error":{"code":"sold_out","message":"campaign \"c\" has fewer than 1 units left"}}`)
		case "/close":
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), conns
}

func get(addr, path string) []byte {
	return []byte("GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")
}

func TestConnReadsEveryKindOfAnswer(t *testing.T) {
	addr, conns := server(t)
	c := newConn(addr, 0)
	defer c.close()
	for _, tc := range []struct {
		path, body, code string
		status           int
	}{
		{"/accepted", `{"order_id":"c.1","status":"pending"}`, "", 202},
		{"/chunked", "part0;part1;part2;", "", 200},
		{"/sold-out", "", "sold_out", 409},
		{"/accepted", `{"order_id":"c.1","status":"pending"}`, "", 202},
	} {
		status, body, err := c.roundTrip(get(addr, tc.path))
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		if status != tc.status {
			t.Errorf("%s: status %d, want %d", tc.path, status, tc.status)
		}
		if tc.body != "" && string(body) != tc.body {
			t.Errorf("%s: body %q, want %q", tc.path, body, tc.body)
		}
		if got := string(errorCode(body)); got != tc.code {
			t.Errorf("%s: error code %q, want %q", tc.path, got, tc.code)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for four requests: keep-alive did not hold", n)
	}
	// Connection: close ends the connection; the next request dials again.
	for range 2 {
		if status, body, err := c.roundTrip(get(addr, "/close")); err != nil || status != 200 || string(body) != "bye" {
			t.Fatalf("/close: %d %q %v", status, body, err)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (the first /close ends the kept-alive one, the second dials anew)", n)
	}
}

func TestConnReportsADeadServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("garbage\r\n"))
			c.Close()
		}
	}()
	c := newConn(ln.Addr().String(), 0)
	if _, _, err := c.roundTrip(get("x", "/")); err == nil {
		t.Fatal("a malformed answer went unnoticed")
	}
	ln.Close()
	if _, _, err := c.roundTrip(get("x", "/")); err == nil {
		t.Fatal("a closed server went unnoticed")
	}
}

func TestAsciiEqualFold(t *testing.T) {
	for _, tc := range []struct {
		b, s string
		want bool
	}{{"Content-Length", "content-length", true}, {"CHUNKED", "chunked", true}, {"chunk", "chunked", false}, {"closf", "close", false}} {
		if got := asciiEqualFold([]byte(tc.b), tc.s); got != tc.want {
			t.Errorf("asciiEqualFold(%q, %q) = %v", tc.b, tc.s, got)
		}
	}
}
