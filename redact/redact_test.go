package redact_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/seckill/seckill/redact"
)

// TestURL: the start line, the usage errors and the store's own errors print the Redis
// and PostgreSQL URLs without their passwords, wherever the URL carries one.
func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:pw@r:6379/0":                             "redis://:xxxxx@r:6379/0",
		"redis+sentinel://u:pw@s1:26379,s2:26379/mymaster": "redis+sentinel://u:xxxxx@s1:26379,s2:26379/mymaster",
		"postgres://app:pw@db:5432/seckill":                "postgres://app:xxxxx@db:5432/seckill",
		"postgres://app@db:5432/seckill?sslmode=require":   "postgres://app@db:5432/seckill?sslmode=require",
		// lib/pq reads a password from the query too.
		"postgres://app@db:5432/seckill?password=pw&sslmode=require": "postgres://app@db:5432/seckill?password=xxxxx&sslmode=require",
		"postgres://app@db/seckill?password=pw;%zz":                  "postgres://app@db/seckill?xxxxx",
		// A key=value DSN, which lib/pq takes and CheckURL refuses: its usage error prints it.
		"host=db user=app password=pw sslmode=disable": "host=db user=app password=xxxxx sslmode=disable",
		"host=db password='p w' user=app":              "host=db password=xxxxx user=app",
		// lib/pq's sslinline=true makes sslkey the client's private key itself, PEM-encoded,
		// in either form; libpq's sslpassword decrypts one.
		"postgres://app@db/seckill?sslinline=true&sslkey=-----BEGIN%20PRIVATE%20KEY-----%0Apw%0A-----END%20PRIVATE%20KEY-----": "postgres://app@db/seckill?sslinline=true&sslkey=xxxxx",
		"postgres://app@db/seckill?sslkey=%2Fetc%2Fkey&sslpassword=pw":                                                         "postgres://app@db/seckill?sslkey=xxxxx&sslpassword=xxxxx",
		"host=db sslinline=true sslkey='-----BEGIN PRIVATE KEY----- pw -----END PRIVATE KEY-----' user=app":                    "host=db sslinline=true sslkey=xxxxx user=app",

		// A Sentinel URL carries the sentinels' own password in its query (lua/redisurl).
		"redis+sentinel://s1/m?sentinel_password=pw&sentinel_username=su": "redis+sentinel://s1/m?sentinel_password=xxxxx&sentinel_username=su",
		// A password that holds an unencoded '?' (a URL lua/redisurl refuses, and its usage
		// error prints): what follows the '?' is no query.
		"redis+cluster://u:pw?x@n1:7000": "redis+cluster://xxxxx@n1:7000",

		// A mistyped or missing scheme, which CheckURL and lua/redisurl refuse, and whose usage
		// error prints it: an '@' still ends a user info.
		"postgres:/u:pw@h:5432/db":   "postgres:/u:xxxxx@h:5432/db",
		"redis:/:pw@h:1/0":           "redis:/:xxxxx@h:1/0",
		"seckill:pw@db:5432/seckill": "seckill:xxxxx@db:5432/seckill",
		":pw@10.0.0.5:6379":          ":xxxxx@10.0.0.5:6379",
		"postgres:u:p:w@h/db":        "postgres:xxxxx@h/db",
		"postgres//u:pw@h/db":        "postgres//u:xxxxx@h/db",
		"u:p@w@h/db":                 "u:xxxxx@h/db",
		"postgres:/u:pw?x@h/db":      "postgres:/xxxxx@h/db",
		"postgres:/h/db?password=pw": "postgres:/h/db?password=xxxxx",
		// A "://" after the '@' is no scheme's.
		"seckill:pw@h/x://y":            "seckill:xxxxx@h/x://y",
		"host=db user=app password=p@w": "host=db user=app password=xxxxx",
	} {
		if got := redact.URL(in); got != want || strings.Contains(got, "pw") {
			t.Errorf("redact.URL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestParseError: an error of parsing a URL quotes no piece of it, where net/url's quotes a
// piece of the password.
func TestParseError(t *testing.T) {
	for s, secret := range map[string]string{
		"postgres://u:pw%zz@h/db":     "%zz", // net/url quotes the escape
		"postgres://u:pw/x@h:5432/db": ":pw", // an unencoded '/': net/url quotes the port ":pw"
		"redis://h:1/0?password=p%q1": "%q1", // an escape in the query
	} {
		_, err := url.Parse(s)
		if err == nil {
			_, err = url.ParseQuery(s[strings.Index(s, "?")+1:])
		}
		if err == nil || !strings.Contains(err.Error(), secret) {
			t.Fatalf("parsing %q: error %v, want one that quotes %q", s, err, secret)
		}
		if got := redact.ParseError(s, err); got == nil || strings.Contains(got.Error(), secret) {
			t.Errorf("ParseError(%q, %q) = %v: it quotes %q", s, err, got, secret)
		}
	}
	if err := redact.ParseError("redis://h", nil); err != nil {
		t.Errorf("ParseError of no error = %v, want nil", err)
	}
}
