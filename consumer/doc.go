// Package consumer persists OrderRequested events into the store, in batches, idempotently, and
// commits Kafka offsets only after the store committed.
//
// For each polled batch: decode (undecodable events are poison), ConfirmOrders in one
// transaction (retried with backoff while the store is down), mark the confirmed reservations in
// Redis, send refused and poison events to the dead-letter topic with the reason in headers and
// OrderConfirmed events to the results topic, and only then commit the offsets. A crash anywhere
// in between redelivers the batch, and redelivery changes nothing that was already done.
package consumer
