package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// Config configures a Server.
type Config struct {
	// Addr is the listen address. Default: ":8080".
	Addr string
	// AdminToken is the bearer token of the admin endpoints; empty denies them all.
	AdminToken string
	// Topics are the topic names. Default: events.NewTopics(events.DefaultPrefix).
	Topics events.Topics
	// ReservationTTL is how long a reservation may stay pending before the sweeper releases it.
	// Default: 2m.
	ReservationTTL time.Duration
	// ProduceTimeout bounds the wait for Kafka's acknowledgement of a purchase. Default: 5s.
	ProduceTimeout time.Duration
	// ShutdownTimeout bounds the drain of in-flight requests at shutdown. Default: 15s.
	ShutdownTimeout time.Duration
	// Logger receives errors. Default: slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Addr == "" {
		c.Addr = ":8080"
	}
	if c.Topics == (events.Topics{}) {
		c.Topics = events.NewTopics(events.DefaultPrefix)
	}
	if c.ReservationTTL <= 0 {
		c.ReservationTTL = 2 * time.Minute
	}
	if c.ProduceTimeout <= 0 {
		c.ProduceTimeout = 5 * time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 15 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Store is the part of the store the api reads and writes: campaigns, and orders for reads.
type Store interface {
	CreateCampaign(ctx context.Context, c store.Campaign) error
	Campaign(ctx context.Context, id string) (store.Campaign, error)
	Order(ctx context.Context, id string) (store.Order, error)
	Ping(ctx context.Context) error
}

var _ Store = (*store.Store)(nil)

// Server serves the HTTP API.
type Server struct {
	cfg      Config
	echo     *echo.Echo
	store    Store
	redis    *lua.Redis
	producer *kgo.Client
	resolver *compensator.Resolver
}

// New returns a Server. It produces with producer, which it does not close; failed produces and
// the admin's compensations are resolved through a Resolver over st, r and producer.
func New(cfg Config, st *store.Store, r *lua.Redis, producer *kgo.Client) *Server {
	cfg.setDefaults()
	s := &Server{
		cfg:      cfg,
		store:    st,
		redis:    r,
		producer: producer,
		resolver: &compensator.Resolver{Store: st, Redis: r, Producer: producer, Results: cfg.Topics.Results},
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Use(countRequests)
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{
		LogErrorFunc: func(c echo.Context, err error, stack []byte) error {
			s.cfg.Logger.Error("handler panicked", "path", c.Request().URL.Path, "err", err, "stack", string(stack))
			return events.Errorf(events.Internal, "internal error")
		},
	}))

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", echo.WrapHandler(promhttp.Handler()))
	e.POST("/v1/campaigns", s.createCampaign, s.admin)
	e.GET("/v1/campaigns/:id", s.getCampaign)
	e.POST("/v1/campaigns/:id/purchases", s.purchase)
	e.GET("/v1/orders/:id", s.getOrder)
	e.POST("/v1/admin/orders/:id/compensate", s.compensate, s.admin)
	s.echo = e
	return s
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

// Run serves on cfg.Addr until ctx is canceled, then stops accepting connections and waits for
// in-flight requests to finish (at most ShutdownTimeout).
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("api: listen %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve is Run on a listener of the caller's.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.echo,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       90 * time.Second,
	}
	s.cfg.Logger.Info("api listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("api: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("api: drain: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// admin lets a request through only with the admin bearer token; with no token configured it
// lets none through.
func (s *Server) admin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		got, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
		if !ok || s.cfg.AdminToken == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.AdminToken)) != 1 {
			return events.Errorf(events.Unauthorized, "this endpoint needs the admin bearer token")
		}
		return next(c)
	}
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 only when Redis, Kafka and the store all answer.
func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	checks := map[string]error{
		"redis": s.redis.Client().Ping(ctx).Err(),
		"kafka": s.producer.Ping(ctx),
		"store": s.store.Ping(ctx),
	}
	body := map[string]string{}
	status := http.StatusOK
	for name, err := range checks {
		body[name] = "ok"
		if err != nil {
			body[name], status = err.Error(), http.StatusServiceUnavailable
		}
	}
	return c.JSON(status, body)
}
