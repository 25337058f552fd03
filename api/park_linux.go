package api

import (
	"net"
	"sync"
	"syscall"
	"time"
)

// poller holds parked connections in an epoll set of its own, so that they need no goroutine,
// and hands each back when it becomes readable or hung up (one shot), or closes it at its
// deadline.
type poller struct {
	epfd int
	woke func(*net.TCPConn)

	mu     sync.Mutex
	conns  map[int32]*parkedConn // by file descriptor
	seq    int32                 // tells a descriptor's parkings apart in the events
	closed bool
}

type parkedConn struct {
	c     *net.TCPConn
	seq   int32
	until time.Time // zero: no deadline
}

// pollEvery bounds how late a parked connection is closed after its deadline.
const pollEvery = time.Second

func newPoller(woke func(*net.TCPConn)) (*poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	p := &poller{epfd: epfd, woke: woke, conns: map[int32]*parkedConn{}}
	go p.loop()
	return p, nil
}

// park holds c until it has something to read or until; it reports false when it cannot, and
// the caller closes c.
func (p *poller) park(c *net.TCPConn, until time.Time) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	fd := int32(-1)
	if rc.Control(func(f uintptr) { fd = int32(f) }) != nil || fd < 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.seq++
	p.conns[fd] = &parkedConn{c: c, seq: p.seq, until: until}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: fd, Pad: p.seq}
	if err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev); err != nil {
		delete(p.conns, fd)
		return false
	}
	parked.Add(1)
	return true
}

// unpark forgets fd's connection; p.mu is held.
func (p *poller) unpark(fd int32) {
	delete(p.conns, fd)
	syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
	parked.Add(-1)
}

func (p *poller) loop() {
	evs := make([]syscall.EpollEvent, 128)
	lastSweep := time.Now()
	for {
		n, err := syscall.EpollWait(p.epfd, evs, int(pollEvery/time.Millisecond))
		var woken, expired []*net.TCPConn
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			syscall.Close(p.epfd)
			return
		}
		for _, ev := range evs[:max(n, 0)] {
			if pc := p.conns[ev.Fd]; pc != nil && pc.seq == ev.Pad {
				p.unpark(ev.Fd)
				woken = append(woken, pc.c)
			}
		}
		if now := time.Now(); now.Sub(lastSweep) >= pollEvery {
			lastSweep = now
			for fd, pc := range p.conns {
				if !pc.until.IsZero() && now.After(pc.until) {
					p.unpark(fd)
					expired = append(expired, pc.c)
				}
			}
		}
		p.mu.Unlock()
		for _, c := range expired {
			c.Close()
		}
		for _, c := range woken {
			c.SetReadDeadline(time.Time{}) // the parking one has passed
			p.woke(c)
		}
		if err != nil && err != syscall.EINTR {
			time.Sleep(pollEvery) // not expected; do not spin
		}
	}
}

// close closes the parked connections and refuses more; the loop closes the epoll set.
func (p *poller) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	for fd, pc := range p.conns {
		p.unpark(fd)
		pc.c.Close()
	}
}
