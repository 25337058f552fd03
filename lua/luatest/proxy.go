package luatest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy returns the address of a TCP proxy to upstream that calls beforeReply before it
// carries each read of upstream's replies back to the client: a test holds or delays Redis's
// answers there (a Redis that ran the command and whose reply is late, or never comes) while
// every command still reaches it. The proxy and its connections close when the test ends; a
// beforeReply that blocks must be let go by a cleanup the test registers after this call
// (cleanups run last first).
func Proxy(tb testing.TB, upstream string, beforeReply func()) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				down.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, down, up)
			mu.Unlock()
			wg.Go(func() { io.Copy(up, down); up.Close() })
			wg.Go(func() {
				defer down.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := up.Read(buf)
					if n > 0 {
						beforeReply()
						if _, werr := down.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}
