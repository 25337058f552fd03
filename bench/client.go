package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// conn is one keep-alive HTTP/1.1 client connection that sends prepared request bytes and reads
// the status and body of each answer. It does what the load generator needs and no more: on a
// 2-core machine shared with the server under test, net/http's client would spend a large part
// of the CPU the server should get (header maps, a goroutine pair per connection, allocations
// per request), and every scenario pays the same small cost here.
type conn struct {
	addr    string
	timeout time.Duration
	c       net.Conn
	br      *bufio.Reader
	body    []byte
}

// errMalformed reports an answer that is not HTTP/1.1 as this client reads it.
var errMalformed = errors.New("malformed HTTP response")

func newConn(addr string, timeout time.Duration) *conn {
	return &conn{addr: addr, timeout: timeout}
}

func (c *conn) dial() error {
	nc, err := net.DialTimeout("tcp", c.addr, c.timeout)
	if err != nil {
		return err
	}
	c.c = nc
	if c.br == nil {
		c.br = bufio.NewReaderSize(nc, 16<<10)
	} else {
		c.br.Reset(nc)
	}
	return nil
}

// close drops the connection; the next roundTrip dials again.
func (c *conn) close() {
	if c.c != nil {
		c.c.Close()
		c.c = nil
	}
}

// roundTrip sends req (a whole HTTP/1.1 request) and returns the answer's status code and body.
// The body is valid until the next call. Any error closes the connection.
func (c *conn) roundTrip(req []byte) (int, []byte, error) {
	if c.c == nil {
		if err := c.dial(); err != nil {
			return 0, nil, err
		}
	}
	if c.timeout > 0 {
		c.c.SetDeadline(time.Now().Add(c.timeout))
	}
	status, body, keep, err := c.exchange(req)
	if err != nil || !keep {
		c.close()
	}
	return status, body, err
}

func (c *conn) exchange(req []byte) (status int, body []byte, keep bool, err error) {
	if _, err := c.c.Write(req); err != nil {
		return 0, nil, false, err
	}
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, nil, false, err
	}
	// "HTTP/1.1 202 Accepted\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, nil, false, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, false, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	keep = line[7] == '1'
	length, chunked := -1, false
	for {
		h, err := c.br.ReadSlice('\n')
		if err != nil {
			return 0, nil, false, err
		}
		if len(h) <= 2 { // the blank line that ends the headers
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return 0, nil, false, fmt.Errorf("%w: header %q", errMalformed, h)
		}
		value = bytes.TrimSpace(value)
		switch {
		case asciiEqualFold(name, "content-length"):
			length, err = strconv.Atoi(string(value))
			if err != nil || length < 0 {
				return 0, nil, false, fmt.Errorf("%w: content-length %q", errMalformed, value)
			}
		case asciiEqualFold(name, "transfer-encoding"):
			chunked = asciiEqualFold(value, "chunked")
		case asciiEqualFold(name, "connection"):
			if asciiEqualFold(value, "close") {
				keep = false
			} else if asciiEqualFold(value, "keep-alive") {
				keep = true
			}
		}
	}
	c.body = c.body[:0]
	switch {
	case chunked:
		err = c.readChunked()
	case length >= 0:
		c.body = grow(c.body, length)
		_, err = io.ReadFull(c.br, c.body)
	default: // no length: the body runs to the end of the connection
		keep = false
		var b bytes.Buffer
		_, err = b.ReadFrom(c.br)
		c.body = append(c.body, b.Bytes()...)
	}
	if err != nil {
		return 0, nil, false, err
	}
	return status, c.body, keep, nil
}

func (c *conn) readChunked() error {
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		sz, _, _ := bytes.Cut(bytes.TrimSpace(line), []byte(";"))
		n, err := strconv.ParseInt(string(sz), 16, 32)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: chunk size %q", errMalformed, line)
		}
		if n == 0 {
			for { // trailers, then the blank line
				t, err := c.br.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(t) <= 2 {
					return nil
				}
			}
		}
		start := len(c.body)
		c.body = grow(c.body, start+int(n))
		if _, err := io.ReadFull(c.br, c.body[start:]); err != nil {
			return err
		}
		if _, err := c.br.Discard(2); err != nil { // the chunk's CRLF
			return err
		}
	}
}

// grow returns b resized to n bytes, reusing its array when it can.
func grow(b []byte, n int) []byte {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]byte, n, max(n, 2*cap(b)))
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x := b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if x != s[i] {
			return false
		}
	}
	return true
}

// errorCode returns the error code of a seckill error body ({"error":{"code":"sold_out",…}}),
// or nil — found by a scan rather than a JSON decode, to keep the load generator cheap.
func errorCode(body []byte) []byte {
	const key = `"code":"`
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return nil
	}
	rest := body[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 || j > 64 {
		return nil
	}
	return rest[:j]
}
