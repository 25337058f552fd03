package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// maxBody caps request bodies: every valid one is far smaller.
const maxBody = 64 << 10

// decode reads the JSON body into v strictly: unknown fields, trailing data, a wrong type or an
// oversized body are all invalid_request.
func decode(c echo.Context, v any) error {
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, maxBody+1))
	if err != nil {
		return events.Errorf(events.Invalid, "read body: %v", err)
	}
	if len(body) > maxBody {
		return events.Errorf(events.Invalid, "body larger than %d bytes", maxBody)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return events.Errorf(events.Invalid, "malformed JSON body: %v", err)
	}
	if dec.More() {
		return events.Errorf(events.Invalid, "malformed JSON body: data after the object")
	}
	return nil
}

type campaignRequest struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	Stock        *int64     `json:"stock"`
	PerUserLimit *int64     `json:"per_user_limit"`
	StartsAt     *time.Time `json:"starts_at"`
	EndsAt       *time.Time `json:"ends_at"`
}

type campaignResponse struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	Stock        int64      `json:"stock"`
	PerUserLimit int64      `json:"per_user_limit"`
	StartsAt     time.Time  `json:"starts_at"`
	EndsAt       *time.Time `json:"ends_at"`
	Remaining    int64      `json:"remaining"`
	Sold         int64      `json:"sold"`
}

// maxStock bounds stock so that every sum of units fits Lua's doubles exactly.
const maxStock = 1 << 40

func (s *Server) createCampaign(c echo.Context) error {
	var req campaignRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	now := time.Now()
	camp := store.Campaign{ID: req.ID, Name: strings.TrimSpace(req.Name), CreatedAtMs: now.UnixMilli(), StartsAtMs: now.UnixMilli()}
	switch {
	case camp.ID == "":
		camp.ID = events.NewID()
	case !events.ValidCampaignID(camp.ID):
		return events.Errorf(events.Invalid, "id must be 1 to 64 letters, digits, '-' or '_', starting with a letter or digit")
	}
	switch {
	case camp.Name == "" || utf8.RuneCountInString(camp.Name) > 200:
		return events.Errorf(events.Invalid, "name must be 1 to 200 characters")
	case req.Stock == nil || *req.Stock < 0 || *req.Stock > maxStock:
		return events.Errorf(events.Invalid, "stock must be a whole number from 0 to %d", int64(maxStock))
	case req.PerUserLimit == nil || *req.PerUserLimit < 1 || *req.PerUserLimit > maxStock:
		return events.Errorf(events.Invalid, "per_user_limit must be a whole number from 1 to %d", int64(maxStock))
	}
	camp.Stock, camp.PerUserLimit = *req.Stock, *req.PerUserLimit
	if req.StartsAt != nil {
		camp.StartsAtMs = req.StartsAt.UnixMilli()
	}
	if req.EndsAt != nil {
		if !req.EndsAt.After(time.UnixMilli(camp.StartsAtMs)) {
			return events.Errorf(events.Invalid, "ends_at must be after starts_at")
		}
		camp.EndsAtMs = req.EndsAt.UnixMilli()
	}
	ctx := c.Request().Context()
	if err := s.store.CreateCampaign(ctx, camp); err != nil {
		return err
	}
	if _, err := s.redis.LoadCampaign(ctx, redisCampaign(camp, nil)); err != nil {
		// The campaign is in the store; every api start loads what Redis lacks.
		return events.Errorf(events.Unavailable, "campaign %s stored but not yet on sale: %v", camp.ID, err)
	}
	return c.JSON(http.StatusCreated, s.campaignResponse(camp, camp.Stock))
}

// LoadCampaigns puts on sale in Redis every stored campaign Redis lacks (after Redis lost its
// data, or a creation that stopped half way), with remaining = stock - sold and the buyers'
// holdings from the store.
func LoadCampaigns(ctx context.Context, st *store.Store, r *lua.Redis, log *slog.Logger) error {
	cs, err := st.Campaigns(ctx)
	if err != nil {
		return err
	}
	for _, c := range cs {
		_, ok, err := r.Remaining(ctx, c.ID)
		if err != nil {
			return err
		}
		if ok {
			continue
		}
		holdings, err := st.Holdings(ctx, c.ID)
		if err != nil {
			return err
		}
		if _, err := r.LoadCampaign(ctx, redisCampaign(c, holdings)); err != nil {
			return err
		}
		log.Info("campaign loaded into redis from the store", "campaign", c.ID, "remaining", c.Stock-c.Sold, "buyers", len(holdings))
	}
	return nil
}

func redisCampaign(c store.Campaign, holdings map[string]int64) lua.Campaign {
	rc := lua.Campaign{ID: c.ID, Remaining: c.Stock - c.Sold, Limit: c.PerUserLimit, StartsAt: time.UnixMilli(c.StartsAtMs), Holdings: holdings}
	if c.EndsAtMs > 0 {
		rc.EndsAt = time.UnixMilli(c.EndsAtMs)
	}
	return rc
}

func (s *Server) campaignResponse(c store.Campaign, remaining int64) campaignResponse {
	r := campaignResponse{
		ID: c.ID, Name: c.Name, Stock: c.Stock, PerUserLimit: c.PerUserLimit,
		StartsAt: time.UnixMilli(c.StartsAtMs).UTC(), Remaining: remaining, Sold: c.Sold,
	}
	if c.EndsAtMs > 0 {
		t := time.UnixMilli(c.EndsAtMs).UTC()
		r.EndsAt = &t
	}
	return r
}

func (s *Server) getCampaign(c echo.Context) error {
	id := c.Param("id")
	if !events.ValidCampaignID(id) {
		return events.Errorf(events.CampaignNotFound, "campaign %q not found", id)
	}
	ctx := c.Request().Context()
	camp, err := s.store.Campaign(ctx, id)
	if err != nil {
		return err
	}
	remaining, ok, err := s.redis.Remaining(ctx, id)
	if err != nil {
		return events.Errorf(events.Unavailable, "read remaining stock: %v", err)
	}
	if !ok {
		remaining = camp.Stock - camp.Sold
	}
	return c.JSON(http.StatusOK, s.campaignResponse(camp, remaining))
}

type purchaseRequest struct {
	Quantity *int `json:"quantity"`
}

type purchaseResponse struct {
	OrderID string        `json:"order_id"`
	Status  events.Status `json:"status"`
}

// user returns the authenticated buyer.
func user(c echo.Context) (string, error) {
	u := c.Request().Header.Get("X-User-ID")
	if u == "" || len(u) > 128 || strings.ContainsAny(u, "\x00\r\n") {
		return "", events.Errorf(events.Unauthorized, "name the buyer in the X-User-ID header (1 to 128 characters)")
	}
	return u, nil
}

func (s *Server) purchase(c echo.Context) error {
	buyer, err := user(c)
	if err != nil {
		return err
	}
	campaign := c.Param("id")
	if !events.ValidCampaignID(campaign) {
		return events.Errorf(events.CampaignNotFound, "campaign %q not found", campaign)
	}
	var req purchaseRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Quantity == nil || *req.Quantity < 1 {
		return events.Errorf(events.Invalid, "quantity must be a whole number of at least 1")
	}
	ctx := c.Request().Context()
	orderID := events.NewOrderID(campaign)
	res, err := s.redis.Reserve(ctx, campaign, orderID, buyer, *req.Quantity, s.cfg.ReservationTTL)
	if err != nil {
		reservations.WithLabelValues(string(events.ErrorCode(err))).Inc()
		if events.ErrorCode(err) == events.Internal {
			return events.Errorf(events.Unavailable, "reserve: %v", err)
		}
		return err
	}
	now := time.Now()
	ev := events.Event{
		Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: now.UTC(),
		OrderID: orderID, CampaignID: campaign, UserID: buyer, Quantity: *req.Quantity, Deadline: res.Deadline.UTC(),
	}
	if err := s.produce(ctx, ev); err != nil {
		reservations.WithLabelValues(string(events.Unavailable)).Inc()
		// Whether or not the event reached Kafka, failing the order in the store first makes the
		// outcome certain: a late event finds the order failed and changes nothing.
		if _, ferr := s.resolver.Fail(context.WithoutCancel(ctx), ev, events.ReasonProduce, "api"); ferr != nil {
			s.cfg.Logger.Error("release after failed produce; the sweeper will retry at the deadline", "order_id", orderID, "err", ferr)
		}
		return events.Errorf(events.Unavailable, "the order could not be queued; nothing was charged, try again")
	}
	reservations.WithLabelValues("reserved").Inc()
	return c.JSON(http.StatusAccepted, purchaseResponse{OrderID: orderID, Status: events.Pending})
}

func (s *Server) produce(ctx context.Context, ev events.Event) error {
	rec, err := events.Record(s.cfg.Topics.Requested, ev)
	if err != nil {
		return err
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ProduceTimeout)
	defer cancel()
	err = s.producer.ProduceSync(ctx, rec).FirstErr()
	produceSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		return fmt.Errorf("produce %s: %w", ev.OrderID, err)
	}
	return nil
}

// OrderView is an order as the API shows it.
type OrderView struct {
	OrderID    string        `json:"order_id"`
	CampaignID string        `json:"campaign_id"`
	UserID     string        `json:"user_id"`
	Quantity   int64         `json:"quantity"`
	Status     events.Status `json:"status"`
	Reason     string        `json:"reason,omitempty"`
	CreatedAt  time.Time     `json:"created_at"`
}

// ViewOrder returns the API view of a stored order.
func ViewOrder(o store.Order) OrderView {
	return OrderView{
		OrderID: o.OrderID, CampaignID: o.CampaignID, UserID: o.UserID, Quantity: o.Quantity,
		Status: o.Status, Reason: o.Reason, CreatedAt: time.UnixMilli(o.CreatedAtMs).UTC(),
	}
}

// order finds an order: in the store once it is final, else as a reservation in Redis.
func (s *Server) order(ctx context.Context, id string) (OrderView, error) {
	o, err := s.store.Order(ctx, id)
	if err == nil {
		return ViewOrder(o), nil
	}
	if events.ErrorCode(err) != events.OrderNotFound {
		return OrderView{}, err
	}
	res, rerr := s.redis.Reservation(ctx, id)
	if errors.Is(rerr, lua.ErrNoReservation) {
		return OrderView{}, err
	}
	if rerr != nil {
		return OrderView{}, events.Errorf(events.Unavailable, "read reservation: %v", rerr)
	}
	created, _ := events.IDTime(id)
	// Redis moves a reservation on only after the store has the order's row, so a reservation
	// without a row is pending, whatever Redis says.
	return OrderView{OrderID: id, CampaignID: res.Campaign, UserID: res.User, Quantity: int64(res.Quantity), Status: events.Pending, CreatedAt: created.UTC()}, nil
}

func (s *Server) getOrder(c echo.Context) error {
	buyer, err := user(c)
	if err != nil {
		return err
	}
	id := c.Param("id")
	o, err := s.order(c.Request().Context(), id)
	if err != nil {
		return err
	}
	if o.UserID != buyer { // another buyer's order does not exist, as far as this one can tell
		return events.Errorf(events.OrderNotFound, "order %q not found", id)
	}
	return c.JSON(http.StatusOK, o)
}

func (s *Server) compensate(c echo.Context) error {
	id := c.Param("id")
	if _, ok := events.CampaignOf(id); !ok {
		return events.Errorf(events.OrderNotFound, "order %q not found", id)
	}
	o, err := s.resolver.Compensate(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ViewOrder(o))
}
