package api

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The buyers' HS256 tokens are verified here rather than by golang-jwt, whose parser decodes the
// header into a map and the claims by reflection: that was a fifth of the api's CPU under a
// flash crowd. The rules are golang-jwt's with the options the api used, WithValidMethods(HS256),
// WithExpirationRequired, WithLeeway(tokenLeeway), WithStrictDecoding and WithIssuer when one is
// configured, down to encoding/json's quirks in the claims (keys matched case-insensitively,
// numeric dates also as strings of a number), which the differential fuzz test holds it to. It
// is stricter in three ways, none of which a token from MintToken meets: a header whose typ is
// not a string or that has crit, and a header parameter or registered claim named twice, are
// refused (golang-jwt ignores typ and crit and keeps the last duplicate).

// b64 decodes segments as golang-jwt's WithStrictDecoding does: no padding, no stray bits.
var b64 = base64.RawURLEncoding.Strict()

// tokenVerdict is the outcome of checking a token, before it becomes an api error.
type tokenVerdict int

const (
	tokenValid tokenVerdict = iota
	tokenInvalid
	tokenExpired
	tokenBadSub
)

// tokenScratch is one verification's working memory, pooled so that a token costs no
// allocation but its user id.
type tokenScratch struct {
	mac hash.Hash // HMAC-SHA256 keyed with the secret
	raw []byte    // the token's bytes: hmac and base64 take []byte
	dec []byte    // a decoded segment
	sum [sha256.Size]byte
}

// headerSlots bounds the remembered header segments: one per token minter is plenty.
const headerSlots = 4

// hs256 checks HS256 compact JWS tokens.
type hs256 struct {
	issuer  string
	scratch sync.Pool // *tokenScratch
	// headers holds header segments already found valid, of tokens whose signature verified:
	// nearly every token has the same header, and deciding it again was a tenth of the check.
	headers    [headerSlots]atomic.Pointer[string]
	nextHeader atomic.Uint32
}

func newHS256(secret []byte, issuer string) *hs256 {
	key := bytes.Clone(secret)
	h := &hs256{issuer: issuer}
	h.scratch.New = func() any { return &tokenScratch{mac: hmac.New(sha256.New, key)} }
	return h
}

// verify checks raw at now and returns the user its sub names.
func (h *hs256) verify(raw string, now time.Time) (string, tokenVerdict) {
	hdr, rest, ok := strings.Cut(raw, ".")
	if !ok {
		return "", tokenInvalid
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(sig, ".") {
		return "", tokenInvalid
	}
	s := h.scratch.Get().(*tokenScratch)
	defer h.scratch.Put(s)
	s.raw = append(s.raw[:0], raw...)
	signed := s.raw[:len(hdr)+1+len(payload)]

	// The signature first: nothing of a forged token is parsed.
	s.mac.Reset()
	s.mac.Write(signed)
	sum := s.mac.Sum(s.sum[:0])
	got, ok := s.decode(s.raw[len(signed)+1:])
	if !ok || !hmac.Equal(got, sum) {
		return "", tokenInvalid
	}
	if !h.knownHeader(hdr) {
		dec, ok := s.decode(s.raw[:len(hdr)])
		if !ok || !validHeader(dec) {
			return "", tokenInvalid
		}
		h.rememberHeader(hdr)
	}
	dec, ok := s.decode(s.raw[len(hdr)+1 : len(signed)])
	if !ok {
		return "", tokenInvalid
	}
	c, ok := parseClaims(dec)
	if !ok {
		return "", tokenInvalid
	}
	// As golang-jwt's validator: every failed check is reported, so an expired token is
	// "expired" whatever else is wrong with its claims.
	switch {
	case !c.hasExp:
		return "", tokenInvalid
	case !now.Before(c.exp.Add(tokenLeeway)):
		return "", tokenExpired
	case c.hasNbf && now.Before(c.nbf.Add(-tokenLeeway)):
		return "", tokenInvalid
	case h.issuer != "" && string(c.iss) != h.issuer:
		return "", tokenInvalid
	}
	user := string(c.sub)
	if !ValidUser(user) {
		return "", tokenBadSub
	}
	return user, tokenValid
}

// decode decodes one base64url segment into s.dec.
func (s *tokenScratch) decode(seg []byte) ([]byte, bool) {
	n := b64.DecodedLen(len(seg))
	if cap(s.dec) < n {
		s.dec = make([]byte, n)
	}
	n, err := b64.Decode(s.dec[:n], seg)
	return s.dec[:n], err == nil
}

func (h *hs256) knownHeader(seg string) bool {
	for i := range h.headers {
		if p := h.headers[i].Load(); p != nil && *p == seg {
			return true
		}
	}
	return false
}

// rememberHeader keeps seg, replacing the oldest when all slots are taken: only the holder of
// the secret can make a header get here.
func (h *hs256) rememberHeader(seg string) {
	seg = strings.Clone(seg) // not a slice of the request's header
	h.headers[h.nextHeader.Add(1)%headerSlots].Store(&seg)
}

// validHeader reports whether b is a JOSE header golang-jwt would take for HS256: a JSON object
// whose alg is "HS256"; other members are ignored, except that typ must be a string and crit
// (an extension this verifier cannot understand) must be absent.
func validHeader(b []byte) bool {
	p := jsonParser{b: b}
	var sawAlg, sawTyp bool
	ok := p.object(func(key []byte) bool {
		switch string(key) {
		case "alg":
			v, ok := p.stringValue()
			if !ok || sawAlg || string(v) != "HS256" {
				return false
			}
			sawAlg = true
		case "typ":
			if _, ok := p.stringValue(); !ok || sawTyp {
				return false
			}
			sawTyp = true
		case "crit":
			return false
		default:
			return p.skipValue()
		}
		return true
	})
	return ok && sawAlg
}

// tokenClaims are the claims the api reads.
type tokenClaims struct {
	iss, sub       []byte
	exp, nbf       time.Time
	hasExp, hasNbf bool
}

// The registered claims, in the order of claimNames.
const (
	claimIss = iota
	claimSub
	claimAud
	claimExp
	claimNbf
	claimIat
	claimJti
)

var claimNames = [...]string{"iss", "sub", "aud", "exp", "nbf", "iat", "jti"}

// parseClaims reads a claims set as encoding/json decodes it into jwt.RegisteredClaims: a
// member is a registered claim when its name equals one case-insensitively (bytes.EqualFold);
// iss, sub and jti are strings or null; exp, nbf and iat numbers, strings holding a JSON number,
// or null; aud a string, an array of strings or null. Other members may be any JSON value.
func parseClaims(b []byte) (tokenClaims, bool) {
	var c tokenClaims
	var seen uint8
	p := jsonParser{b: b}
	ok := p.object(func(key []byte) bool {
		claim := claimOf(key)
		if claim < 0 {
			return p.skipValue()
		}
		if seen&(1<<claim) != 0 {
			return false
		}
		seen |= 1 << claim
		var ok bool
		switch claim {
		case claimIss, claimSub, claimJti:
			if p.null() {
				return true
			}
			s, ok := p.stringValue()
			switch claim { // jti is read only to be checked
			case claimIss:
				c.iss = s
			case claimSub:
				c.sub = s
			}
			return ok
		case claimExp:
			c.exp, c.hasExp, ok = p.numericDate()
			return ok
		case claimNbf:
			c.nbf, c.hasNbf, ok = p.numericDate()
			return ok
		case claimIat:
			_, _, ok = p.numericDate()
			return ok
		}
		return p.audience()
	})
	return c, ok
}

// claimOf returns the index of the registered claim key names, or -1.
func claimOf(key []byte) int {
	if len(key) == 3 { // the usual spelling: ASCII letters, compared without case
		for i, name := range claimNames {
			if key[0]|0x20 == name[0] && key[1]|0x20 == name[1] && key[2]|0x20 == name[2] {
				return i
			}
		}
		return -1
	}
	if len(key) < 3 || len(key) > 3*utf8.UTFMax {
		return -1
	}
	for i, name := range claimNames { // a name folded from non-ASCII, as "ſub"
		if bytes.EqualFold(key, []byte(name)) {
			return i
		}
	}
	return -1
}

// numericDate reads a NumericDate as jwt.NumericDate.UnmarshalJSON does, or null (ok, absent).
func (p *jsonParser) numericDate() (t time.Time, present, ok bool) {
	var num []byte
	switch {
	case p.null():
		return time.Time{}, false, true
	case p.peek() == '"':
		s, ok := p.stringValue()
		if !ok || numberEnd(s, 0) != len(s) {
			return time.Time{}, false, false
		}
		num = s
	default:
		end := numberEnd(p.b, p.i)
		if end < 0 {
			return time.Time{}, false, false
		}
		num, p.i = p.b[p.i:end], end
	}
	if len(num) <= 15 { // whole seconds, as every minter writes them: exact without floats
		var n int64
		for _, c := range num {
			if c < '0' || c > '9' {
				n = -1
				break
			}
			n = 10*n + int64(c-'0')
		}
		if n >= 0 {
			return time.Unix(n, 0), true, true
		}
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil {
		return time.Time{}, false, false
	}
	// golang-jwt's newNumericDateFromSeconds, with its default TimePrecision.
	round, frac := math.Modf(f)
	return time.Unix(int64(round), int64(frac*1e9)).Truncate(time.Second), true, true
}

// audience reads aud as jwt.ClaimStrings.UnmarshalJSON does: a string, an array of strings, or
// null.
func (p *jsonParser) audience() bool {
	if p.null() {
		return true
	}
	if p.peek() != '[' {
		_, ok := p.stringValue()
		return ok
	}
	p.i++
	return p.list(']', func() bool {
		_, ok := p.stringValue()
		return ok
	})
}

// jsonParser reads the JSON of a token's segments with encoding/json's grammar and string
// decoding, without reflection; strings come back as slices of the input unless they hold
// escapes or invalid UTF-8.
type jsonParser struct {
	b []byte
	i int
}

func (p *jsonParser) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *jsonParser) ws() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

// object reads the whole input as one object, handing each member's unquoted key to member,
// which must consume the value (after white space) and report whether it is acceptable.
func (p *jsonParser) object(member func(key []byte) bool) bool {
	p.ws()
	if p.peek() != '{' {
		return false
	}
	p.i++
	if !p.members(member) {
		return false
	}
	p.ws()
	return p.i == len(p.b) // nothing after the object
}

// members reads an object's members after its '{', through its '}', as object does.
func (p *jsonParser) members(member func(key []byte) bool) bool {
	return p.list('}', func() bool {
		key, ok := p.stringValue()
		if !ok {
			return false
		}
		p.ws()
		if p.peek() != ':' {
			return false
		}
		p.i++
		p.ws()
		return member(key)
	})
}

// list reads the comma-separated items of an array or object after its opening bracket,
// through the closing one; item consumes one item and reports whether it is acceptable.
func (p *jsonParser) list(closing byte, item func() bool) bool {
	p.ws()
	if p.peek() == closing {
		p.i++
		return true
	}
	for {
		if !item() {
			return false
		}
		p.ws()
		switch p.peek() {
		case ',':
			p.i++
			p.ws()
		case closing:
			p.i++
			return true
		default:
			return false
		}
	}
}

// null consumes a null literal if one is next.
func (p *jsonParser) null() bool {
	if bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		p.i += 4
		return true
	}
	return false
}

// stringValue reads a string and returns it unquoted as encoding/json does.
func (p *jsonParser) stringValue() ([]byte, bool) {
	if p.peek() != '"' {
		return nil, false
	}
	start := p.i + 1
	plain := true // no escapes, all ASCII: the string is its bytes
	for i := start; i < len(p.b); i++ {
		switch c := p.b[i]; {
		case c == '"':
			p.i = i + 1
			if plain {
				return p.b[start:i], true
			}
			return unquote(p.b[start:i]), true
		case c < 0x20:
			return nil, false
		case c == '\\':
			plain = false
			i++
			if i == len(p.b) {
				return nil, false
			}
			switch p.b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(p.b) || !isHex(p.b[i+1]) || !isHex(p.b[i+2]) || !isHex(p.b[i+3]) || !isHex(p.b[i+4]) {
					return nil, false
				}
				i += 4
			default:
				return nil, false
			}
		case c >= utf8.RuneSelf:
			plain = false
		}
	}
	return nil, false
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// unquote decodes the escapes of a string's well-formed content and replaces each byte of
// invalid UTF-8 with U+FFFD, as encoding/json's unquoteBytes.
func unquote(s []byte) []byte {
	b := make([]byte, 0, len(s)+utf8.UTFMax)
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\':
			switch s[r+1] {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				rr := hex4(s[r+2:])
				r += 6
				if utf16.IsSurrogate(rr) {
					if r+6 <= len(s) && s[r] == '\\' && s[r+1] == 'u' {
						if dec := utf16.DecodeRune(rr, hex4(s[r+2:])); dec != unicode.ReplacementChar {
							b = utf8.AppendRune(b, dec)
							r += 6
							continue
						}
					}
					rr = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, rr)
				continue
			default: // '"', '\\', '/'
				b = append(b, s[r+1])
			}
			r += 2
		case c < utf8.RuneSelf:
			b = append(b, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			b = utf8.AppendRune(b, rr) // U+FFFD for each invalid byte
			r += size
		}
	}
	return b
}

// hex4 decodes the four hex digits a well-formed \u escape has.
func hex4(s []byte) rune {
	var r rune
	for _, c := range s[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// numberEnd returns where the JSON number starting at b[i] ends, or -1 if none starts there.
func numberEnd(b []byte, i int) int {
	digits := func() bool {
		start := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i > start
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return -1
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return -1
		}
	}
	return i
}

// skipValue consumes any JSON value.
func (p *jsonParser) skipValue() bool {
	switch c := p.peek(); c {
	case '"':
		_, ok := p.stringValue()
		return ok
	case '{':
		p.i++
		return p.members(func([]byte) bool { return p.skipValue() })
	case '[':
		p.i++
		return p.list(']', p.skipValue)
	case 't', 'f', 'n':
		for _, lit := range [...]string{"true", "false", "null"} {
			if bytes.HasPrefix(p.b[p.i:], []byte(lit)) {
				p.i += len(lit)
				return true
			}
		}
		return false
	}
	end := numberEnd(p.b, p.i)
	if end < 0 {
		return false
	}
	p.i = end
	return true
}
