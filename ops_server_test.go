package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestOpsServerLetsNoConnectionHang: the operators' port (--metrics-addr) shares its process,
// and so its open files, with the api's public port, and any pod of the cluster can reach it.
// A connection that stays idle after an answer, or whose request body never comes, must be
// closed, or a client that opens them by the thousand takes the descriptors the api needs for
// Redis, Kafka and the store.
func TestOpsServerLetsNoConnectionHang(t *testing.T) {
	for _, tc := range []struct {
		name string
		// send writes to the server and leaves the connection with nothing more to come.
		send func(t *testing.T, c net.Conn, br *bufio.Reader)
	}{
		{"idle after an answer", func(t *testing.T, c net.Conn, br *bufio.Reader) {
			io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: ops\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}},
		{"a body that never comes", func(t *testing.T, c net.Conn, _ *bufio.Reader) {
			io.WriteString(c, "POST /healthz HTTP/1.1\r\nHost: ops\r\nContent-Length: 1000\r\n\r\n")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := opsServer(http.NotFoundHandler())
				ln := newPipeListener()
				served := make(chan error, 1)
				go func() { served <- srv.Serve(ln) }()
				c := ln.dial()
				defer c.Close()
				br := bufio.NewReader(c)
				tc.send(t, c, br)
				closed := make(chan struct{})
				go func() {
					io.Copy(io.Discard, br) // until the server closes the connection
					close(closed)
				}()
				time.Sleep(time.Hour)
				synctest.Wait()
				select {
				case <-closed:
				default:
					t.Error("the server still holds the connection an hour later")
				}
				srv.Close()
				<-served
			})
		})
	}
}

// pipeListener is a net.Listener of in-memory connections, which testing/synctest's fake
// clock drives (a TCP socket's deadlines would run on the real one).
type pipeListener struct {
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// dial returns the client's end of a new connection to the listener.
func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	l.conns <- server
	return client
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
