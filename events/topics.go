package events

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Topics names the three topics. Tests give each run its own prefix so they can share a broker.
type Topics struct {
	Prefix    string // names the deployment: its topics, consumer groups, locks and Redis epoch
	Requested string // OrderRequested, keyed by campaign/user
	Results   string // OrderConfirmed, OrderFailed, OrderRefunded
	DLQ       string // OrderRequested events the consumer could not persist, with the reason in headers
}

// DefaultPrefix is the topic prefix of a production deployment.
const DefaultPrefix = "seckill"

// NewTopics returns the topic names under prefix ("seckill" gives "seckill.orders.requested").
func NewTopics(prefix string) Topics {
	return Topics{
		Prefix:    prefix,
		Requested: prefix + ".orders.requested",
		Results:   prefix + ".orders.results",
		DLQ:       prefix + ".orders.dlq",
	}
}

// ConsumerGroup is the consumer's group, whose lag tells when the store holds every order.
func (t Topics) ConsumerGroup() string { return t.Requested + ".consumer" }

// CompensatorGroup is the compensator's group on the DLQ.
func (t Topics) CompensatorGroup() string { return t.DLQ + ".compensator" }

// All returns the topic names.
func (t Topics) All() []string { return []string{t.Requested, t.Results, t.DLQ} }

// The DLQ headers, after watermill's poison queue: why the event failed and where it came from.
const (
	HeaderReason          = "seckill-reason"
	HeaderSourceTopic     = "seckill-source-topic"
	HeaderSourcePartition = "seckill-source-partition"
	HeaderSourceOffset    = "seckill-source-offset"
)

// CreateTopics creates the topics with explicit partitions and replication. Topics that exist
// already are left as they are.
func CreateTopics(ctx context.Context, adm *kadm.Client, t Topics, partitions int32, replication int16) error {
	resp, err := adm.CreateTopics(ctx, partitions, replication, nil, t.All()...)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", r.Topic, r.Err)
		}
	}
	return nil
}

// Key returns the record key of an OrderRequested event: one buyer's purchases in a campaign land
// on one partition, so the store's per-user row is updated by one consumer at a time.
func Key(e Event) []byte { return []byte(e.CampaignID + "/" + e.UserID) }
