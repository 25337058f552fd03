package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/seckill/seckill/api"
)

// identityFlags name the buyers' JWT secret and issuer, the same for api, dev and token.
type identityFlags struct {
	secret, issuer, audience *string
}

func (f *flags) identity() identityFlags {
	return identityFlags{
		secret:   f.secret("jwt-secret", fmt.Sprintf("HS256 secret of the buyers' bearer tokens, at least %d bytes", api.MinSecretLen)),
		issuer:   f.String("jwt-issuer", "", "iss of the buyers' bearer tokens (none: not checked)"),
		audience: f.String("jwt-audience", "", "aud the buyers' bearer tokens must name (none: not checked)"),
	}
}

// secret is a string flag that, when given, must be at least api.MinSecretLen bytes: the check
// names the flag, where api.Config.Validate can only name the setting.
func (f *flags) secret(name, usage string) *string {
	p := f.String(name, "", usage)
	f.check(func() bool { return *p == "" || len(*p) >= api.MinSecretLen }, "--%s (%s): want at least %d bytes", name, envName(name), api.MinSecretLen)
	return p
}

// notNegative checks that the flag name's value p is 0 or more.
func notNegative(f *flags, name string, p *int) *int {
	f.check(func() bool { return *p >= 0 }, "--%s: want 0 or more", name)
	return p
}

// maxRate bounds a rate limit's flag, in requests a second: its burst is twice the rate as an
// int, and int(2 * +Inf) is no number (a rate of 0 or more let +Inf through, and the start line
// logged "!ERROR:json: unsupported value: +Inf"). No api serves a billion requests a second.
const maxRate = 1e9

// rateFlag is a float flag of requests a second, 0 to maxRate.
func (f *flags) rateFlag(name string, value float64, usage string) *float64 {
	p := f.Float64(name, value, usage)
	f.check(func() bool { return *p >= 0 && *p <= maxRate }, "--%s: want 0 or more, at most %d", name, int(maxRate))
	return p
}

// guardFlags are the api's identity and abuse settings, shared by api and dev.
type guardFlags struct {
	identityFlags
	insecureUser   *bool
	userRate       *float64
	ipRate         *float64
	trustProxy     *bool
	idempotencyTTL *time.Duration
	orderIDSecret  *string
	streamsBuyer   *int
	streamsAddr    *int
	streams        *int
}

func (f *flags) guards(dev bool) guardFlags {
	insecureHelp := "accept the X-User-ID header as the buyer's identity: anyone can act as anyone (development only)"
	secretHelp, orderIDDefault := " (required, unless --insecure-user-header)", "derived from --jwt-secret"
	if dev {
		insecureHelp = "accept the X-User-ID header as the buyer's identity (dev: on)"
		// dev makes the secrets it is not given, and keeps them with its data (runDev).
		secretHelp, orderIDDefault = " (default: one kept in --data-dir)", "one kept in --data-dir"
	}
	streamsHelp := "order event streams open at once, below --max-conns: each holds a connection, and purchases need the others (0: 10,000, or half of --max-conns if less)"
	if dev {
		streamsHelp = "order event streams open at once (0: 10,000)" // dev caps no connections
	}
	streamsAddrHelp := "order event streams open from one client address (an IPv6 /64), well above --max-streams-per-buyer as an office's NAT or a mobile carrier " +
		"puts many buyers behind one address; behind a load balancer, set --trust-proxy-headers or 0 (0: no cap)"
	g := guardFlags{
		identityFlags:  f.identity(),
		insecureUser:   f.Bool("insecure-user-header", dev, insecureHelp),
		userRate:       f.rateFlag("user-rate", 20, "requests a second per buyer, burst twice that (0: no limit)"),
		ipRate:         f.rateFlag("ip-rate", 2000, "requests a second per client address on /v1, burst twice that (0: no limit)"),
		trustProxy:     f.Bool("trust-proxy-headers", false, "take the client address from X-Forwarded-For when the peer is a private address (behind a load balancer)"),
		idempotencyTTL: f.duration("idempotency-ttl", 24*time.Hour, false, "how long an Idempotency-Key is remembered"),
		streamsBuyer:   f.atLeast("max-streams-per-buyer", 4, 1, "order event streams one buyer may hold open"),
		streamsAddr:    notNegative(f, "max-streams-per-addr", f.Int("max-streams-per-addr", 100, streamsAddrHelp)),
		streams:        notNegative(f, "max-streams", f.Int("max-streams", 0, streamsHelp)),
		orderIDSecret:  f.secret("order-id-secret", fmt.Sprintf("key of the order ids derived from Idempotency-Keys, the same on every api, at least %d bytes (default: %s)", api.MinSecretLen, orderIDDefault)),
	}
	f.Lookup("jwt-secret").Usage += secretHelp
	return g
}

// apply puts the settings into cfg, checks them, and warns about the insecure header.
func (g guardFlags) apply(cfg *api.Config, log *slog.Logger) error {
	cfg.JWTSecret = []byte(*g.secret)
	cfg.JWTIssuer = *g.issuer
	cfg.JWTAudience = *g.audience
	cfg.InsecureUserHeader = *g.insecureUser
	cfg.UserLimit = api.Limit{Rate: *g.userRate, Burst: int(2 * *g.userRate)}
	cfg.IPLimit = api.Limit{Rate: *g.ipRate, Burst: int(2 * *g.ipRate)}
	cfg.TrustProxyHeaders = *g.trustProxy
	cfg.IdempotencyTTL = *g.idempotencyTTL
	cfg.OrderIDSecret = []byte(*g.orderIDSecret)
	cfg.MaxStreamsPerBuyer, cfg.MaxStreamsPerAddr, cfg.MaxStreams = *g.streamsBuyer, *g.streamsAddr, *g.streams
	if err := cfg.Validate(); err != nil {
		return usagef("%v", err) // a setting, not a server: no retry mends it
	}
	if cfg.InsecureUserHeader {
		log.Warn("X-User-ID is accepted as the buyer's identity: any caller can act as any buyer; never do this in production")
	}
	return nil
}

// logArgs are the settings for the start line, without the secret.
func (g guardFlags) logArgs() []any {
	return []any{"jwt_secret_set", *g.secret != "", "jwt_issuer", *g.issuer, "jwt_audience", *g.audience, "insecure_user_header", *g.insecureUser,
		"user_rate", *g.userRate, "ip_rate", *g.ipRate, "trust_proxy_headers", *g.trustProxy, "idempotency_ttl", *g.idempotencyTTL,
		"order_id_secret_set", *g.orderIDSecret != "", "max_streams_per_buyer", *g.streamsBuyer,
		"max_streams_per_addr", *g.streamsAddr, "max_streams", *g.streams}
}

func runToken(ctx context.Context, args []string, stdout io.Writer) error {
	f := newFlags("token", "Print a buyer's bearer token: an HS256 JWT whose sub is the user, signed with the\nsame --jwt-secret the api verifies with.", stdout)
	id := f.identity()
	// The api's words for these say what it checks; here they are what the token carries.
	f.Lookup("jwt-secret").Usage = fmt.Sprintf("HS256 secret to sign with, the api's --jwt-secret, at least %d bytes (required, unless --dev)", api.MinSecretLen)
	f.Lookup("jwt-issuer").Usage = "iss claim of the token, the api's --jwt-issuer (none: no iss)"
	f.Lookup("jwt-audience").Usage = "aud claim of the token, the api's --jwt-audience (none: no aud)"
	dev, dataDir := f.devFlags("sign as the seckill dev (make run) running on --data-dir verifies: with its secret, issuer and audience")
	user := f.String("user", "", "the buyer's user id (required)")
	ttl := f.duration("ttl", time.Hour, false, "how long the token is valid")
	if err := f.parse(args); err != nil {
		return err
	}
	const required = "token: --user and --jwt-secret (or SECKILL_JWT_SECRET, or --dev) are required"
	if *user == "" { // before the dev's file is read: a missing flag is the first thing to mend
		return f.usagef(required)
	}
	if *dev {
		// As with the servers' flags (flags.conn): one given beside --dev would be ignored.
		if given := f.onCommandLine("--jwt-secret", "--jwt-issuer", "--jwt-audience"); len(given) > 0 {
			return usagef("--dev (SECKILL_DEV) signs as the dev in place of %s: give one or the other", andList(given))
		}
		a, err := readDevAddrs(*dataDir)
		if err != nil {
			return err
		}
		*id.secret, *id.issuer, *id.audience = a.JWTSecret, a.JWTIssuer, a.JWTAudience
	}
	if *id.secret == "" {
		return f.usagef(required)
	}
	tok, err := api.MintToken([]byte(*id.secret), *id.issuer, *id.audience, *user, *ttl, time.Now())
	if err != nil {
		return usagef("token: %v", err) // the secret, the user or the ttl as given
	}
	fmt.Fprintln(stdout, tok)
	return nil
}
