package api

import (
	"crypto/subtle"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"

	"github.com/seckill/seckill/events"
)

// MinSecretLen is the shortest JWT secret accepted: RFC 7518 §3.2 asks HS256 keys to be at
// least as long as the hash, 256 bits.
const MinSecretLen = 32

// maxUserLen bounds a user id: it travels in every event and reservation record.
const maxUserLen = 128

// tokenLeeway absorbs clock skew between the host that mints a token and the api.
const tokenLeeway = 5 * time.Second

// ValidUser reports whether id may name a buyer: 1 to 128 characters of valid UTF-8, none of
// them a control character.
func ValidUser(id string) bool {
	if id == "" || utf8.RuneCountInString(id) > maxUserLen || !utf8.ValidString(id) {
		return false
	}
	for _, r := range id {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// MintToken returns an HS256 JWT naming user (sub), valid for ttl from now, issued by issuer
// when it is not empty. It is what `seckill token` prints.
func MintToken(secret []byte, issuer, user string, ttl time.Duration, now time.Time) (string, error) {
	switch {
	case len(secret) < MinSecretLen:
		return "", fmt.Errorf("the JWT secret must be at least %d bytes", MinSecretLen)
	case !ValidUser(user):
		return "", fmt.Errorf("user %q: want 1 to %d printable characters", user, maxUserLen)
	case ttl <= 0:
		return "", fmt.Errorf("ttl %v: want a positive duration", ttl)
	}
	claims := jwt.RegisteredClaims{
		Subject:   user,
		Issuer:    issuer,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}

// verifier checks buyers' bearer tokens.
type verifier struct {
	secret []byte
	tokens *hs256
	now    func() time.Time // time.Now; the tests stop the clock
}

func newVerifier(secret []byte, issuer string) *verifier {
	return &verifier{secret: secret, tokens: newHS256(secret, issuer), now: time.Now}
}

// maxTokenLen bounds the work a forged token can cost.
const maxTokenLen = 4096

// user returns the buyer a token names.
func (v *verifier) user(raw string) (string, error) {
	if len(v.secret) == 0 {
		return "", events.Errorf(events.Unauthorized, "this server accepts no bearer tokens for buyers")
	}
	if len(raw) > maxTokenLen {
		return "", events.Errorf(events.Unauthorized, "bearer token longer than %d bytes", maxTokenLen)
	}
	user, verdict := v.tokens.verify(raw, v.now())
	switch verdict {
	case tokenValid:
		return user, nil
	case tokenExpired:
		return "", events.Errorf(events.Unauthorized, "the bearer token has expired")
	case tokenBadSub:
		return "", events.Errorf(events.Unauthorized, "the bearer token's sub is not a valid user id")
	}
	return "", events.Errorf(events.Unauthorized, "invalid bearer token")
}

// buyer authenticates the buyer of a request and charges it to the buyer's rate limit. With the
// insecure header on, X-User-ID names the buyer when it is present; otherwise the bearer token
// does. A user id never comes from a body.
func (s *Server) buyer(c echo.Context) (string, error) {
	u, err := s.identify(c)
	if err != nil {
		return "", err
	}
	if err := s.userLimit.charge(c, u); err != nil {
		return "", err
	}
	return u, nil
}

func (s *Server) identify(c echo.Context) (string, error) {
	h := c.Request().Header
	if s.cfg.InsecureUserHeader {
		if vs := h.Values("X-User-ID"); len(vs) > 0 {
			if len(vs) > 1 || !ValidUser(vs[0]) {
				return "", events.Errorf(events.Unauthorized, "X-User-ID must be one header of 1 to %d printable characters", maxUserLen)
			}
			return vs[0], nil
		}
	}
	auth := h.Get("Authorization")
	if auth == "" {
		if s.cfg.InsecureUserHeader {
			return "", events.Errorf(events.Unauthorized, "name the buyer with a bearer token or the X-User-ID header")
		}
		return "", events.Errorf(events.Unauthorized, "this endpoint needs the buyer's bearer token")
	}
	raw, ok := cutBearer(auth)
	if !ok {
		return "", events.Errorf(events.Unauthorized, "the Authorization header must be \"Bearer <token>\"")
	}
	return s.tokens.user(raw)
}

// cutBearer returns the token of an Authorization header of the Bearer scheme, whose name is
// case-insensitive (RFC 9110 §11.1).
func cutBearer(auth string) (string, bool) {
	scheme, token, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// admin lets a request through only with the admin bearer token; with no token configured it
// lets none through.
func (s *Server) admin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		got, ok := cutBearer(c.Request().Header.Get("Authorization"))
		if !ok || s.cfg.AdminToken == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.AdminToken)) != 1 {
			return events.Errorf(events.Unauthorized, "this endpoint needs the admin bearer token")
		}
		return next(c)
	}
}
