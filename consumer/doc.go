// Package consumer persists OrderRequested events into the store, in batches, idempotently, and
// commits Kafka offsets only after the store committed.
//
// For each polled batch: decode (undecodable events are poison), ConfirmOrders in one
// transaction (retried with backoff while the store is down), mark the confirmed reservations in
// Redis, send refused and poison events to the dead-letter topic with the reason in headers and
// OrderConfirmed events to the results topic, and only then commit the offsets. A crash anywhere
// in between redelivers the batch, and redelivery changes nothing that was already done.
//
// The group consumer overlaps the stages of consecutive batches (events.ConsumePipelined):
// while batch N is confirmed in Redis, announced and its offsets committed, batch N+1 is polled,
// decoded and stored. Each batch still goes store, then Redis and Kafka, then offsets; batches
// finish one at a time in order, and a batch whose finish fails stops the consumer before the
// next one finishes, so no offset is committed past a batch that was not finished.
//
// Config.MaxRate paces the group at a rate the database can take, each member at its share of
// the requested topic's partitions; Kafka holds the rest of a burst. Replay (seckill replay)
// re-consumes the requested topic from a time or an offset, outside the group, into the same
// persister, after a restore of the database from a backup.
package consumer
