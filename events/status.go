package events

// Status is an order's state as clients see it.
type Status string

// The order statuses. Pending lives only in Redis; the others are final rows in the store, and
// Refunded can only follow Confirmed.
const (
	Pending   Status = "pending"
	Confirmed Status = "confirmed"
	Failed    Status = "failed"
	Refunded  Status = "refunded"
)

// Reasons an order failed, carried in OrderFailed events, DLQ headers and order rows.
const (
	ReasonExpired      = "expired"        // the sweeper released a reservation past its deadline
	ReasonOperator     = "operator"       // an operator compensated the order
	ReasonProduce      = "produce_failed" // the api could not hand the event to Kafka
	ReasonStoreSoldOut = "store_sold_out" // the store's conditional stock update refused it
	ReasonStoreLimit   = "store_limit_exceeded"
	ReasonPoison       = "poison" // the event could not be decoded or validated
)
