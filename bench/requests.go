package bench

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"hash"
	"strconv"
	"time"
)

// Identity is how the load generator names the buyer of a purchase: the X-User-ID header (the
// api started with its insecure header setting, or dev), or an HS256 JWT bearer token minted
// per request with the api's secret.
type Identity struct {
	// Secret, when set, makes every request carry "Authorization: Bearer <JWT>" with sub = the
	// user id, signed HS256 with Secret. Empty: the X-User-ID header.
	Secret []byte
	// Issuer is the token's iss claim; empty leaves it out.
	Issuer string
	// TTL is how long the tokens are valid. Default: 1h.
	TTL time.Duration
}

// Mode names the identity for reports: "x-user-id" or "jwt".
func (id Identity) Mode() string {
	if len(id.Secret) > 0 {
		return "jwt"
	}
	return "x-user-id"
}

var jwtHeader = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))

// minter appends identity headers; one per worker.
type minter struct {
	id       Identity
	mac      hash.Hash
	iat, exp int64
	claims   []byte
	sig      []byte
}

func (id Identity) minter() *minter {
	m := &minter{id: id}
	if len(id.Secret) > 0 {
		ttl := id.TTL
		if ttl <= 0 {
			ttl = time.Hour
		}
		now := time.Now()
		m.mac = hmac.New(sha256.New, id.Secret)
		m.iat, m.exp = now.Unix(), now.Add(ttl).Unix()
	}
	return m
}

// appendHeader appends the header that names user, with its CRLF.
func (m *minter) appendHeader(dst []byte, user []byte) []byte {
	if m.mac == nil {
		dst = append(dst, "X-User-ID: "...)
		dst = append(dst, user...)
		return append(dst, "\r\n"...)
	}
	dst = append(dst, "Authorization: Bearer "...)
	dst = m.appendToken(dst, user)
	return append(dst, "\r\n"...)
}

// appendToken appends a signed HS256 JWT for user.
func (m *minter) appendToken(dst []byte, user []byte) []byte {
	c := append(m.claims[:0], `{"sub":`...)
	c = appendJSONString(c, user)
	if m.id.Issuer != "" {
		c = append(c, `,"iss":`...)
		c = appendJSONString(c, []byte(m.id.Issuer))
	}
	c = append(c, `,"iat":`...)
	c = strconv.AppendInt(c, m.iat, 10)
	c = append(c, `,"exp":`...)
	c = strconv.AppendInt(c, m.exp, 10)
	c = append(c, '}')
	m.claims = c

	start := len(dst)
	dst = append(dst, jwtHeader...)
	dst = append(dst, '.')
	dst = base64.RawURLEncoding.AppendEncode(dst, c)
	m.mac.Reset()
	m.mac.Write(dst[start:])
	m.sig = m.mac.Sum(m.sig[:0])
	dst = append(dst, '.')
	return base64.RawURLEncoding.AppendEncode(dst, m.sig)
}

func appendJSONString(dst, s []byte) []byte {
	b, _ := json.Marshal(string(s)) // user ids and issuers are short; only minting pays this
	return append(dst, b...)
}

// Users names the buyers of a load: request i is bought by user (i * stride) mod n, so each
// user's purchases are spread over the run rather than back to back.
type Users struct {
	N      int64  // how many users
	Prefix string // user ids are Prefix + number
}

// stride is a prime that shares no factor with any realistic user count, so i -> i*stride mod n
// visits every user once per n requests.
const stride = 1_000_003

func (u Users) appendUser(dst []byte, i int64) []byte {
	n := max(u.N, 1)
	k := (i % n) * (stride % n) % n
	if stride%n == 0 {
		k = i % n
	}
	dst = append(dst, u.Prefix...)
	return strconv.AppendInt(dst, k, 10)
}

// PurchaseRequests returns a NewRequester of POST /v1/campaigns/{campaign}/purchases with
// {"quantity":1}, each by the user of its index.
func PurchaseRequests(host, campaign string, users Users, id Identity) func() Requester {
	const body = `{"quantity":1}`
	head := "POST /v1/campaigns/" + campaign + "/purchases HTTP/1.1\r\nHost: " + host +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n"
	return func() Requester {
		m := id.minter()
		var user []byte
		return func(i int64, dst []byte) []byte {
			user = users.appendUser(user[:0], i)
			dst = append(dst, head...)
			dst = m.appendHeader(dst, user)
			dst = append(dst, "\r\n"...)
			return append(dst, body...)
		}
	}
}

// GetRequests returns a NewRequester of GET path, the same request every time.
func GetRequests(host, path string) func() Requester {
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
	return func() Requester {
		return func(_ int64, dst []byte) []byte { return append(dst, req...) }
	}
}
