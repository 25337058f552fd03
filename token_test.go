package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestTokenCommand(t *testing.T) {
	const secret = "a-secret-of-at-least-thirty-two-bytes"
	var out bytes.Buffer
	if code := run(context.Background(), []string{"token", "--user", "alice", "--ttl", "2h", "--jwt-secret", secret, "--jwt-issuer", "shop"}, &out, &out); code != 0 {
		t.Fatalf("token exited %d: %s", code, out.String())
	}
	var claims jwt.RegisteredClaims
	_, err := jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(), jwt.WithIssuer("shop")).
		ParseWithClaims(strings.TrimSpace(out.String()), &claims, func(*jwt.Token) (any, error) { return []byte(secret), nil })
	if err != nil {
		t.Fatalf("the minted token does not verify: %v", err)
	}
	if claims.Subject != "alice" || time.Until(claims.ExpiresAt.Time) < 119*time.Minute || time.Until(claims.ExpiresAt.Time) > 2*time.Hour {
		t.Errorf("claims %+v", claims)
	}

	t.Setenv("SECKILL_JWT_SECRET", secret) // the same variable the api reads
	out.Reset()
	if code := run(context.Background(), []string{"token", "--user", "bob"}, &out, &out); code != 0 {
		t.Errorf("token with the secret from the environment exited %d: %s", code, out.String())
	}
	for _, tc := range []struct {
		args []string
		code int
	}{
		// Each a bad value, caught before anything is signed: exit 2, as for every command.
		{[]string{"token", "--jwt-secret", secret}, 2},                   // no user
		{[]string{"token", "--user", "x", "--jwt-secret", "short"}, 2},   // secret under 32 bytes
		{[]string{"token", "--user", "x\ny", "--jwt-secret", secret}, 2}, // not a user id
		{[]string{"token", "--user", "x", "--ttl", "-1h", "--jwt-secret", secret}, 2},
		{[]string{"token", "--user", "x", "--dev", "--data-dir", t.TempDir()}, 1}, // no dev running there
	} {
		out.Reset()
		if code := run(context.Background(), tc.args, &out, &out); code != tc.code {
			t.Errorf("%v exited %d, want %d: %s", tc.args, code, tc.code, out.String())
		}
	}
}

func TestAPIRefusesToStartWithoutIdentity(t *testing.T) {
	var out bytes.Buffer
	code := run(context.Background(), []string{"api", "--addr", "127.0.0.1:0", "--redis-url", "redis://127.0.0.1:1/0"}, &out, &out)
	if code != 2 || !strings.Contains(out.String(), "JWT secret") {
		t.Errorf("api without a JWT secret: exit %d: %s", code, out.String())
	}
}
