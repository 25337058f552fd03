package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// Config configures a Server.
type Config struct {
	// AdminToken is the bearer token of the admin endpoints, at least MinSecretLen bytes; empty
	// denies them all.
	AdminToken string
	// PaymentToken is a bearer token that may record payments and nothing else, for the payment
	// service (the admin token may too); at least MinSecretLen bytes. Default: none.
	PaymentToken string
	// JWTSecret verifies buyers' bearer tokens: HS256 JWTs whose sub names the buyer and which
	// carry exp. At least MinSecretLen bytes. Default: none, and no token is accepted.
	JWTSecret []byte
	// JWTIssuer, when set, must be every token's iss. Default: "" (iss is not checked).
	JWTIssuer string
	// OrderIDSecret keys the order ids derived from Idempotency-Keys; every api of a deployment
	// must have the same, so that a retry at another api names the same order. At least
	// MinSecretLen bytes. Default: derived from JWTSecret; without one, a random secret per
	// process (a warning says so).
	OrderIDSecret []byte
	// JWTAudience, when set, must be among every token's aud (RFC 7519 §4.1.3), so a token
	// minted for another service with the same secret does not pass. Default: "" (not checked).
	JWTAudience string
	// InsecureUserHeader lets the X-User-ID header name the buyer, so anyone can act as anyone:
	// for development only. Default: false.
	InsecureUserHeader bool
	// UserLimit is each buyer's request rate on the buyer routes. Default: no limit (the api
	// command sets 20/s, burst 40).
	UserLimit Limit
	// IPLimit is each client address's request rate on the /v1 routes. Default: no limit (the
	// api command sets 2000/s, burst 4000).
	IPLimit Limit
	// TrustProxyHeaders takes the client address from X-Forwarded-For / X-Real-IP when the
	// request comes from a loopback or private address (a load balancer). Default: false, the
	// peer's address.
	TrustProxyHeaders bool
	// IdempotencyTTL is how long an Idempotency-Key is remembered. Default: 24h.
	IdempotencyTTL time.Duration
	// IdempotencyLease is how long a request holds its key before a retry may take over, which
	// bounds how long retries wait after a crash. It must outlast a purchase. Default: 30s.
	IdempotencyLease time.Duration
	// SoldOutTTL is how long this process answers a sold-out campaign's buyers without asking
	// Redis; units released elsewhere are on sale again at most this late here. Negative
	// disables it. Default: 500ms.
	SoldOutTTL time.Duration
	// Brokers are the Kafka seed brokers the api reads the results topic from: what wakes the
	// order event streams and tells this api of units given back elsewhere. Default: none, and
	// streams show only the status they open with, and the sold-out flag lasts SoldOutTTL.
	Brokers []string
	// MaxStreamsPerBuyer caps the order event streams one buyer holds open. Default: 4.
	MaxStreamsPerBuyer int
	// MaxStreams caps the order event streams open at once; below MaxConns, as every stream
	// holds a connection and purchases need the others. Default: 10,000, or half of MaxConns
	// when that is less.
	MaxStreams int
	// MaxStreamsPerAddr caps the order event streams open from one client address (an IPv6
	// /64, as the per-address rate limit counts), so that one client naming many buyers cannot
	// hold every stream. Many buyers may share an address (an office's NAT, a mobile
	// carrier's), so it must be well above MaxStreamsPerBuyer. Default: 0, no cap (the api
	// command sets 100).
	MaxStreamsPerAddr int
	// StreamHeartbeat is how often an idle event stream sends a comment line, so proxies keep
	// it open. Default: 15s.
	StreamHeartbeat time.Duration
	// Topics are the topic names. Default: events.NewTopics(events.DefaultPrefix).
	Topics events.Topics
	// ReservationTTL is how long a reservation may stay pending before the sweeper releases it.
	// Default: 2m.
	ReservationTTL time.Duration
	// ProduceTimeout bounds the wait for Kafka's acknowledgement of a purchase; a purchase
	// that runs out of it is cancelled (503) and Kafka counts as down for a second. Default: 3s.
	ProduceTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may stay idle before the server closes
	// it. Idle keep-alives of a crowd are best held by the load balancer in front. Default: 90s.
	IdleTimeout time.Duration
	// MaxConns caps the connections the server holds at once; one more is closed as soon as it
	// is accepted, so the process never runs out of file descriptors. Default: 0, no cap (the
	// api command sets DefaultMaxConns).
	MaxConns int
	// MaxConnsPerAddr caps the connections from one client address (an IPv6 /64), so one
	// client cannot take them all. Behind a load balancer every connection comes from its few
	// addresses: raise it or set 0. Default: 0, no cap (the api command sets 1,000).
	MaxConnsPerAddr int
	// DrainDelay is how long the api goes on serving after it is told to stop, while /readyz
	// answers 503 "draining": the time a load balancer takes to notice and send buyers
	// elsewhere, so that a rolling restart refuses nobody. Default: 0 (the api command sets 5s).
	DrainDelay time.Duration
	// ShutdownTimeout bounds the drain of in-flight requests at shutdown. Default: 15s.
	ShutdownTimeout time.Duration
	// Logger receives errors. Default: slog.Default().
	Logger *slog.Logger
}

// Validate reports a configuration the server cannot work with.
func (c Config) Validate() error {
	switch {
	case c.AdminToken != "" && len(c.AdminToken) < MinSecretLen:
		return fmt.Errorf("the admin token must be at least %d bytes", MinSecretLen)
	case c.PaymentToken != "" && len(c.PaymentToken) < MinSecretLen:
		return fmt.Errorf("the payment token must be at least %d bytes", MinSecretLen)
	case len(c.OrderIDSecret) > 0 && len(c.OrderIDSecret) < MinSecretLen:
		return fmt.Errorf("the order id secret must be at least %d bytes", MinSecretLen)
	case len(c.JWTSecret) > 0 && len(c.JWTSecret) < MinSecretLen:
		return fmt.Errorf("the JWT secret must be at least %d bytes", MinSecretLen)
	case len(c.JWTSecret) == 0 && !c.InsecureUserHeader:
		return errors.New("buyers cannot authenticate: set a JWT secret (or, in development only, the insecure user header)")
	case c.UserLimit.Rate < 0 || c.IPLimit.Rate < 0:
		return errors.New("rate limits cannot be negative")
	case c.MaxConns < 0 || c.MaxConnsPerAddr < 0 || c.MaxStreams < 0 || c.MaxStreamsPerBuyer < 0 || c.MaxStreamsPerAddr < 0:
		return errors.New("connection and stream caps cannot be negative")
	case c.MaxConns > 0 && c.MaxStreams >= c.MaxConns:
		return fmt.Errorf("the stream cap (%d) must be below the connection cap (%d): every stream holds a connection, and purchases need the others", c.MaxStreams, c.MaxConns)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.IdempotencyTTL <= 0 {
		c.IdempotencyTTL = 24 * time.Hour
	}
	if c.IdempotencyLease <= 0 {
		c.IdempotencyLease = 30 * time.Second
	}
	if c.SoldOutTTL == 0 {
		c.SoldOutTTL = 500 * time.Millisecond
	}
	if c.MaxStreamsPerBuyer <= 0 {
		c.MaxStreamsPerBuyer = 4
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = 10_000
		if c.MaxConns > 0 {
			c.MaxStreams = min(c.MaxStreams, c.MaxConns/2)
		}
	}
	if c.StreamHeartbeat <= 0 {
		c.StreamHeartbeat = 15 * time.Second
	}
	if c.Topics == (events.Topics{}) {
		c.Topics = events.NewTopics(events.DefaultPrefix)
	}
	if c.ReservationTTL <= 0 {
		c.ReservationTTL = 2 * time.Minute
	}
	if c.ProduceTimeout <= 0 {
		c.ProduceTimeout = 3 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 90 * time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 15 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Store is the part of the store the api reads and writes: campaigns, orders for reads, and what
// the Resolver of failed produces, payments and compensations needs.
type Store interface {
	compensator.Store
	compensator.CampaignStore
	CreateCampaign(ctx context.Context, c store.Campaign) error
	MarkOnSale(ctx context.Context, id string) error
	Campaign(ctx context.Context, id string) (store.Campaign, error)
	PaidUnits(ctx context.Context, campaign string) (int64, error)
	Ping(ctx context.Context) error
	// The console's snapshot.
	NewestCampaigns(ctx context.Context, n int) ([]store.Campaign, error)
	UnitsByStatus(ctx context.Context, campaigns []string) ([]store.Units, error)
	GivingBack(ctx context.Context, campaigns []string) ([]store.Order, error)
	AuditVerdicts(ctx context.Context) (map[string]store.AuditVerdict, error)
}

// Redis is the part of Redis the api needs: the reservations, the Resolver's transitions, and
// /readyz's ping. Client is the connection that the idempotency script uses.
type Redis interface {
	compensator.Redis
	compensator.CampaignRedis
	Sale(ctx context.Context, campaign string) (lua.Sale, error)
	Reservations(ctx context.Context, orderIDs []string) (map[string]lua.Reservation, error)
	Reserve(ctx context.Context, campaign, orderID, user string, qty int, ttl time.Duration) (lua.Reservation, error)
	LoadCampaign(ctx context.Context, c lua.Campaign) (bool, error)
	Ping(ctx context.Context) error
	Client() redis.UniversalClient
	// Stuck reports that Redis has stopped answering purchases, so that one is refused before
	// it asks Redis anything.
	Stuck() bool
}

// Producer hands records to Kafka: a purchase's event waits for room in the client's buffer
// (Produce), an outcome's announcement does not (compensator.Producer). A *kgo.Client is one,
// and then /readyz also asks it for the leaders of the requested topic's partitions.
type Producer interface {
	compensator.Producer
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
}

var (
	_ Store    = (*store.Store)(nil)
	_ Redis    = (*lua.Redis)(nil)
	_ Producer = (*kgo.Client)(nil)
)

// Server serves the HTTP API.
type Server struct {
	cfg      Config
	echo     *echo.Echo
	store    Store
	redis    Redis
	producer Producer
	resolver *compensator.Resolver
	operator *compensator.Operator

	tokens    *verifier
	userLimit *limiter
	ipLimit   *limiter
	soldOut   *soldOut
	kafka     *breaker      // fails purchases fast while Kafka is down
	redisDown events.Outage // purchases' reserve calls that Redis failed
	campaigns *campaignCache
	ready     readyCache
	stopping  context.Context // done when shutdown starts: event streams end, reads of theirs too
	stopAll   context.CancelFunc
	draining  atomic.Bool // told to stop: /readyz says so, answers close their connections
	// orderIDSecret keys derived order ids (keyedOrderID).
	orderIDSecret []byte
	hub           *hub // nil without Brokers
	console       *console
	streams       *streamCaps
	closeOnce     sync.Once
}

// New returns a Server. It produces with producer, which it does not close; failed produces and
// the admin's compensations are resolved through a Resolver over st, r and producer.
func New(cfg Config, st Store, r Redis, producer Producer) *Server {
	cfg.setDefaults()
	idSecret, random := orderIDSecret(cfg)
	if random {
		cfg.Logger.Warn("no order id secret and no JWT secret: order ids of Idempotency-Keys are keyed with a secret of this process; a retry at another api or after a restart reserves anew")
	}
	s := &Server{
		orderIDSecret: idSecret,
		cfg:           cfg,
		store:         st,
		redis:         r,
		producer:      producer,
		resolver:      &compensator.Resolver{Store: st, Redis: r, Producer: producer, Results: cfg.Topics.Results, Logger: cfg.Logger},

		tokens:    newVerifier(cfg.JWTSecret, cfg.JWTIssuer, cfg.JWTAudience),
		userLimit: newLimiter(cfg.UserLimit, "buyer"),
		ipLimit:   newLimiter(cfg.IPLimit, "address"),
		soldOut:   newSoldOut(cfg.SoldOutTTL),
		kafka:     newBreaker(),
		streams: &streamCaps{perBuyer: cfg.MaxStreamsPerBuyer, perAddr: cfg.MaxStreamsPerAddr, total: cfg.MaxStreams,
			open: map[string]int{}, byAddr: map[string]int{}},
	}
	s.stopping, s.stopAll = context.WithCancel(context.Background())
	s.operator = &compensator.Operator{Resolver: s.resolver, Campaigns: st, Sales: r}
	s.campaigns = newCampaignCache(func(ctx context.Context, id string) (storedCampaign, error) {
		camp, err := st.Campaign(ctx, id)
		if err != nil {
			return storedCampaign{}, err
		}
		return readPaid(ctx, st, camp)
	})
	s.console = &console{s: s, subs: map[chan []byte]struct{}{}}
	if len(cfg.Brokers) > 0 {
		h, err := newHub(cfg.Brokers, cfg.Topics.Results, s.soldOut.clear, cfg.Logger)
		if err != nil {
			cfg.Logger.Error("read the results topic; order streams stay at their first status", "err", err)
		}
		s.hub = h
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	// X-Forwarded-For is anyone's to write: trusted only when asked, and only from a proxy's
	// private address.
	e.IPExtractor = echo.ExtractIPDirect()
	if cfg.TrustProxyHeaders {
		e.IPExtractor = echo.ExtractIPFromXFFHeader()
	}
	e.HTTPErrorHandler = s.handleError
	// First, so that every answer carries it: those of the middlewares after it (a rate
	// limit's 429, a recovered panic's 500), the router's 404 and 405, and the event streams.
	e.Use(nosniff)
	e.Use(countRequests)
	e.Use(s.byAddress)
	e.Use(s.closeWhileDraining)
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{
		LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
			s.cfg.Logger.Error("handler panicked", "path", c.Request().URL.Path, "err", err, "stack", string(stack))
			return events.Errorf(events.Internal, "internal error")
		},
	}))

	s.routeConsole(e)
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.POST("/v1/campaigns", s.createCampaign, s.admin)
	e.GET("/v1/campaigns/:id", s.getCampaign)
	e.POST("/v1/campaigns/:id/purchases", s.purchase)
	e.GET("/v1/orders/:id", s.getOrder)
	e.GET("/v1/orders/:id/events", s.orderEvents)
	e.GET("/v1/admin/orders/:id", s.adminOrder, s.admin)
	e.GET("/v1/admin/console/events", s.consoleEvents, s.admin)
	e.POST("/v1/admin/orders/:id/compensate", s.compensate, s.admin)
	e.POST("/v1/admin/campaigns/:id/close", s.closeCampaign, s.admin)
	e.POST("/v1/admin/campaigns/:id/extend", s.extendCampaign, s.admin)
	e.POST("/v1/admin/campaigns/:id/stock", s.addStock, s.admin)
	e.POST("/v1/admin/campaigns/:id/cancel", s.cancelCampaign, s.admin)
	e.POST("/v1/admin/campaigns/:id/compensate", s.compensateCampaign, s.admin)
	e.POST("/v1/admin/orders/:id/payment", s.pay, s.payer)
	s.echo = e
	return s
}

// Close stops what New started, the reader of the results topic, the console's snapshot loop
// and the rate limiters' timers, and waits for the first two. It ends the event streams still
// open, as Serve's shutdown does: with the reader stopped nothing would wake them again.
// Closing twice is closing once.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.stop()
		s.console.close()
		s.hub.Close()
		s.userLimit.close()
		s.ipLimit.close()
	})
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.echo }

// Routes returns "METHOD /path" of every route, for the contract test.
func (s *Server) Routes() []string {
	var out []string
	for _, r := range s.echo.Routes() {
		out = append(out, r.Method+" "+r.Path)
	}
	return out
}

// Serve serves on ln until ctx is canceled, then stops accepting connections and waits for
// in-flight requests to finish (at most ShutdownTimeout), then closes the connections of those
// that did not. The caller binds ln: a role binds its ports before it waits for its servers, so a
// taken port stops it at once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.echo,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    16 << 10,
	}
	var open atomic.Int64 // connections the server holds: what Close would cut
	srv.ConnState = func(_ net.Conn, state http.ConnState) {
		switch state {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	ln = limitConns(ln, s.cfg.MaxConns, s.cfg.MaxConnsPerAddr)
	s.cfg.Logger.Info("api listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("api: serve: %w", err)
	case <-ctx.Done():
	}
	if s.cfg.DrainDelay > 0 {
		s.draining.Store(true)
		s.cfg.Logger.Info("draining: /readyz answers 503 while the load balancer moves buyers elsewhere", "for", s.cfg.DrainDelay)
		select {
		case err := <-errc:
			return fmt.Errorf("api: serve: %w", err)
		case <-time.After(s.cfg.DrainDelay):
		}
	}
	// The event streams end, and no console stream starts, from here on: told by Shutdown's
	// hooks, which it runs in goroutines of their own, they could be told after Serve returned.
	s.stop()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// The requests still open (one stuck on a dependency that ignores its context) end
		// here, not at the process's exit, which a caller that goes on running never reaches.
		// Close's only error is closing the listener again, which Shutdown closed.
		cut := open.Load()
		_ = srv.Close()
		s.cfg.Logger.Warn("the drain timed out: connections still open are cut", "connections", cut, "timeout", s.cfg.ShutdownTimeout)
		return fmt.Errorf("api: drain: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// nosniff keeps browsers from reading any answer as another type than it says (a JSON error
// that echoes a request's text as HTML, say).
var nosniff = middleware.SecureWithConfig(middleware.SecureConfig{ContentTypeNosniff: "nosniff"})

// closeWhileDraining ends each answer's connection once the api is draining, so keep-alive
// clients reconnect through the load balancer to another api. Not SetKeepAlivesEnabled(false):
// it also closes the idle connections at once, under a request a client is sending on one.
func (s *Server) closeWhileDraining(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.draining.Load() {
			c.Response().Header().Set(echo.HeaderConnection, "close")
		}
		return next(c)
	}
}

// stop ends the event streams, which would otherwise hold the drain up.
func (s *Server) stop() { s.stopAll() }

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 when Redis and Kafka answer: all a purchase needs. The store is asked and
// reported too, but does not make the api unready: while PostgreSQL fails over, purchases go on
// into Kafka and the consumer catches up, where an unready api behind a load balancer would
// stop the sale. It says which one does not answer, never why (that goes to the log), and asks
// them at most once per readyEvery however many probes and clients call it.
func (s *Server) readyz(c echo.Context) error {
	if s.draining.Load() {
		retryIfUnavailable(c, http.StatusServiceUnavailable)
		return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "draining"})
	}
	st := s.ready.get(func() readiness {
		answers := PingAll(c.Request().Context(), readyTimeout, map[string]func(context.Context) error{
			"redis": s.redis.Ping,
			"kafka": s.leadersKnown,
			"store": s.store.Ping,
		})
		r := readiness{body: map[string]string{}, status: http.StatusOK}
		for name, err := range answers {
			r.body[name] = "ok"
			up := 1.0
			if err != nil {
				r.body[name], up = "unavailable", 0
				if name != "store" {
					r.status = http.StatusServiceUnavailable
				}
				s.cfg.Logger.Warn("a dependency does not answer", "dependency", name, "err", err)
			}
			dependencyUp.WithLabelValues(name).Set(up)
		}
		return r
	})
	retryIfUnavailable(c, st.status) // as every 503 does
	return c.JSON(st.status, st.body)
}

// PingAll asks every one of pings at once, each with a timeout of its own (one after another
// under one timeout, one that hangs would spend the others' time and fail them too), and
// returns what each answered by name: nil, or its error.
func PingAll(ctx context.Context, timeout time.Duration, pings map[string]func(context.Context) error) map[string]error {
	type answer struct {
		name string
		err  error
	}
	answers := make(chan answer, len(pings))
	for name, ping := range pings {
		go func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
			defer cancel()
			answers <- answer{name, ping(ctx)}
		}()
	}
	out := make(map[string]error, len(pings))
	for range pings {
		a := <-answers
		out[a.name] = a.err
	}
	return out
}

// leadersKnown checks that the producer can reach Kafka and that every partition of the
// requested topic has a leader: an api that answers ready serves a purchase end to end, and a
// new one is never cold when the load balancer sends it buyers.
func (s *Server) leadersKnown(ctx context.Context) error {
	cl, ok := s.producer.(*kgo.Client)
	if !ok {
		return nil // a test's producer, with no brokers to ask
	}
	topics, err := kadm.NewClient(cl).ListTopics(ctx, s.cfg.Topics.Requested)
	if err != nil {
		return err
	}
	td, ok := topics[s.cfg.Topics.Requested]
	switch {
	case !ok:
		return fmt.Errorf("topic %s: no metadata", s.cfg.Topics.Requested)
	case td.Err != nil:
		return fmt.Errorf("topic %s: %w", s.cfg.Topics.Requested, td.Err)
	case len(td.Partitions) == 0:
		return fmt.Errorf("topic %s has no partitions", s.cfg.Topics.Requested)
	}
	for _, p := range td.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return fmt.Errorf("topic %s partition %d has no leader (%v)", s.cfg.Topics.Requested, p.Partition, p.Err)
		}
	}
	return nil
}

// readyEvery is how often readyz asks the dependencies.
const readyEvery = time.Second

// readyTimeout is how long readyz waits for each dependency, and so for its answer: a
// readiness probe must wait longer (deploy/k8s: timeoutSeconds 3).
const readyTimeout = 2 * time.Second

// readiness is one answer of readyz.
type readiness struct {
	status int
	body   map[string]string // never changed once made
}

// readyCache holds the latest readiness; the first caller after it is readyEvery old checks
// again while the others wait for its answer.
type readyCache struct {
	mu   sync.Mutex
	at   time.Time
	last readiness
	now  func() time.Time // nil: time.Now; a test's clock otherwise
}

func (rc *readyCache) get(check func() readiness) readiness {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	now := time.Now()
	if rc.now != nil {
		now = rc.now()
	}
	if rc.last.body == nil || now.Sub(rc.at) >= readyEvery {
		rc.last, rc.at = check(), now
	}
	return rc.last
}
