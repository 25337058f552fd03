package api

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/seckill/seckill/events"
)

// ErrorStatusCode maps an error code to its HTTP status: the one place that does.
func ErrorStatusCode(code events.Code) int {
	switch code {
	case events.Invalid:
		return http.StatusBadRequest
	case events.Unauthorized:
		return http.StatusUnauthorized
	case events.CampaignNotFound, events.OrderNotFound, codeNotFound:
		return http.StatusNotFound
	case codeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case events.CampaignExists, events.SoldOut, events.LimitExceeded, events.NotStarted, events.Ended, events.IdempotencyInProgress,
		events.AlreadyPaid, events.PaymentReused, events.PaymentWindowClosed, events.OrderNotConfirmed, events.OrderNotPayable,
		events.CampaignCancelled:
		return http.StatusConflict
	case events.BodyTooLarge:
		return http.StatusRequestEntityTooLarge
	case events.UnsupportedMediaType:
		return http.StatusUnsupportedMediaType
	case events.IdempotencyKeyReused:
		return http.StatusUnprocessableEntity
	case events.RateLimited:
		return http.StatusTooManyRequests
	case events.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// Codes of the router's own refusals.
const (
	codeNotFound         events.Code = "not_found"
	codeMethodNotAllowed events.Code = "method_not_allowed"
)

type errorBody struct {
	Error struct {
		Code    events.Code `json:"code"`
		Message string      `json:"message"`
	} `json:"error"`
}

// handleError writes every error as {"error": {"code", "message"}}.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var body errorBody
	var he *echo.HTTPError
	e, ours := err.(*events.Error) // most errors: no errors.As, whose targets escape
	switch {
	case ours && e.Code != events.Internal:
		body.Error.Code, body.Error.Message = e.Code, e.Message
	case ours && e.Cause == nil:
		// A bug of ours (a handler's panic): not a dependency's failure, and it may have
		// reserved units before it stopped, so it must not say the request changed nothing.
		body.Error.Code, body.Error.Message = events.Internal, "internal error"
	case errors.As(err, &he) && he.Code == http.StatusNotFound:
		body.Error.Code, body.Error.Message = codeNotFound, "no such route"
	case errors.As(err, &he) && he.Code == http.StatusMethodNotAllowed:
		body.Error.Code, body.Error.Message = codeMethodNotAllowed, "method not allowed on this route"
	case errors.As(err, &he) && he.Code == http.StatusRequestEntityTooLarge:
		body.Error.Code, body.Error.Message = events.BodyTooLarge, "request body too large"
	case events.ErrorCode(err) == events.Internal:
		// Not one of ours: a dependency failed (handler panics arrive as *events.Error).
		body.Error.Code, body.Error.Message = events.Unavailable, "a dependency is unavailable; the request changed nothing, try again"
	default:
		body.Error.Code, body.Error.Message = events.ErrorCode(err), events.ErrorMessage(err)
	}
	status := ErrorStatusCode(body.Error.Code)
	s.logRefusal(c, status, err, ours && e.Cause == nil)
	retryIfUnavailable(c, status)
	if werr := c.JSON(status, body); werr != nil {
		s.cfg.Logger.Warn("write error response", "err", werr)
	}
}

// logRefusal logs an answer at the level an operator on call wants: a failure of ours at ERROR,
// a dependency that failed at WARN, and an expected refusal (sold out, a campaign being
// restored, the breaker open: said, not caused) at DEBUG; the counters count them all. A
// dependency's call that failed because the client hung up (which ends the request's context)
// is no failure of the dependency: at DEBUG, or any client could write a WARN per request.
func (s *Server) logRefusal(c echo.Context, status int, err error, expected bool) {
	ctx := c.Request().Context()
	level := slog.LevelDebug
	switch {
	case status == http.StatusInternalServerError:
		level = slog.LevelError
	case status == http.StatusServiceUnavailable && !expected && ctx.Err() == nil:
		level = slog.LevelWarn
	}
	if !s.cfg.Logger.Enabled(ctx, level) { // a crowd's refusals: nothing to build
		return
	}
	s.cfg.Logger.Log(ctx, level, "request refused", "method", c.Request().Method,
		"path", c.Request().URL.Path, "status", status, "err", err)
}

// retryIfUnavailable sets Retry-After on a 503 that has none yet: every 503 says when to come
// back, whether the error handler writes it, a purchase answers it itself (an order cancelled
// after a failed produce), or a key replays it.
func retryIfUnavailable(c echo.Context, status int) {
	if status == http.StatusServiceUnavailable && c.Response().Header().Get("Retry-After") == "" {
		retryAfter(c, 2*time.Second)
	}
}
