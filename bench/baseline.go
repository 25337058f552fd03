package bench

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// The baselines: servers on the same HTTP stack as the api (Echo on net/http, the api's
// timeouts), each doing a known amount of work per purchase, so the scenarios can be read as
// ratios of them.
const (
	// Constant answers every purchase with a fixed JSON body: the HTTP stack alone.
	Constant = "constant"
	// BareReserve runs the reserve script once per purchase, each in a script call and a round
	// trip of its own (lua.Redis.Alone), and nothing else: one go-redis EVALSHA per request, no
	// coalescer, no Kafka.
	BareReserve = "bare-reserve"
	// SyncDB is the naive design: one PostgreSQL transaction per purchase that takes a unit of
	// stock with a conditional update, checks the buyer's limit and inserts the order.
	SyncDB = "sync-db"
)

// BaselineKinds are the baseline servers ServeBaseline knows.
var BaselineKinds = []string{Constant, BareReserve, SyncDB}

// Baseline is a baseline server.
type Baseline struct {
	// Kind is one of BaselineKinds.
	Kind string
	// Redis runs the reserve script (BareReserve).
	Redis *lua.Redis
	// Store holds campaigns and orders (SyncDB).
	Store *store.Store
	// TTL is the reservation's time to live (BareReserve). Default: 2m, the api's.
	TTL time.Duration
}

// constantBody is the size of a purchase's answer.
var constantBody = []byte(`{"order_id":"constant.06h0000000000000000000000","status":"pending"}` + "\n")

// Handler returns the baseline's HTTP handler: POST /v1/campaigns/:id/purchases, as the api's.
func (b Baseline) Handler() (http.Handler, error) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(middleware.Recover())
	var h echo.HandlerFunc
	switch b.Kind {
	case Constant:
		h = func(c echo.Context) error { return c.JSONBlob(http.StatusAccepted, constantBody) }
	case BareReserve:
		if b.Redis == nil {
			return nil, errors.New("bare-reserve baseline: no Redis")
		}
		ttl := b.TTL
		if ttl <= 0 {
			ttl = 2 * time.Minute
		}
		alone := b.Redis.Alone()
		h = func(c echo.Context) error {
			campaign := c.Param("id")
			orderID := events.NewOrderID(campaign)
			if _, err := alone.Reserve(c.Request().Context(), campaign, orderID, buyer(c.Request()), 1, ttl); err != nil {
				return refuse(c, err)
			}
			return c.JSON(http.StatusAccepted, map[string]string{"order_id": orderID, "status": "pending"})
		}
	case SyncDB:
		if b.Store == nil {
			return nil, errors.New("sync-db baseline: no store")
		}
		db := b.Store.DB()
		h = func(c echo.Context) error {
			campaign := c.Param("id")
			orderID := events.NewOrderID(campaign)
			if err := syncPurchase(c.Request().Context(), db, campaign, orderID, buyer(c.Request())); err != nil {
				return refuse(c, err)
			}
			return c.JSON(http.StatusAccepted, map[string]string{"order_id": orderID, "status": "confirmed"})
		}
	default:
		return nil, fmt.Errorf("unknown baseline %q (want one of %s)", b.Kind, strings.Join(BaselineKinds, ", "))
	}
	e.POST("/v1/campaigns/:id/purchases", h)
	e.GET("/healthz", func(c echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	return e, nil
}

// refuse answers an error as the api does: {"error":{"code","message"}}.
func refuse(c echo.Context, err error) error {
	code := events.ErrorCode(err)
	status := http.StatusConflict
	switch code {
	case events.Invalid:
		status = http.StatusBadRequest
	case events.CampaignNotFound:
		status = http.StatusNotFound
	case events.Internal:
		status, code = http.StatusServiceUnavailable, events.Unavailable
	}
	return c.JSON(status, map[string]map[string]string{"error": {"code": string(code), "message": events.ErrorMessage(err)}})
}

// syncPurchase is the naive design's whole purchase, in one transaction: the conditional update
// takes the campaign row's lock, so every purchase of a campaign waits for the one before.
func syncPurchase(ctx context.Context, db *sqlx.DB, campaign, orderID, user string) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var limit int64
	err = tx.GetContext(ctx, &limit, tx.Rebind(`UPDATE campaigns SET sold = sold + 1
		WHERE id = ? AND sold + 1 <= stock RETURNING per_user_limit`), campaign)
	if errors.Is(err, sql.ErrNoRows) {
		return events.Errorf(events.SoldOut, "campaign %q is sold out", campaign)
	}
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO purchases (campaign_id, user_id, bought) VALUES (?, ?, 1)
		ON CONFLICT (campaign_id, user_id) DO UPDATE SET bought = purchases.bought + 1
		WHERE purchases.bought + 1 <= ?`), campaign, user, limit)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return errors.Join(err, events.Errorf(events.LimitExceeded, "over the per-user limit"))
	}
	now := time.Now().UnixMilli()
	if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO orders
		(order_id, campaign_id, user_id, quantity, status, reason, created_at_ms, updated_at_ms)
		VALUES (?, ?, ?, 1, 'confirmed', '', ?, ?)`), orderID, campaign, user, now, now); err != nil {
		return err
	}
	return tx.Commit()
}

// buyer names the buyer of a baseline request: the X-User-ID header, or the sub claim of a
// bearer token, read without checking its signature (the baselines measure other costs).
func buyer(r *http.Request) string {
	if u := r.Header.Get("X-User-ID"); u != "" {
		return u
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return "anonymous"
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "anonymous"
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "anonymous"
	}
	var claims struct {
		Sub string `json:"sub"`
	}
	if json.NewDecoder(bytes.NewReader(raw)).Decode(&claims) != nil || claims.Sub == "" {
		return "anonymous"
	}
	return claims.Sub
}

// Serve serves h on ln until ctx is canceled, with the api's server timeouts, then drains.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       90 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
