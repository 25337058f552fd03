package api

import (
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Idle keep-alive connections are parked.
//
// net/http keeps a goroutine per connection, blocked in a read of the next request, with a 4 KB
// read buffer and a 4 KB write buffer: about 17 KB a connection once the goroutine's stack has
// grown to 8 KB serving one request, which it has. That is 170 MB for 10,000 idle keep-alive
// connections, more than the whole api otherwise holds. So a connection idle for ParkAfter
// leaves net/http: its read gives up (errParked), net/http closes it, which returns the buffers
// to its pools and ends the goroutine, and the close parks the TCP connection with a poller
// instead (Linux: an epoll set of our own, no goroutine; elsewhere nothing is parked). When
// bytes arrive, or the peer hangs up, the connection comes back through Accept as a new one,
// to a new goroutine; past the server's idle timeout a parked connection is closed, as net/http
// would have. A parked connection costs the socket and about 200 bytes.
//
// Only a read net/http makes to wait for the next request, with nothing buffered, may park:
// parkConn knows the wait from the StateIdle hook and the deadlines net/http sets around it
// (see wait), and an empty buffer from the read's length, which is the whole buffer only when
// it is empty (bufio moves what it holds to the front). So no byte of a pipelined request is
// ever dropped.

// parked counts the parked connections of every server in the process.
var parked atomic.Int64

var _ = promauto.NewGaugeFunc(prometheus.GaugeOpts{
	Name: "seckill_http_parked_connections",
	Help: "Idle keep-alive connections parked outside net/http, waiting for their next request.",
}, func() float64 { return float64(parked.Load()) })

// errParked ends net/http's wait for the next request on a connection that is being parked.
var errParked = errors.New("idle connection parked")

// parkListener hands net/http the connections it accepts, and the parked ones that became
// readable, as parkConns.
type parkListener struct {
	net.Listener
	after time.Duration
	p     *poller

	ready     chan acceptResult // accepted or woken connections
	done      chan struct{}     // closed by Close
	closeOnce sync.Once
}

type acceptResult struct {
	c   net.Conn
	err error
}

// parkIdle wraps ln so that connections idle for after are parked. after <= 0, or a platform
// without a poller, leaves ln as it is.
func parkIdle(ln net.Listener, after time.Duration) net.Listener {
	if after <= 0 {
		return ln
	}
	l := &parkListener{Listener: ln, after: after, ready: make(chan acceptResult, 64), done: make(chan struct{})}
	p, err := newPoller(l.woke)
	if err != nil {
		return ln
	}
	l.p = p
	go l.acceptLoop()
	return l
}

func (l *parkListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		select {
		case l.ready <- acceptResult{c, err}:
		case <-l.done:
			if c != nil {
				c.Close()
			}
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond) // as net/http backs off on temporary errors
		}
	}
}

// woke is the poller's: a parked connection has bytes to read, or was hung up on.
func (l *parkListener) woke(c *net.TCPConn) {
	select {
	case l.ready <- acceptResult{c: c}:
	case <-l.done:
		c.Close()
	}
}

// Accept returns the next new or woken connection.
func (l *parkListener) Accept() (net.Conn, error) {
	select {
	case r := <-l.ready:
		if r.err != nil {
			return nil, r.err
		}
		if tc, ok := r.c.(*net.TCPConn); ok {
			return &parkConn{TCPConn: tc, l: l}, nil
		}
		return r.c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes the parked connections.
func (l *parkListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() {
		close(l.done)
		l.p.close()
		for {
			select {
			case r := <-l.ready:
				if r.c != nil {
					r.c.Close()
				}
			default:
				return
			}
		}
	})
	return err
}

// parkConnState is the http.Server's ConnState hook: it tells a parkConn that net/http is about
// to wait for its next request.
func parkConnState(c net.Conn, st http.ConnState) {
	if pc, ok := c.(*parkConn); ok && st == http.StateIdle {
		pc.mu.Lock()
		pc.wait = waitHooked
		pc.mu.Unlock()
	}
}

// wait follows net/http's wait for the next request: the StateIdle hook, then the idle timeout's
// SetReadDeadline, then a read only if fewer than 4 bytes are buffered, then the header
// timeout's SetReadDeadline. Only a read between the two deadlines is the wait: when the buffer
// held enough, the second deadline disarms it before readRequest reads on.
const (
	waitNone   = iota
	waitHooked // StateIdle ran
	waitArmed  // and the idle deadline was set: the next read, if any before the next deadline, is the wait
)

// parkConn is a TCP connection as net/http sees it.
type parkConn struct {
	*net.TCPConn
	l *parkListener

	maxRead int  // the longest read asked for: the read buffer's size; reads are serial
	parking bool // the read gave up to park: Close parks; set and read by net/http's goroutine

	mu       sync.Mutex
	wait     int       // waitNone, waitHooked or waitArmed
	deadline time.Time // the read deadline net/http asked for
	gen      uint64    // counts SetReadDeadline and SetDeadline calls
}

func (c *parkConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setDeadline(t)
	return c.TCPConn.SetReadDeadline(t)
}

func (c *parkConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setDeadline(t)
	return c.TCPConn.SetDeadline(t)
}

// setDeadline records a read deadline net/http set, and moves the wait on; c.mu is held.
func (c *parkConn) setDeadline(t time.Time) {
	c.deadline, c.gen = t, c.gen+1
	if c.wait == waitHooked {
		c.wait = waitArmed
	} else {
		c.wait = waitNone
	}
}

func (c *parkConn) Read(p []byte) (int, error) {
	c.maxRead = max(c.maxRead, len(p))
	c.mu.Lock()
	waiting := c.wait == waitArmed
	c.wait = waitNone
	if !waiting || len(p) < c.maxRead {
		c.mu.Unlock()
		return c.TCPConn.Read(p)
	}
	deadline, gen := c.deadline, c.gen
	parkAt := time.Now().Add(c.l.after)
	if !deadline.IsZero() && !deadline.After(parkAt) {
		c.mu.Unlock()
		return c.TCPConn.Read(p) // the idle timeout comes first: net/http closes it
	}
	c.TCPConn.SetReadDeadline(parkAt)
	c.mu.Unlock()
	n, err := c.TCPConn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen { // someone set a deadline meanwhile: theirs stands, and so does the answer
		return n, err
	}
	if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		c.parking = true
		return 0, errParked
	}
	// With the 4 bytes net/http peeks for, its readRequest sets the header deadline before
	// anything else: putting the idle one back would be a second timer change per request for
	// nothing. With fewer, it reads again first, and that read must wait as net/http asked.
	if n < 4 {
		c.TCPConn.SetReadDeadline(deadline)
	}
	return n, err
}

// Close parks the connection when its read gave up to park, and closes it otherwise.
func (c *parkConn) Close() error {
	if c.parking {
		c.parking = false
		c.mu.Lock()
		until := c.deadline
		c.mu.Unlock()
		if c.l.p.park(c.TCPConn, until) {
			return nil
		}
	}
	return c.TCPConn.Close()
}
