package luatest

import (
	"net"
	"sync"
	"testing"
)

// Silent returns the address of a server that takes connections and never answers: a Redis
// paused by a fork or SIGSTOP, a PostgreSQL host stalled mid-failover, a network that drops
// the replies. hangUp closes it and the connections it holds, which ends a client's wait; it
// runs when the test ends too, and a second call does nothing.
func Silent(tb testing.TB) (addr string, hangUp func()) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var (
		mu      sync.Mutex
		held    []net.Conn
		accepts sync.WaitGroup
		once    sync.Once
	)
	accepts.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // held open, never answered
			mu.Unlock()
		}
	})
	hangUp = func() {
		once.Do(func() {
			ln.Close()
			accepts.Wait() // no connection is taken after this
			mu.Lock()
			defer mu.Unlock()
			for _, c := range held {
				c.Close()
			}
		})
	}
	tb.Cleanup(hangUp)
	return ln.Addr().String(), hangUp
}
