package events

import (
	"errors"
	"fmt"
)

// Code classifies an Error. Codes are part of the wire contract: clients read them in
// `error.code`, and OrderFailed events carry them as reasons.
type Code string

// The error codes. api.ErrorStatusCode maps each to its HTTP status.
const (
	// Invalid means the request can never succeed as written.
	Invalid Code = "invalid_request"
	// Unauthorized means the caller is not who the request needs.
	Unauthorized Code = "unauthorized"
	// CampaignNotFound means no campaign has the id.
	CampaignNotFound Code = "campaign_not_found"
	// OrderNotFound means no order with the id is visible to the caller.
	OrderNotFound Code = "order_not_found"
	// CampaignExists means a campaign with the id exists already.
	CampaignExists Code = "campaign_exists"
	// SoldOut means the campaign has fewer units left than asked for.
	SoldOut Code = "sold_out"
	// LimitExceeded means the purchase would take the buyer past the per-user limit.
	LimitExceeded Code = "limit_exceeded"
	// NotStarted means the campaign's sale has not started.
	NotStarted Code = "not_started"
	// Ended means the campaign's sale is over.
	Ended Code = "ended"
	// Unavailable means a dependency failed; the request changed nothing and may be retried.
	Unavailable Code = "unavailable"
	// Internal means a bug.
	Internal Code = "internal"
	// BodyTooLarge means the request body is over the api's size cap.
	BodyTooLarge Code = "body_too_large"
	// UnsupportedMediaType means a request body that is not application/json.
	UnsupportedMediaType Code = "unsupported_media_type"
	// RateLimited means the caller sent more requests than its rate allows; Retry-After says
	// when to try again.
	RateLimited Code = "rate_limited"
	// IdempotencyKeyReused means the Idempotency-Key was used before with another request.
	IdempotencyKeyReused Code = "idempotency_key_reused"
	// IdempotencyInProgress means the first request with the Idempotency-Key is still running.
	IdempotencyInProgress Code = "idempotency_in_progress"
	// AlreadyPaid means the order was paid with another payment.
	AlreadyPaid Code = "already_paid"
	// PaymentReused means the payment paid another order already: a payment pays one order.
	PaymentReused Code = "payment_reused"
	// PaymentWindowClosed means the order was not paid in time; its units went back on sale.
	PaymentWindowClosed Code = "payment_window_closed"
	// OrderNotConfirmed means the order is still pending: a payment may be retried shortly.
	OrderNotConfirmed Code = "order_not_confirmed"
	// OrderNotPayable means the order failed, was refunded, or needs no payment.
	OrderNotPayable Code = "order_not_payable"
	// CampaignCancelled means an operator cancelled the campaign: it can no longer change.
	CampaignCancelled Code = "campaign_cancelled"
)

// Error is seckill's one error type for failures a caller must tell apart.
// Message is what a client may read; Cause, what only the log should (an address, a driver's
// words).
type Error struct {
	Code    Code
	Message string
	Cause   error // nil when Message says it all
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return string(e.Code) + ": " + e.Message + ": " + e.Cause.Error()
	}
	return string(e.Code) + ": " + e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

// Wrap returns an *Error with the code, a formatted message for the client, and the cause for
// the log.
func Wrap(code Code, cause error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Cause: cause}
}

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the first *Error in err's chain, Internal if there is none, and
// "" for a nil err.
func ErrorCode(err error) Code {
	var e *Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		return e.Code
	}
	return Internal
}

// ErrorMessage returns the message of the first *Error in err's chain; other errors are not
// shown to clients, so it returns a generic text for them.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}
