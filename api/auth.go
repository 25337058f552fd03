package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"

	"github.com/seckill/seckill/events"
)

// MinSecretLen is the shortest JWT secret accepted: RFC 7518 §3.2 asks HS256 keys to be at
// least as long as the hash, 256 bits.
const MinSecretLen = 32

// tokenLeeway absorbs clock skew between the host that mints a token and the api.
const tokenLeeway = 5 * time.Second

// MintToken returns an HS256 JWT naming user (sub), valid for ttl from now, issued by issuer and
// for audience when they are not empty. It is what `seckill token` prints.
func MintToken(secret []byte, issuer, audience, user string, ttl time.Duration, now time.Time) (string, error) {
	switch {
	case len(secret) < MinSecretLen:
		return "", fmt.Errorf("the JWT secret must be at least %d bytes", MinSecretLen)
	case !events.ValidUser(user):
		return "", fmt.Errorf("user %q: want 1 to %d printable characters", user, events.MaxUserLen)
	case ttl <= 0:
		return "", fmt.Errorf("ttl %v: want a positive duration", ttl)
	}
	claims := jwt.RegisteredClaims{
		Subject:   user,
		Issuer:    issuer,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}
	if audience != "" {
		claims.Audience = jwt.ClaimStrings{audience}
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}

// verifier checks buyers' bearer tokens with golang-jwt: HS256 only, exp required, iss and aud
// when configured, strict base64. Claims are read into a map, whose keys match exactly ("SUB" is
// not "sub"; encoding/json would match a struct's fields case-insensitively).
type verifier struct {
	secret []byte
	parser *jwt.Parser
	now    func() time.Time // time.Now; the tests stop the clock
}

func newVerifier(secret []byte, issuer, audience string) *verifier {
	v := &verifier{secret: secret, now: time.Now}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(tokenLeeway),
		jwt.WithStrictDecoding(),
		jwt.WithTimeFunc(func() time.Time { return v.now() }),
	}
	if issuer != "" {
		opts = append(opts, jwt.WithIssuer(issuer))
	}
	if audience != "" {
		opts = append(opts, jwt.WithAudience(audience)) // aud required: RFC 7519 §4.1.3
	}
	v.parser = jwt.NewParser(opts...)
	return v
}

// maxTokenLen bounds the work a forged token can cost.
const maxTokenLen = 4096

// errTokenType refuses a header whose typ says the token is something else than a JWT (RFC 8725
// §3.11: a token of another kind signed with the same key must not pass as a buyer's).
var errTokenType = errors.New(`typ is not "JWT"`)

// isJWTType reports whether a header's typ names the JWT media type. typ is a media type,
// whose name has no case, and one without a "/" has "application/" before it (RFC 7515
// §4.1.9): "jwt" and "application/jwt" are what "JWT" is, and a login service's library may
// write either; another type ("at+jwt", RFC 8725 §3.11) is still refused.
func isJWTType(typ any) bool {
	s, ok := typ.(string)
	return ok && (strings.EqualFold(s, "JWT") || strings.EqualFold(s, "application/JWT"))
}

// errCritical refuses a header that names extensions the verifier must understand.
var errCritical = errors.New("crit names extensions this verifier does not know")

// user returns the buyer a token names, and until when the token is accepted: its exp, which
// every token has, and the leeway.
func (v *verifier) user(raw string) (string, time.Time, error) {
	if len(v.secret) == 0 {
		return "", time.Time{}, events.Errorf(events.Unauthorized, "this server accepts no bearer tokens for buyers")
	}
	if len(raw) > maxTokenLen {
		return "", time.Time{}, events.Errorf(events.Unauthorized, "bearer token longer than %d bytes", maxTokenLen)
	}
	claims := jwt.MapClaims{}
	_, err := v.parser.ParseWithClaims(raw, claims, func(t *jwt.Token) (any, error) {
		if typ, ok := t.Header["typ"]; ok && !isJWTType(typ) {
			return nil, errTokenType
		}
		if _, ok := t.Header["crit"]; ok { // extensions we do not understand: RFC 7515 §4.1.11
			return nil, errCritical
		}
		return v.secret, nil
	})
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "", time.Time{}, events.Wrap(events.Unauthorized, err, "the bearer token has expired")
	case err != nil:
		return "", time.Time{}, events.Wrap(events.Unauthorized, err, "invalid bearer token")
	}
	// Decoding replaced invalid UTF-8 with U+FFFD, which events.ValidUser refuses; a sub that is
	// not a string is no sub.
	sub, ok := claims["sub"].(string)
	if !ok || !events.ValidUser(sub) {
		return "", time.Time{}, events.Errorf(events.Unauthorized, "the bearer token's sub is not a valid user id")
	}
	// The parser required exp and checked it is a number: this only keeps a change of its
	// options from turning into a nil dereference.
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		return "", time.Time{}, events.Errorf(events.Unauthorized, "the bearer token has no valid exp")
	}
	return sub, exp.Add(tokenLeeway), nil
}

// buyer authenticates the buyer of a request and charges it to the buyer's rate limit. With the
// insecure header on, X-User-ID names the buyer when it is present; otherwise the bearer token
// does. A user id never comes from a body. It also returns until when the bearer token is
// accepted, for what outlasts the request (an event stream); zero when X-User-ID named the buyer.
func (s *Server) buyer(c echo.Context) (string, time.Time, error) {
	u, until, err := s.identify(c)
	if err != nil {
		return "", time.Time{}, err
	}
	if err := s.userLimit.charge(c, u); err != nil {
		return "", time.Time{}, err
	}
	return u, until, nil
}

func (s *Server) identify(c echo.Context) (string, time.Time, error) {
	h := c.Request().Header
	if s.cfg.InsecureUserHeader {
		if vs := h.Values("X-User-ID"); len(vs) > 0 {
			if len(vs) > 1 || !events.ValidUser(vs[0]) {
				return "", time.Time{}, events.Errorf(events.Unauthorized, "X-User-ID must be one header of 1 to %d printable characters", events.MaxUserLen)
			}
			return vs[0], time.Time{}, nil
		}
	}
	auth := h.Get("Authorization")
	if auth == "" {
		if s.cfg.InsecureUserHeader {
			return "", time.Time{}, events.Errorf(events.Unauthorized, "name the buyer with a bearer token or the X-User-ID header")
		}
		return "", time.Time{}, events.Errorf(events.Unauthorized, "this endpoint needs the buyer's bearer token")
	}
	raw, ok := cutBearer(auth)
	if !ok {
		return "", time.Time{}, events.Errorf(events.Unauthorized, "the Authorization header must be \"Bearer <token>\"")
	}
	return s.tokens.user(raw)
}

// cutBearer returns the token of an Authorization header of the Bearer scheme, whose name is
// case-insensitive (RFC 9110 §11.1) and ends with one space or more (§11.4).
func cutBearer(auth string) (string, bool) {
	scheme, token, ok := strings.Cut(auth, " ")
	token = strings.TrimLeft(token, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// sameSecret compares a presented secret with the real one in time that tells nothing of
// either: subtle.ConstantTimeCompare returns at once on a length mismatch, which would say how
// long the real one is, so it compares their SHA-256 digests.
func sameSecret(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// admin lets a request through only with the admin bearer token; with no token configured it
// lets none through.
func (s *Server) admin(next echo.HandlerFunc) echo.HandlerFunc {
	return s.bearer(next, "this endpoint needs the admin bearer token", s.cfg.AdminToken)
}

// payer lets the payment token through as well as the admin token.
func (s *Server) payer(next echo.HandlerFunc) echo.HandlerFunc {
	return s.bearer(next, "this endpoint needs the payment or the admin bearer token", s.cfg.AdminToken, s.cfg.PaymentToken)
}

// bearer lets through a request whose bearer token is one of tokens (an empty one matches
// nothing), and refuses the others with refusal.
func (s *Server) bearer(next echo.HandlerFunc, refusal string, tokens ...string) echo.HandlerFunc {
	return func(c echo.Context) error {
		got, ok := cutBearer(c.Request().Header.Get("Authorization"))
		for _, want := range tokens {
			if ok && want != "" && sameSecret(got, want) {
				return next(c)
			}
		}
		return events.Errorf(events.Unauthorized, "%s", refusal)
	}
}
