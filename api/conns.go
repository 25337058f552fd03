package api

import (
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// refusedConns counts connections closed at once because their address, or the server, held
// as many as it may.
var refusedConns = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "seckill_http_refused_connections_total",
	Help: "Connections the api closed on accept: over its per-address cap (reason addr) or its total cap (reason total).",
}, []string{"reason"})

// connLimiter is a listener that holds at most max connections in all and perAddr from one
// client address (an IPv6 client's /64: one host has all of it). A connection over either cap is
// closed as soon as it is accepted, so it costs a file descriptor for microseconds, and the
// process never runs out of them: at EMFILE net/http's accept loop sleeps up to a second per
// error, and nobody is served meanwhile.
type connLimiter struct {
	net.Listener
	max, perAddr int // 0: no cap

	mu     sync.Mutex
	total  int
	byAddr map[netip.Prefix]int
}

func limitConns(ln net.Listener, max, perAddr int) net.Listener {
	if max <= 0 && perAddr <= 0 {
		return ln
	}
	return &connLimiter{Listener: ln, max: max, perAddr: perAddr, byAddr: map[netip.Prefix]int{}}
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ap, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		key := clientPrefix(ap.Addr())
		if reason := l.take(key); reason != "" {
			c.Close()
			refusedConns.WithLabelValues(reason).Inc()
			continue
		}
		return &limitedConn{Conn: c, release: func() { l.give(key) }}, nil
	}
}

// take counts a connection from key in, or says which cap refuses it.
func (l *connLimiter) take(key netip.Prefix) (refused string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.max > 0 && l.total >= l.max:
		return "total"
	case l.perAddr > 0 && l.byAddr[key] >= l.perAddr:
		return "addr"
	}
	l.total++
	l.byAddr[key]++
	return ""
}

func (l *connLimiter) give(key netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byAddr[key]--; l.byAddr[key] <= 0 {
		delete(l.byAddr, key)
	}
}

// limitedConn gives its place back when it is closed, once.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes the connection when the one it wraps can (a *net.TCPConn). net/http
// looks for it before it closes a connection whose request body it left unread (a 413): with
// a FIN first, the client reads the answer and an end; without, the close resets the
// connection, which may take the answer with it (golang.org/issue/3595).
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// clientPrefix is what one client holds of the address space: an IPv4 address, however it is
// written (::ffff:192.0.2.1 is 192.0.2.1), or an IPv6 /64 (a host is given a whole /64 and
// picks any address in it). The zero Prefix for an address that is not an IP.
func clientPrefix(ip netip.Addr) netip.Prefix {
	ip = ip.Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

// DefaultMaxConns is the total connection cap that fits this process's limit on open files:
// all of them but a reserve for its own clients (Redis, Kafka, the store) and files.
func DefaultMaxConns() int {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return 0
	}
	const reserve = 1024
	return max(64, int(min(l.Cur, 1<<30))-reserve)
}
