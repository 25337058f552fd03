// Package events is seckill's wire contract: the order events that travel through Kafka, the
// topics they travel on, the order statuses and error codes that clients see, and the ids that
// name orders. Golden files in testdata freeze the JSON encoding; change them only together with
// Version.
package events
