package events

import "strings"

// Status is an order's state as clients see it.
type Status string

// The order statuses. Pending lives only in Redis; the others are rows in the store. Confirmed
// is final unless the campaign has a payment window: then the order ends Paid or Expired.
// Refunded follows Confirmed or Paid.
const (
	Pending   Status = "pending"
	Confirmed Status = "confirmed"
	Failed    Status = "failed"
	Refunded  Status = "refunded"
	Paid      Status = "paid"
	Expired   Status = "expired"
)

// Reasons an order failed, carried in OrderFailed events, DLQ headers and order rows.
const (
	ReasonExpired      = "expired"        // the sweeper released a reservation past its deadline
	ReasonOperator     = "operator"       // an operator compensated the order (a refunded one: once its units are back in Redis)
	ReasonProduce      = "produce_failed" // the api could not hand the event to Kafka
	ReasonStoreSoldOut = "store_sold_out" // the store's conditional stock update refused it
	ReasonStoreLimit   = "store_limit_exceeded"
	ReasonPoison       = "poison" // the event could not be decoded or validated
	// ReasonUnpaid is the reason of an order that expired unpaid, once its units are back in
	// Redis; until then an expired order's reason is "" (store.ExpiringOrders).
	ReasonUnpaid = "unpaid"
	// ReasonReleasedBeforeReplay is the reason of a failed order whose units Redis gave back
	// before the store had the order: a replay, or the consumer meeting its event again after a
	// restore lost the row, stores it so. Redis does not keep why the order failed, and the
	// first reason went with the row, so why is unknown. Despite its name the consumer records
	// it too; the value stays, as stored rows and the audit hold it.
	ReasonReleasedBeforeReplay = "released_before_replay"
)

// ReasonKind is what a dead letter's reason is counted under: a poison letter's reason goes on
// to say why, naming its event, so each is its own (dlq list --reason poison shows them); the
// others are their reason.
func ReasonKind(reason string) string {
	if strings.HasPrefix(reason, ReasonPoison+":") {
		return ReasonPoison
	}
	return reason
}
