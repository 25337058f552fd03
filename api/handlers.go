package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/failpoint"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// maxBody caps request bodies: the largest valid one is under 2 KiB.
const maxBody = 8 << 10

// decode reads the JSON body into v strictly. In this order: a body over maxBody is 413
// body_too_large; an empty one 400 invalid_request; one that is not application/json (with
// charset utf-8 or none) 415 unsupported_media_type; unknown fields, trailing data and wrong
// types 400 invalid_request.
func decode(c echo.Context, v any) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	return decodeJSON(body, v)
}

// readBody reads a JSON request body: bounded, present, and declared as JSON.
func readBody(c echo.Context) ([]byte, error) {
	body, err := optionalBody(c)
	if err == nil && body == nil {
		return nil, events.Errorf(events.Invalid, "this request needs a JSON body")
	}
	return body, err
}

// optionalBody reads the JSON body of a request that may have none: bounded, and declared as
// JSON. nil when there is none, whether the client said so (Content-Length: 0) or sent one that
// was empty.
func optionalBody(c echo.Context) ([]byte, error) {
	r := c.Request()
	if r.ContentLength > maxBody {
		return nil, events.Errorf(events.BodyTooLarge, "the body is larger than %d bytes", maxBody)
	}
	if r.Body == nil || r.ContentLength == 0 {
		return nil, nil
	}
	body, err := readAtMost(r.Body, maxBody, r.ContentLength)
	switch {
	case err != nil:
		return nil, events.Wrap(events.Invalid, err, "the body could not be read whole")
	case len(body) > maxBody:
		return nil, events.Errorf(events.BodyTooLarge, "the body is larger than %d bytes", maxBody)
	case len(bytes.TrimSpace(body)) == 0:
		return nil, nil
	}
	if err := jsonMediaType(r.Header.Get("Content-Type")); err != nil {
		return nil, err
	}
	return body, nil
}

// noFields refuses a body with fields on a control that takes none: an operator's close with
// {"ends_at": ...} would end the sale now, not then. No body, or {}, is the control.
func noFields(c echo.Context) error {
	body, err := optionalBody(c)
	if err != nil || body == nil {
		return err
	}
	return decodeJSON(body, &struct{}{})
}

// readAtMost reads r to its end, or until it has more than max bytes. It is io.ReadAll of an
// io.LimitReader(r, max+1) that allocates once, size bytes (the body's Content-Length) when that
// is known, instead of 512 and the LimitReader.
func readAtMost(r io.Reader, max, size int64) ([]byte, error) {
	if size <= 0 || size > max {
		size = 512
	}
	b := make([]byte, 0, size+1) // +1: room for the read that finds the end
	for {
		n, err := r.Read(b[len(b):min(int64(cap(b)), max+1)])
		b = b[:len(b)+n]
		switch {
		case err == io.EOF || int64(len(b)) > max:
			return b, nil
		case err != nil:
			return b, err
		case len(b) == cap(b):
			b = append(b, 0)[:len(b)]
		}
	}
}

// decodeJSON decodes one JSON value into v: unknown fields, trailing data, wrong types and
// bytes that are not UTF-8 are invalid_request.
func decodeJSON(body []byte, v any) error {
	if !utf8.Valid(body) {
		// encoding/json turns such a byte into U+FFFD without a word: a campaign's name, or a
		// payment id, would be stored as other text than was sent.
		return events.Errorf(events.Invalid, "malformed JSON body: not UTF-8")
	}
	if string(bytes.TrimSpace(body)) == "null" { // encoding/json takes null for any object
		return events.Errorf(events.Invalid, "the body must be a JSON object, not null")
	}
	if err := exactNames(body, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if strings.Contains(err.Error(), `unknown field "user_id"`) {
			return events.Errorf(events.Invalid, "the buyer is named by the bearer token, never by the body")
		}
		return jsonError(err)
	}
	// Not dec.More(), which reports false at a stray '}' or ']' and so let `{...}}` through.
	if _, err := dec.Token(); err != io.EOF {
		return events.Errorf(events.Invalid, "malformed JSON body: data after the object")
	}
	return nil
}

// exactNames refuses the names of body's object that encoding/json lets through against the
// spec (additionalProperties: false): one in another case than v's field ("QUANTITY"), which it
// takes as that field, and one given twice, of which it keeps the last. A body that is no object
// or not JSON is left to the decoder to refuse.
func exactNames(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	fields := reflect.TypeOf(v).Elem()
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		name, ok := t.(string)
		if err != nil || !ok {
			return nil
		}
		if seen[name] {
			return events.Errorf(events.Invalid, "field %q is given twice", name)
		}
		seen[name] = true
		for i := range fields.NumField() {
			tag, _, _ := strings.Cut(fields.Field(i).Tag.Get("json"), ",")
			if tag != name && strings.EqualFold(tag, name) {
				return events.Errorf(events.Invalid, "unknown field %q (field names are case-sensitive: %q)", name, tag)
			}
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return nil
		}
	}
	return nil
}

// jsonError says what is wrong with a body in the client's terms: the field and the JSON type
// it should have, or where the syntax broke; never the Go types it was decoded into.
func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	var timeErr *time.ParseError
	switch {
	// time.Time's own decoding: a well-formed body with a bad value, not a malformed one.
	case errors.As(err, &timeErr) || strings.HasPrefix(err.Error(), "Time.UnmarshalJSON: "):
		return events.Wrap(events.Invalid, err, "a time must be an RFC 3339 string, as 2030-01-01T00:00:00Z")
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return events.Wrap(events.Invalid, err, "%s has the wrong type or is out of range (got %s)", typeErr.Field, typeErr.Value)
	case errors.As(err, &typeErr):
		return events.Wrap(events.Invalid, err, "the body must be a JSON object, not a %s", typeErr.Value)
	case errors.As(err, &syntaxErr):
		return events.Wrap(events.Invalid, err, "malformed JSON body at byte %d", syntaxErr.Offset)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return events.Wrap(events.Invalid, err, "unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return events.Wrap(events.Invalid, err, "malformed JSON body")
}

// jsonMediaType accepts application/json with no charset or utf-8 (RFC 8259 §8.1).
func jsonMediaType(ct string) error {
	if ct == "application/json" { // what clients send: spare mime's parsing, which allocates
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	return events.Errorf(events.UnsupportedMediaType, "send the body as Content-Type: application/json")
}

type campaignRequest struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	Stock        *int64     `json:"stock"`
	PerUserLimit *int64     `json:"per_user_limit"`
	StartsAt     *time.Time `json:"starts_at"`
	EndsAt       *time.Time `json:"ends_at"`
	// PaymentWindowSeconds is how long a confirmed order has to be paid; 0 or absent: no
	// payment step.
	PaymentWindowSeconds *int64 `json:"payment_window_seconds"`
}

// CampaignView is a campaign as the API shows it.
type CampaignView struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	Stock        int64      `json:"stock"`
	PerUserLimit int64      `json:"per_user_limit"`
	StartsAt     time.Time  `json:"starts_at"`
	EndsAt       *time.Time `json:"ends_at"`
	Remaining    int64      `json:"remaining"`
	Sold         int64      `json:"sold"` // units of confirmed and paid orders
	Paid         int64      `json:"paid"` // units of paid orders

	PaymentWindowSeconds int64 `json:"payment_window_seconds"`
	// State is scheduled, on_sale, sold_out, frozen (being rebuilt), ended or cancelled.
	State string `json:"state"`
}

// maxPaymentWindow bounds a campaign's payment window: a week.
const maxPaymentWindow = 7 * 24 * 3600

// createTimeout bounds each step of a campaign's creation.
const createTimeout = 5 * time.Second

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
	case camp.Name == "" || utf8.RuneCountInString(camp.Name) > 200 || strings.ContainsFunc(camp.Name, unicode.IsControl):
		return events.Errorf(events.Invalid, "name must be 1 to 200 characters, none of them a control character")
	case req.Stock == nil || *req.Stock < 0 || *req.Stock > events.MaxUnits:
		return events.Errorf(events.Invalid, "stock must be a whole number from 0 to %d", int64(events.MaxUnits))
	case req.PerUserLimit == nil || *req.PerUserLimit < 1 || *req.PerUserLimit > events.MaxUnits:
		return events.Errorf(events.Invalid, "per_user_limit must be a whole number from 1 to %d", int64(events.MaxUnits))
	case req.PaymentWindowSeconds != nil && (*req.PaymentWindowSeconds < 0 || *req.PaymentWindowSeconds > maxPaymentWindow):
		return events.Errorf(events.Invalid, "payment_window_seconds must be a whole number from 0 (no payment step) to %d", maxPaymentWindow)
	}
	camp.Stock, camp.PerUserLimit = *req.Stock, *req.PerUserLimit
	if req.PaymentWindowSeconds != nil {
		camp.PaymentWindowMs = *req.PaymentWindowSeconds * 1000
	}
	// Times are kept to the millisecond, and 0 means "no end": a time at or before 1970 or a
	// window under a millisecond could not be kept as given.
	if req.StartsAt != nil {
		if camp.StartsAtMs = req.StartsAt.UnixMilli(); camp.StartsAtMs <= 0 {
			return events.Errorf(events.Invalid, "starts_at must be after 1970-01-01T00:00:00Z")
		}
	}
	if req.EndsAt != nil {
		if camp.EndsAtMs = req.EndsAt.UnixMilli(); camp.EndsAtMs <= camp.StartsAtMs {
			if req.StartsAt == nil { // the sale starts now: name no field the admin did not send
				return events.Errorf(events.Invalid, "ends_at must be in the future")
			}
			return events.Errorf(events.Invalid, "ends_at must be at least a millisecond after starts_at")
		}
	}
	// Both steps run to their end whether or not the admin waits: a campaign stored but not on
	// sale would answer every buyer "being restored".
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), createTimeout)
	defer cancel()
	// What finishes a creation that stopped half way: this request again, or, when the server
	// chose the id, this request naming it; sent again as it was, it would create another.
	again := "sending this request again"
	if req.ID == "" {
		again = fmt.Sprintf(`sending this request again with "id": %q`, camp.ID)
	}
	retried := false
	err := s.store.CreateCampaign(ctx, camp)
	// This api may have kept that the campaign was not found: it is shown at once here, as a
	// control's change is (the other apis show it within campaignTTL).
	s.campaigns.forget(camp.ID)
	if events.ErrorCode(err) == events.CampaignExists {
		stored, serr := s.store.Campaign(ctx, camp.ID)
		if serr != nil {
			return serr
		}
		if !sameCreation(stored, camp, req.StartsAt != nil) {
			return err
		}
		// A retry, maybe of a creation answered 503 below: it finishes what that one left.
		camp, retried, err = stored, true, nil
	}
	if events.ErrorCode(err) == events.Internal {
		// Not "changed nothing": the row may have been committed with its answer lost, and
		// the compensator puts a stored campaign on sale.
		return events.Wrap(events.Unavailable, err,
			"campaign %s may have been created; %s finishes it (it goes on sale either way if it was)", camp.ID, again)
	}
	if err != nil {
		return err
	}
	if !camp.OnSale {
		if _, err := s.redis.LoadCampaign(ctx, compensator.RedisCampaign(camp)); err != nil {
			// The campaign stays in the store. An error does not say that Redis lacks it: a
			// timeout, or a connection dropped after the script ran, leaves it on sale there.
			// Deleting the row then would have Redis sell a campaign the store does not have:
			// orders the consumer cannot store, pending ones the sweeper (which visits the
			// store's campaigns) never releases, keys a later creation under the id runs into.
			// Kept, the store has it before Redis may, at every moment; the compensator's
			// reconciler, or this request sent again, puts it on sale once Redis answers.
			s.cfg.Logger.Warn("campaign stored but not put on sale; the compensator puts it on sale once redis answers",
				"campaign", camp.ID, "err", err)
			return events.Errorf(events.Unavailable,
				"campaign %s was created but is not on sale yet; it goes on sale once Redis answers (%s then puts it on sale)", camp.ID, again)
		}
		if err := s.store.MarkOnSale(ctx, camp.ID); err != nil {
			// It is on sale; the compensator's reconciler records that.
			s.cfg.Logger.Warn("record a campaign on sale; the compensator records it", "campaign", camp.ID, "err", err)
		}
	}
	if retried { // it may have sold since
		view, err := s.viewCampaign(ctx, camp)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, view)
	}
	return c.JSON(http.StatusCreated, ViewCampaign(camp, lua.Sale{Remaining: camp.Stock}, 0))
}

// sameCreation reports whether stored is the campaign that the request which made fresh
// created, unchanged since by any operator: fresh's request is then a retry of that one.
// A request without starts_at (startsGiven false) starts its campaign when it stores it.
func sameCreation(stored, fresh store.Campaign, startsGiven bool) bool {
	starts := fresh.StartsAtMs
	if !startsGiven {
		starts = stored.CreatedAtMs
	}
	return stored.Version == 0 && stored.Name == fresh.Name && stored.Stock == fresh.Stock &&
		stored.PerUserLimit == fresh.PerUserLimit && stored.PaymentWindowMs == fresh.PaymentWindowMs &&
		stored.StartsAtMs == starts && stored.EndsAtMs == fresh.EndsAtMs
}

// Campaign states, as an operator sees them.
const (
	stateScheduled = "scheduled"
	stateOnSale    = "on_sale"
	stateSoldOut   = "sold_out"
	stateFrozen    = "frozen"
	stateEnded     = "ended"
	stateCancelled = "cancelled"
)

// campaignState names the state of campaign c whose sale Redis reports as sale, at now.
func campaignState(c store.Campaign, sale lua.Sale, now time.Time) string {
	ms := now.UnixMilli()
	switch {
	case c.CancelledAtMs > 0:
		return stateCancelled
	case c.Over(ms):
		return stateEnded
	case sale.Frozen:
		return stateFrozen
	case ms < c.StartsAtMs:
		return stateScheduled
	case sale.Remaining <= 0:
		return stateSoldOut
	}
	return stateOnSale
}

// ViewCampaign returns the API view of a stored campaign whose sale Redis reports as sale, with
// paid units of paid orders.
func ViewCampaign(c store.Campaign, sale lua.Sale, paid int64) CampaignView {
	r := CampaignView{
		ID: c.ID, Name: c.Name, Stock: c.Stock, PerUserLimit: c.PerUserLimit,
		StartsAt: time.UnixMilli(c.StartsAtMs).UTC(), Remaining: sale.Remaining, Sold: c.Sold, Paid: paid,
		PaymentWindowSeconds: c.PaymentWindowMs / 1000, State: campaignState(c, sale, time.Now()),
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
	sc, err := s.campaigns.get(ctx, id)
	if err != nil {
		return err
	}
	if s.redis.Stuck() {
		// Its read of Redis would wait go-redis's timeouts (40 s for a pipeline) to fail; a
		// crowd reloads the page all the while.
		return events.Errorf(events.Unavailable, "the sale cannot be reached right now; try again shortly")
	}
	view, err := saleView(ctx, s.redis, sc)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, view)
}

// viewCampaign is the API view of a stored campaign, with what Redis has left of it.
func (s *Server) viewCampaign(ctx context.Context, camp store.Campaign) (CampaignView, error) {
	return LiveCampaign(ctx, s.store, s.redis, camp)
}

// paidReader reads a campaign's paid units.
type paidReader interface {
	PaidUnits(ctx context.Context, campaign string) (int64, error)
}

// saleReader reads what Redis has left of a campaign.
type saleReader interface {
	Sale(ctx context.Context, campaign string) (lua.Sale, error)
}

// LiveCampaign returns the API view of a stored campaign, with what Redis has left of it and
// its paid units.
func LiveCampaign(ctx context.Context, st paidReader, r saleReader, camp store.Campaign) (CampaignView, error) {
	sc, err := readPaid(ctx, st, camp)
	if err != nil {
		return CampaignView{}, err
	}
	return saleView(ctx, r, sc)
}

// readPaid returns camp with its paid units (none without a payment window).
func readPaid(ctx context.Context, st paidReader, camp store.Campaign) (storedCampaign, error) {
	sc := storedCampaign{camp: camp}
	if camp.PaymentWindowMs > 0 {
		var err error
		if sc.paid, err = st.PaidUnits(ctx, camp.ID); err != nil {
			return storedCampaign{}, err
		}
	}
	return sc, nil
}

// saleView is the API view of a stored campaign with what Redis has left of it.
func saleView(ctx context.Context, r saleReader, sc storedCampaign) (CampaignView, error) {
	camp := sc.camp
	sale, err := r.Sale(ctx, camp.ID)
	if err != nil {
		return CampaignView{}, events.Wrap(events.Unavailable, err, "campaign %q is being restored; try again in a few seconds", camp.ID)
	}
	if !sale.Loaded {
		sale.Remaining = camp.Stock - camp.Sold
	}
	return ViewCampaign(camp, sale, sc.paid), nil
}

type purchaseRequest struct {
	Quantity *int64 `json:"quantity"`
}

type purchaseResponse struct {
	OrderID string        `json:"order_id"`
	Status  events.Status `json:"status"`
}

// decodePurchase reads a purchase's body and returns its quantity.
func decodePurchase(c echo.Context) (int, error) {
	body, err := readBody(c)
	if err != nil {
		return 0, err
	}
	if q, ok := quickQuantity(body); ok {
		return q, nil
	}
	var req purchaseRequest
	if err := decodeJSON(body, &req); err != nil {
		return 0, err
	}
	return req.quantity()
}

// quickQuantity reads the body every buyer sends, {"quantity": n} with n from 1 to 999,999,999
// and optional white space, without reflection: a tenth of a purchase's CPU went to
// encoding/json. Anything else, valid or not, is left to the strict decoder (ok false).
func quickQuantity(b []byte) (q int, ok bool) {
	i := 0
	ws := func() {
		for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
			i++
		}
	}
	lit := func(s string) bool {
		if len(b)-i < len(s) || string(b[i:i+len(s)]) != s {
			return false
		}
		i += len(s)
		return true
	}
	ws()
	if !lit("{") {
		return 0, false
	}
	ws()
	if !lit(`"quantity"`) {
		return 0, false
	}
	ws()
	if !lit(":") {
		return 0, false
	}
	ws()
	start := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' && i-start < 9 {
		q = 10*q + int(b[i]-'0')
		i++
	}
	if i == start || b[start] == '0' { // no digits, or a leading zero (0, 01): the strict path
		return 0, false
	}
	ws()
	if !lit("}") {
		return 0, false
	}
	ws()
	return q, i == len(b)
}

func (r purchaseRequest) quantity() (int, error) {
	if r.Quantity == nil || *r.Quantity < 1 || *r.Quantity > events.MaxUnits {
		return 0, events.Errorf(events.Invalid, "quantity must be a whole number from 1 to the campaign's per-user limit")
	}
	return int(*r.Quantity), nil
}

// purchase reserves units and queues the order. A purchase with an Idempotency-Key reserves
// under an order id derived from the key and remembers its answer (see idempotency.go).
func (s *Server) purchase(c echo.Context) error {
	campaign := c.Param("id")
	if !events.ValidCampaignID(campaign) {
		return events.Errorf(events.CampaignNotFound, "campaign %q not found", campaign)
	}
	key, err := idempotencyKey(c)
	if err != nil {
		return err
	}
	qty, err := decodePurchase(c)
	if err != nil {
		return err
	}
	soldOut := s.soldOut.refuses(campaign, qty, time.Now())
	if soldOut && key == "" {
		// A sold-out answer says only what GET /v1/campaigns/{id} says to anyone, so it needs no
		// identity: a crowd's refusals skip the token's signature check (the per-address limit
		// still applies). A keyed purchase goes on: its key may replay an earlier success.
		soldOutRefusals.Inc()
		return soldOutError(campaign, qty)
	}
	buyer, _, err := s.buyer(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if s.redis.Stuck() {
		// Reserve would refuse it at once too, but a keyed purchase reads its key first, and
		// that read would wait go-redis's timeouts (5 s) to say the same.
		s.redisDown.Failed(s.cfg.Logger, redisStuck)
		return events.Errorf(events.Unavailable, "the sale cannot be reached right now; nothing was reserved, try again shortly")
	}
	// While Kafka fails, the breaker refuses purchases before they reserve. A keyed one is
	// refused as a sold-out one is, only if its key names nothing (startKeyed): its buyer may be
	// owed an earlier answer, or what became of an order that holds a reservation already.
	// A keyed purchase the sold-out flag refuses is read the same way whatever the breaker
	// says, so it does not ask: asked, the breaker counts it as its one probe a cooldown, which
	// a refusal that never reaches Kafka wastes, while buyers of campaigns on sale are refused.
	blocked := !soldOut && !s.kafka.allow(time.Now())
	var orderID string
	var idem *idemRecord
	switch {
	case key != "":
		idem = s.idemRecord(campaign, buyer, key, purchaseFingerprint(campaign, qty))
		orderID = idem.orderID
		if goOn, err := s.startKeyed(c, idem, soldOut, blocked, qty); !goOn {
			return err
		}
	case blocked:
		return breakerRefusal()
	default:
		orderID = events.NewOrderID(campaign)
	}

	since := s.soldOut.since()
	res, err := s.redis.Reserve(ctx, campaign, orderID, buyer, qty, s.cfg.ReservationTTL)
	code := events.ErrorCode(err)
	switch {
	case code != events.Internal:
		s.redisDown.Answered(s.cfg.Logger, "redis answers purchases again")
	case ctx.Err() == nil: // not a client that hung up
		// A warning an outage, not one a buyer: a Redis that does not answer fails every
		// purchase, and a crowd's worth of lines would bury what the operator needs.
		s.redisDown.Failed(s.cfg.Logger, redisStuck, "err", err)
	}
	if err != nil {
		reservations.WithLabelValues(string(code)).Inc()
		if code == events.SoldOut {
			s.soldOut.mark(campaign, qty, time.Now(), since)
		}
		// Nothing was reserved, or Redis cannot tell: either way a retry with the same key may
		// run again, and reserves under the same order id.
		s.forget(ctx, idem)
		switch code {
		case events.Internal:
			// Not "nothing was reserved": an answer lost after the script ran leaves units held
			// until the reservation's deadline, which a retry without a key may run into. Logged
			// above, as part of its outage: said, as an expected refusal is.
			return events.Errorf(events.Unavailable, "the sale cannot be reached right now; try again shortly")
		case events.CampaignNotFound:
			return s.notInRedis(ctx, campaign, err)
		}
		return err
	}
	if res.Quantity != qty || res.User != buyer {
		// The key's record expired and the key came back with another body: the order it names
		// holds the first one.
		s.forget(ctx, idem)
		return events.Errorf(events.IdempotencyKeyReused, "this Idempotency-Key named an order of %d units; use a new key for another purchase", res.Quantity)
	}
	switch res.State {
	case lua.StatePending:
	case lua.StateReleased: // a retry of a first attempt whose order was cancelled
		return s.cancelled(c, idem, orderID)
	default: // confirmed or refunded: the first attempt's event reached the consumer
		return s.answer(c, idem, http.StatusAccepted, purchaseResponse{OrderID: orderID, Status: events.Pending})
	}
	now := time.Now()
	ev := events.Event{
		Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: now.UTC(),
		OrderID: orderID, CampaignID: campaign, UserID: buyer, Quantity: qty, Deadline: res.Deadline.UTC(),
	}
	if res.Again && (s.failedBefore(ctx, ev) || s.overdue(ctx, ev)) {
		return s.cancelled(c, idem, orderID)
	}
	failpoint.Inject(failpoint.APIBeforeProduce)
	err = s.produce(ctx, ev)
	s.kafka.record(err, time.Now())
	if err != nil {
		reservations.WithLabelValues(string(events.Unavailable)).Inc()
		s.cfg.Logger.Warn("produce failed; cancelling the order", "order_id", orderID, "err", err)
		// Whether or not the event reached Kafka, failing the order in the store first makes the
		// outcome certain: a late event finds the order failed and changes nothing.
		st, ferr := s.cancel(ctx, ev, events.ReasonProduce)
		switch {
		case st == events.Failed:
			// Failed for good in the store, whatever Redis did: the consumer never confirms a
			// failed order, so a retry must hear "cancelled" too, not queue it again.
			return s.cancelled(c, idem, orderID)
		case st != "":
			// The record reached Kafka after all, and the consumer stored the order first.
			return s.answer(c, idem, http.StatusAccepted, purchaseResponse{OrderID: orderID, Status: events.Pending})
		}
		// The store could not be written: the event may still reach the consumer, and the
		// sweeper settles the order at its deadline, confirmed or released. A retry with the
		// same key produces it again.
		s.cfg.Logger.Error("cancel after failed produce; the sweeper settles the order at its deadline", "order_id", orderID, "err", ferr)
		s.forget(ctx, idem)
		return events.Wrap(events.Unavailable, ferr, "order %s could not be queued and its outcome is not known yet: "+
			"it is placed or cancelled by %s (GET /v1/orders/%[1]s says which)", orderID, res.Deadline.UTC().Format(time.RFC3339))
	}
	failpoint.Inject(failpoint.APIAfterProduce)
	reservedCount.Inc()
	return s.answer(c, idem, http.StatusAccepted, purchaseResponse{OrderID: orderID, Status: events.Pending})
}

// redisStuck is the warning of an outage of Redis as purchases see it.
const redisStuck = "purchases fail: redis does not answer; buyers are told to retry"

// breakerRefusal answers a purchase the Kafka breaker refuses before it reserves.
func breakerRefusal() error {
	reservations.WithLabelValues(string(events.Unavailable)).Inc()
	return events.Errorf(events.Unavailable, "orders cannot be queued right now; nothing was reserved, try again shortly")
}

// failedBefore reports whether the store holds failed the order of ev, a keyed retry that found
// its reservation still pending: an earlier attempt failed the order after its produce failed,
// then stopped (or Redis refused it) before the release and the key's answer. The consumer never
// confirms a failed order, so queueing it again would answer 202 for an order that is over; the
// release is finished here instead, as that attempt would have. A store that cannot say leaves
// the purchase to go on, as it did before this check. The read is bounded as cancel's steps
// are: a store that stopped answering would hold the purchase as long as its buyer waits, past
// the key's lease, after which a retry takes the key over while this one goes on.
func (s *Server) failedBefore(ctx context.Context, ev events.Event) bool {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.ProduceTimeout)
	defer cancel()
	o, err := s.store.Order(rctx, ev.OrderID)
	if err != nil && events.ErrorCode(err) != events.OrderNotFound && ctx.Err() == nil {
		s.cfg.Logger.Warn("read a keyed retry's order; it is queued again without knowing whether it failed",
			"order_id", ev.OrderID, "err", err)
	}
	if err != nil || o.Status != events.Failed {
		return false
	}
	s.cancel(ctx, ev, o.Reason)
	return true
}

// overdue reports whether ev, a keyed retry that found its reservation still pending, came
// with less than half a reservation's time left (ev.Deadline): its first attempt reserved and
// stopped before its produce, long ago. Queued now, the order could reach the consumer after
// the sweeper failed it at its deadline, and the 202, remembered for the key, would name an
// order that is over. It is cancelled instead, as the sweeper would, and overdue reports true.
// An order the store holds already (the first attempt's event reached the consumer) goes on,
// as does one the store cannot say of.
func (s *Server) overdue(ctx context.Context, ev events.Event) bool {
	if time.Until(ev.Deadline) >= s.cfg.ReservationTTL/2 {
		return false
	}
	// As a failed produce is: nobody can tell whether the first attempt's event reached Kafka,
	// and the store, failing it first, makes the outcome certain.
	st, err := s.cancel(ctx, ev, events.ReasonProduce)
	if st == "" {
		s.cfg.Logger.Warn("cancel an overdue keyed retry's order; it is queued instead, and the sweeper settles it at its deadline",
			"order_id", ev.OrderID, "err", err)
	}
	return st == events.Failed
}

// cancel fails ev's order in the store, for reason, and releases its units, as the sweeper
// would, and returns the order's status in the store then ("" when the store cannot say, with
// the store's error). Bounded: with Kafka down, publishing OrderFailed would wait for it
// forever.
func (s *Server) cancel(ctx context.Context, ev events.Event, reason string) (events.Status, error) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ProduceTimeout)
	defer cancel()
	o, err := s.resolver.Fail(fctx, ev, reason, "api")
	switch {
	case o.Status == events.Failed && err != nil:
		s.cfg.Logger.Warn("order cancelled; its units come back at its deadline (the sweeper), as Redis did not take the release",
			"order_id", ev.OrderID, "err", err)
	case o.Status == events.Failed:
		s.soldOut.clear(ev.CampaignID) // units are back on sale
	}
	return o.Status, err
}

// notInRedis answers a purchase of a campaign Redis does not know. If the store knows it, Redis
// lost its data moments ago and the compensator is about to freeze and rebuild it: the buyer
// should come back, not be told the sale does not exist.
func (s *Server) notInRedis(ctx context.Context, campaign string, notFound error) error {
	// Through the campaign cache: a crowd buying a campaign being restored, or not created yet,
	// asks the store once a campaignTTL, not once a purchase; and one that has ended since is
	// told so.
	sc, err := s.campaigns.get(ctx, campaign)
	camp := sc.camp
	switch events.ErrorCode(err) {
	case "":
		if camp.Over(time.Now().UnixMilli()) {
			// Over, and its keys have left Redis: the store keeps its history.
			return events.Errorf(events.Ended, "campaign %q has ended", campaign)
		}
		return events.Errorf(events.Unavailable, "campaign %q is being restored; try again in a few seconds", campaign)
	case events.CampaignNotFound:
		return notFound
	}
	if errors.Is(err, errUnknownBudget) {
		// A refusal of ours, as a GET of the id gets: wrapped, it would read as a failed
		// dependency and be logged at WARN, one line per purchase of a made-up id.
		return err
	}
	return events.Wrap(events.Unavailable, err, "the sale cannot be reached right now; nothing was reserved, try again shortly")
}

// purchaseFingerprint is what makes two purchases with one key the same request: a body that
// decodes to the same quantity is the same body.
func purchaseFingerprint(campaign string, qty int) []byte {
	return fmt.Appendf(nil, "purchase %s quantity=%d", campaign, qty)
}

// soldOutRefusals counts purchases refused as sold out; looked up once, as every refusal of a
// sold-out campaign counts here.
var soldOutRefusals = reservations.WithLabelValues(string(events.SoldOut))

// reservedCount counts the purchases that reserved units and were queued.
var reservedCount = reservations.WithLabelValues("reserved")

// soldOutAnswer is a sold-out refusal, kept for the next buyer of the same quantity.
type soldOutAnswer struct {
	campaign string
	qty      int
	err      *events.Error // never changed once made
}

// lastSoldOut is the latest sold-out refusal: in a flash sale nearly every buyer gets the same.
var lastSoldOut atomic.Pointer[soldOutAnswer]

// soldOutError refuses qty units of campaign as sold out, made once per campaign and quantity
// rather than by fmt for every buyer.
func soldOutError(campaign string, qty int) error {
	if a := lastSoldOut.Load(); a != nil && a.campaign == campaign && a.qty == qty {
		return a.err
	}
	a := &soldOutAnswer{campaign: strings.Clone(campaign), qty: qty, err: events.Errorf(events.SoldOut, "campaign %q has fewer than %d units left", campaign, qty)}
	lastSoldOut.Store(a)
	return a.err
}

// startKeyed consults the record of a purchase's Idempotency-Key. It answers a replay, a
// conflict or a refusal itself, and reports whether the purchase goes on. When the campaign is
// known to be sold out, or the Kafka breaker is refusing (blocked), it only reads the record,
// so that a retry of a successful purchase is still replayed, and one whose order holds a
// reservation goes on (it takes no units; the reserve script answers for that order); a key
// that names nothing is refused.
func (s *Server) startKeyed(c echo.Context, idem *idemRecord, soldOut, blocked bool, qty int) (bool, error) {
	ctx := c.Request().Context()
	st, err := idem.begin(ctx, soldOut || blocked)
	if err == nil && st.outcome == "stale" { // the first request stopped half way: finish its work
		st, err = idem.begin(ctx, false)
	}
	if err != nil {
		return false, events.Wrap(events.Unavailable, err, "the Idempotency-Key cannot be checked right now; nothing was reserved, try again shortly")
	}
	switch st.outcome {
	case "new", "retry":
		return true, nil
	case "done":
		return false, replay(c, st)
	case "mismatch":
		return false, events.Errorf(events.IdempotencyKeyReused, "this Idempotency-Key was used with another request; use a new key for another purchase")
	case "busy":
		retryAfter(c, st.wait)
		return false, events.Errorf(events.IdempotencyInProgress, "the first request with this Idempotency-Key is still running; retry shortly")
	}
	// absent: nothing to replay, and the campaign is sold out or Kafka is failing.
	if !soldOut {
		return false, breakerRefusal()
	}
	soldOutRefusals.Inc()
	return false, soldOutError(c.Param("id"), qty)
}

// forget drops the record of a keyed purchase that has no answer to remember.
func (s *Server) forget(ctx context.Context, idem *idemRecord) {
	if idem == nil {
		return
	}
	if err := idem.abort(context.WithoutCancel(ctx)); err != nil {
		// The lease runs out, and the next retry takes the record over.
		s.cfg.Logger.Warn("forget an idempotency key", "order_id", idem.orderID, "err", err)
	}
}

// cancelled answers 503 for an order that was reserved but could not be queued and has been
// cancelled. With a key the answer is remembered: the key names that order for good.
func (s *Server) cancelled(c echo.Context, idem *idemRecord, orderID string) error {
	var body errorBody
	body.Error.Code = events.Unavailable
	body.Error.Message = "the order could not be queued and was cancelled; nothing was charged, try again"
	if idem != nil {
		body.Error.Message = fmt.Sprintf("order %s could not be queued and was cancelled; nothing was charged, try again with a new Idempotency-Key", orderID)
	}
	return s.answer(c, idem, http.StatusServiceUnavailable, body)
}

// answer writes v as the JSON answer and, for a keyed purchase, remembers its exact bytes.
func (s *Server) answer(c echo.Context, idem *idemRecord, status int, v any) error {
	retryIfUnavailable(c, status)
	if idem == nil {
		return c.JSON(status, v)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n') // c.JSON's bytes, which a replay repeats
	if err := idem.finish(context.WithoutCancel(c.Request().Context()), status, echo.MIMEApplicationJSON, b); err != nil {
		// The lease runs out, and a retry finds the same order through its derived id.
		s.cfg.Logger.Warn("remember an idempotent answer", "order_id", idem.orderID, "err", err)
	}
	return c.Blob(status, echo.MIMEApplicationJSON, b)
}

func (s *Server) produce(ctx context.Context, ev events.Event) error {
	rec, err := events.Record(s.cfg.Topics.Requested, ev)
	if err != nil {
		return err
	}
	start := time.Now()
	err = events.Acked(context.WithoutCancel(ctx), s.producer.Produce, rec, s.cfg.ProduceTimeout)
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
	// PayBy is when an order of a campaign with a payment window must be paid by.
	PayBy     *time.Time `json:"pay_by,omitempty"`
	PaymentID string     `json:"payment_id,omitempty"`
}

// ViewOrder returns the API view of a stored order.
func ViewOrder(o store.Order) OrderView {
	v := OrderView{
		OrderID: o.OrderID, CampaignID: o.CampaignID, UserID: o.UserID, Quantity: o.Quantity,
		Status: o.Status, Reason: o.Reason, CreatedAt: time.UnixMilli(o.CreatedAtMs).UTC(), PaymentID: o.PaymentID,
	}
	if o.PayByMs > 0 {
		t := time.UnixMilli(o.PayByMs).UTC()
		v.PayBy = &t
	}
	return v
}

// orderReadTimeout bounds order's two reads: a store or a Redis that stopped answering would
// hold a GET, or an event stream's first read, as long as its client waits, and a stopping
// api's drain behind them until its timeout.
const orderReadTimeout = 5 * time.Second

// order finds an order: in the store once it is final, else as a reservation in Redis. It asks
// both whatever the first says, so an order that exists and one that does not take the same
// work, and a buyer cannot time another's orders into existence.
func (s *Server) order(ctx context.Context, id string) (OrderView, error) {
	ctx, cancel := context.WithTimeout(ctx, orderReadTimeout)
	defer cancel()
	o, err := s.store.Order(ctx, id)
	res, rerr := s.redis.Reservation(ctx, id)
	if err == nil {
		return ViewOrder(o), nil
	}
	if events.ErrorCode(err) != events.OrderNotFound {
		return OrderView{}, err
	}
	if errors.Is(rerr, lua.ErrNoReservation) {
		return OrderView{}, err
	}
	if rerr != nil {
		return OrderView{}, events.Wrap(events.Unavailable, rerr, "the order cannot be read right now; try again shortly")
	}
	created, ok := events.IDTime(id)
	if !ok { // an id derived from an Idempotency-Key has no time in it
		created = res.Deadline.Add(-s.cfg.ReservationTTL)
	}
	// Redis moves a reservation on only after the store has the order's row, so a reservation
	// without a row is pending, whatever Redis says.
	return OrderView{OrderID: id, CampaignID: res.Campaign, UserID: res.User, Quantity: int64(res.Quantity), Status: events.Pending, CreatedAt: created.UTC()}, nil
}

// buyersOrder returns the order with id if it is buyer's: another buyer's order does not exist,
// as far as this one can tell.
func (s *Server) buyersOrder(ctx context.Context, buyer, id string) (OrderView, error) {
	if _, ok := events.CampaignOf(id); !ok {
		return OrderView{}, events.Errorf(events.OrderNotFound, "order %q not found", id)
	}
	o, err := s.order(ctx, id)
	if err != nil {
		return OrderView{}, err
	}
	if o.UserID != buyer {
		return OrderView{}, events.Errorf(events.OrderNotFound, "order %q not found", id)
	}
	return o, nil
}

func (s *Server) getOrder(c echo.Context) error {
	buyer, _, err := s.buyer(c)
	if err != nil {
		return err
	}
	o, err := s.buyersOrder(c.Request().Context(), buyer, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, o)
}

type paymentRequest struct {
	PaymentID string `json:"payment_id"`
}

// pay records the payment of a confirmed order (the payment service calls it once the payer
// has paid).
func (s *Server) pay(c echo.Context) error {
	id := c.Param("id")
	if _, ok := events.CampaignOf(id); !ok {
		return events.Errorf(events.OrderNotFound, "order %q not found", id)
	}
	var req paymentRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	// No spaces: "p-1 " would be another payment than "p-1", though the same to anyone reading
	// them (unicode.IsPrint lets the ASCII space through, and no other).
	if n := utf8.RuneCountInString(req.PaymentID); n < 1 || n > 255 || !utf8.ValidString(req.PaymentID) ||
		strings.ContainsFunc(req.PaymentID, func(r rune) bool { return !unicode.IsPrint(r) || r == ' ' }) {
		return events.Errorf(events.Invalid, "payment_id must be 1 to 255 printable characters, without spaces")
	}
	// It runs to its end whether or not the payment service waits, as compensate does: cut
	// short after the store paid the order, OrderPaid would wait for the sweeper's announcement.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), createTimeout)
	defer cancel()
	o, err := s.resolver.Pay(ctx, id, req.PaymentID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ViewOrder(o))
}

func (s *Server) compensate(c echo.Context) error {
	id := c.Param("id")
	if _, ok := events.CampaignOf(id); !ok {
		return events.Errorf(events.OrderNotFound, "order %q not found", id)
	}
	if err := noFields(c); err != nil {
		return err
	}
	// It runs to its end whether or not the admin waits, as the campaign controls do: cut
	// short, a refund is stored while Redis still holds its units.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), createTimeout)
	defer cancel()
	o, err := s.resolver.Compensate(ctx, id)
	if err != nil {
		return err
	}
	if o.Status == events.Failed || o.Status == events.Refunded {
		s.changed(o.CampaignID) // this process gave units back
	}
	return c.JSON(http.StatusOK, ViewOrder(o))
}
