//go:build !linux

package api

import (
	"errors"
	"net"
	"time"
)

// poller parks nothing off Linux: idle connections stay in net/http.
type poller struct{}

func newPoller(func(*net.TCPConn)) (*poller, error) {
	return nil, errors.New("no poller on this platform")
}

func (p *poller) park(*net.TCPConn, time.Time) bool { return false }

func (p *poller) close() {}
