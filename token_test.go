package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
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

// fakeDev makes dir look like the data directory of a running seckill dev whose servers are a,
// as operator commands find one: its dev.json and a held lock on dev.lock.
func fakeDev(t *testing.T, dir string, a devAddrs) {
	t.Helper()
	// In a dev's order: the lock, then dev.json (lockDev removes a dev.json it finds: a killed dev's).
	lock, err := lockDev(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	if err := writeDevAddrs(dir, a); err != nil {
		t.Fatal(err)
	}
}

// TestDevWithAServerFlag: --dev (or SECKILL_DEV) stands in for the server flags, so one given
// on the command line beside it is a contradiction, refused before anything is reached: --dev
// used to replace it silently, and an audit meant for another store read the dev's, a token
// meant for another api was signed with the dev's secret. A variable of a server flag yields to
// --dev, as one environment serves every command.
func TestDevWithAServerFlag(t *testing.T) {
	const devSecret, otherSecret = "the-dev-secret-of-at-least-thirty-two-bytes", "another-secret-of-at-least-thirty-two-bytes"
	dir := t.TempDir()
	fakeDev(t, dir, devAddrs{RedisURL: "redis://127.0.0.1:1/0", StoreURL: "sqlite:" + filepath.Join(dir, "dev.db"), KafkaBrokers: "127.0.0.1:1", JWTSecret: devSecret})
	other := "sqlite:" + filepath.Join(t.TempDir(), "other.db")
	for _, tc := range []struct {
		args []string
		env  bool // SECKILL_DEV=true and SECKILL_DATA_DIR=dir in place of --dev --data-dir dir
		want string
	}{
		{[]string{"audit", "--redis-url", "redis://127.0.0.1:2/0", "--postgres-url", other}, true, "--dev (SECKILL_DEV) reaches the dev's servers in place of --redis-url and --postgres-url"},
		{[]string{"audit", "--postgres-url", other}, false, "--dev (SECKILL_DEV) reaches the dev's servers in place of --postgres-url"},
		{[]string{"dlq", "stats", "--kafka-brokers", "127.0.0.1:3"}, false, "in place of --kafka-brokers"},
		{[]string{"token", "--user", "bob", "--jwt-secret", otherSecret}, false, "--dev (SECKILL_DEV) signs as the dev in place of --jwt-secret"},
		{[]string{"token", "--user", "bob", "--jwt-issuer", "shop"}, true, "in place of --jwt-issuer"},
	} {
		t.Run(fmt.Sprint(tc.args, tc.env), func(t *testing.T) {
			args := append(tc.args, "--dev", "--data-dir", dir)
			if tc.env {
				t.Setenv("SECKILL_DEV", "true")
				t.Setenv("SECKILL_DATA_DIR", dir)
				args = tc.args
			}
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 with %q", code, stdout.String(), stderr.String(), tc.want)
			}
		})
	}

	t.Setenv("SECKILL_JWT_SECRET", otherSecret)
	var out bytes.Buffer
	if code := run(context.Background(), []string{"token", "--dev", "--data-dir", dir, "--user", "bob"}, &out, &out); code != 0 {
		t.Fatalf("token --dev with SECKILL_JWT_SECRET set exited %d: %s", code, out.String())
	}
	if _, err := jwt.Parse(strings.TrimSpace(out.String()), func(*jwt.Token) (any, error) { return []byte(devSecret), nil }); err != nil {
		t.Errorf("token --dev with SECKILL_JWT_SECRET set: %v; want it signed with the dev's secret", err)
	}
}
