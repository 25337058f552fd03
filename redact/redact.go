// Package redact keeps passwords out of what seckill prints of the URLs it takes (PostgreSQL,
// Redis, Sentinel, Cluster): the URLs themselves, and the errors of parsing them, which net/url
// writes with a piece of the URL in them.
package redact

import (
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// ParseError is err, an error of parsing the URL s, told without any piece of s: net/url's
// errors quote the URL, an escape or a host, and any of them may hold a piece of a password.
func ParseError(s string, err error) error {
	switch {
	case err == nil:
		return nil
	case misplacedUserinfo(s):
		// The host, port or database an error would quote is then a piece of the password.
		return errors.New("an '@' after the host: percent-encode a '/', '?' or '#' in the user or password")
	case errors.As(err, new(url.EscapeError)):
		// Its message quotes the '%' and the two characters after it.
		return errors.New("a '%' not followed by two hex digits: percent-encode a '%' as %25")
	}
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		return ue.Err // its message quotes the URL
	}
	return err
}

// misplacedUserinfo reports whether s has an '@' after its authority: a user or password that
// holds '/', '?' or '#' unencoded ends the authority before the '@' that should end them.
func misplacedUserinfo(s string) bool {
	_, rest, _ := strings.Cut(s, "://")
	end := strings.IndexAny(rest, "/?#")
	return end >= 0 && strings.Contains(rest[end:], "@")
}

// URL is s with its passwords masked, for logs and errors: the user info's, and the
// query's (lib/pq takes a password from the query too); a query that does not parse is masked
// whole. It serves every URL a role takes (PostgreSQL, Redis, Sentinel, Cluster), including
// those net/url cannot parse (several hosts), and the malformed ones the usage errors print: a
// key=value DSN, or a URL whose scheme is mistyped or missing (postgres:/u:pw@h, u:pw@h).
func URL(s string) string {
	if keyValueDSN.MatchString(s) {
		// lib/pq's other form, which store.CheckURL refuses with it in its message.
		return dsnPassword.ReplaceAllString(s, "${1}xxxxx")
	}
	s, query, hasQuery := strings.Cut(s, "?")
	// start is where a user info would begin. Without "://" an '@' is still the tell of one:
	// what precedes it is a password however the scheme was mistyped, so only a prefix that
	// cannot be one (a scheme followed by slashes) is kept apart. A "://" further on (in a
	// path) is no scheme's.
	start := 0
	if m := slashedScheme.FindStringIndex(s); m != nil {
		start = m[1]
	}
	if at := strings.LastIndex(s, "@"); at >= start {
		if colon := strings.Index(s[start:at], ":"); colon >= 0 {
			s = s[:start+colon+1] + "xxxxx" + s[at:]
		}
	} else if at := strings.LastIndex(query, "@"); at >= 0 {
		// A password that holds an unencoded '?' cut the URL inside it: the '@' that ends
		// it is in what looks like the query. Nothing before that '@' can be told safe.
		return s[:start] + "xxxxx" + query[at:]
	}
	if !hasQuery {
		return s
	}
	q, err := url.ParseQuery(query)
	switch {
	case err != nil: // what it holds cannot be told apart
		return s + "?xxxxx"
	case slices.ContainsFunc(secretParams, q.Has):
		for _, k := range secretParams {
			if q.Has(k) {
				q.Set(k, "xxxxx")
			}
		}
		query = q.Encode()
	}
	return s + "?" + query
}

// secretParams are the query parameters that hold a secret: lib/pq and go-redis read a
// password from the query, a Sentinel URL carries the sentinels' own there (lua/redisurl),
// lib/pq's sslinline=true makes sslkey the client's private key itself (PEM), and libpq's
// sslpassword decrypts one. A key's path masked with them costs a log line little.
var secretParams = []string{"password", "sentinel_password", "sslkey", "sslpassword"}

var (
	// keyValueDSN is lib/pq's key=value form ("host=db password=…"), which no URL starts like.
	keyValueDSN = regexp.MustCompile(`^\s*\w+\s*=`)
	// slashedScheme is a scheme and the slashes after it, however many were typed.
	slashedScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:/+`)
)

// dsnPassword is the value of a key=value DSN's password or sslkey (any key that ends so,
// sslpassword too): a word, or a quoted value.
var dsnPassword = regexp.MustCompile(`((?:password|sslkey)\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
