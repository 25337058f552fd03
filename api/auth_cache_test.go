package api

import (
	"testing"
	"time"

	"github.com/seckill/seckill/events"
)

// TestVerifierCache: a verified token is served from the cache until it expires, and never
// after; a token that failed is never cached.
func TestVerifierCache(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	v := newVerifier(secret, "")
	// Expires in 1s (plus the 5s leeway): valid now.
	raw, err := MintToken(secret, "", "alice", time.Second, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if u, err := v.user(raw); err != nil || u != "alice" {
			t.Fatalf("user(%q) = %q, %v", raw, u, err)
		}
	}
	if hit, ok := v.verified.Load().Load(raw); !ok || hit.(verifiedToken).user != "alice" {
		t.Fatalf("a verified token is not cached: %v", hit)
	}
	// Pretend the cached entry outlived the token: the token is checked again, and refused.
	old, err := MintToken(secret, "", "bob", time.Second, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	v.verified.Load().Store(old, verifiedToken{user: "bob", expires: time.Now().Add(-time.Minute)})
	if _, err := v.user(old); events.ErrorCode(err) != events.Unauthorized {
		t.Errorf("an expired token served from the cache: %v", err)
	}
	// A forged token is refused and stays out of the cache.
	forged := raw[:len(raw)-2] + "xx"
	if _, err := v.user(forged); err == nil {
		t.Error("a forged token passed")
	}
	if _, ok := v.verified.Load().Load(forged); ok {
		t.Error("a forged token was cached")
	}
}
