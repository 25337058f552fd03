package events

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
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

// Partitioner is the partitioning of the api's producer. Purchases (Requested) are not placed by
// key: each is an order of its own, and no reader needs one buyer's in one partition (the
// consumer is idempotent and order-free). Hashed by key, a produce request of a dozen purchases
// put a batch of one or two records in each of the topic's partitions, and the broker pays per
// batch; this pins one partition until its batch is sent, then takes the one with the fewest
// records waiting, so a partition whose leader is gone stops taking purchases. Side by side in
// the bench's all-accept-unpaced, two rounds each (franz-go's sticky partitioner, the same while
// every leader answers, against the key hash): Kafka 13 and 11 µs an order against 16 and 14,
// 13,033 and 14,386 req/s against 12,303 and 13,560. Every other topic keeps franz-go's key
// hash: an order's results stay in one partition, in the order they were produced.
func (t Topics) Partitioner() kgo.Opt { return kgo.RecordPartitioner(partitioner{t.Requested}) }

type partitioner struct{ requested string }

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if topic == p.requested {
		return kgo.LeastBackupPartitioner().ForTopic(topic)
	}
	return kgo.UniformBytesPartitioner(64<<10, true, true, nil).ForTopic(topic) // franz-go's default
}

// All returns the topic names.
func (t Topics) All() []string { return []string{t.Requested, t.Results, t.DLQ} }

// The DLQ headers, after watermill's poison queue: why the event failed and where it came from.
const (
	HeaderReason          = "seckill-reason"
	HeaderSourceTopic     = "seckill-source-topic"
	HeaderSourcePartition = "seckill-source-partition"
	HeaderSourceOffset    = "seckill-source-offset"
	// HeaderValueOmitted is on a dead letter that goes without its source's value, which
	// made it too large to write (see WithoutValue): how many bytes were left out.
	HeaderValueOmitted = "seckill-value-omitted"
)

// CreateTopics creates the topics with explicit partitions and replication. Topics that exist
// already are left as they are, also where Kafka may not let this client create topics.
func CreateTopics(ctx context.Context, adm *kadm.Client, t Topics, partitions int32, replication int16) error {
	resp, err := adm.CreateTopics(ctx, partitions, replication, TopicConfigs(replication), t.All()...)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	refused := map[string]error{}
	for _, r := range resp.Sorted() {
		switch {
		case r.Err == nil, errors.Is(r.Err, kerr.TopicAlreadyExists):
		// A managed Kafka's ACLs or policy answer so even for a topic that exists, which its
		// operator created as the README says: only a missing one is an error then.
		case errors.Is(r.Err, kerr.TopicAuthorizationFailed), errors.Is(r.Err, kerr.ClusterAuthorizationFailed),
			errors.Is(r.Err, kerr.PolicyViolation):
			refused[r.Topic] = r.Err
		case r.ErrMessage != "":
			// Kafka's message says what its code does not: INVALID_REPLICATION_FACTOR alone left
			// the operator of a one-broker cluster to guess, retry after retry, what "The target
			// replication factor of 3 cannot be reached because only 1 broker(s) are
			// registered" says.
			return fmt.Errorf("create topic %s: %w: %s", r.Topic, r.Err, r.ErrMessage)
		default:
			return fmt.Errorf("create topic %s: %w", r.Topic, r.Err)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(refused))
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("describe topics: %w", err)
	}
	for _, topic := range names {
		if td, ok := details[topic]; !ok || td.Err != nil {
			return fmt.Errorf("topic %s is missing and Kafka refused to create it (%w): create it with the settings of the README's Kafka section", topic, refused[topic])
		}
	}
	return nil
}

// DeleteTopics deletes topics, each once: Kafka refuses a request that names a topic twice,
// for that topic. A topic that is not there is no error; one Kafka did not delete is.
func DeleteTopics(ctx context.Context, adm *kadm.Client, topics ...string) error {
	resp, err := adm.DeleteTopics(ctx, slices.Compact(slices.Sorted(slices.Values(topics)))...)
	if err != nil {
		return fmt.Errorf("delete topics: %w", err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("delete topic %s: %w", r.Topic, r.Err)
		}
	}
	return nil
}

// TopicConfigs are the settings seckill creates its topics with, for a replication factor:
// never elect a replica that missed acknowledged writes, and with 3 replicas or more, ack a
// produce (acks=all) only once 2 of them have it, so one broker's loss loses no acknowledged
// order and stops no sale. Records are deleted by retention only, never compacted, whatever
// the brokers' log.cleanup.policy: a buyer's orders of a campaign share a key (Key), and
// compaction keeps a key's last record only.
func TopicConfigs(replication int16) map[string]*string {
	configs := map[string]*string{
		"unclean.leader.election.enable": kadm.StringPtr("false"),
		"cleanup.policy":                 kadm.StringPtr("delete"),
	}
	if replication >= 3 {
		configs["min.insync.replicas"] = kadm.StringPtr(strconv.Itoa(int(replication) - 1))
	}
	return configs
}

// CheckTopics reports what makes existing topics weaker than CreateTopics would have made them
// for replication: fewer replicas, a lower min.insync.replicas, unclean elections allowed,
// compaction. A
// topic created by hand or by an older seckill may differ; an operator decides what to do.
func CheckTopics(ctx context.Context, adm *kadm.Client, t Topics, replication int16) ([]string, error) {
	details, err := adm.ListTopics(ctx, t.All()...)
	if err != nil {
		return nil, fmt.Errorf("describe topics: %w", err)
	}
	var problems []string
	for _, td := range details.Sorted() {
		for _, p := range td.Partitions.Sorted() {
			if len(p.Replicas) < int(replication) {
				problems = append(problems, fmt.Sprintf("%s has %d replicas, want %d", td.Topic, len(p.Replicas), replication))
				break
			}
		}
	}
	configs, err := adm.DescribeTopicConfigs(ctx, t.All()...)
	if err != nil {
		return nil, fmt.Errorf("describe topic configs: %w", err)
	}
	want := TopicConfigs(replication)
	for _, rc := range configs {
		for _, c := range rc.Configs {
			w, ok := want[c.Key]
			if !ok || c.Value == nil {
				continue
			}
			switch c.Key {
			case "min.insync.replicas":
				if got, _ := strconv.Atoi(*c.Value); got < int(replication)-1 {
					problems = append(problems, fmt.Sprintf("%s has min.insync.replicas=%s, want %s", rc.Name, *c.Value, *w))
				}
			case "unclean.leader.election.enable", "cleanup.policy":
				if *c.Value != *w {
					problems = append(problems, fmt.Sprintf("%s has %s=%s, want %s", rc.Name, c.Key, *c.Value, *w))
				}
			}
		}
	}
	return problems, nil
}

// Key returns the record key of an event: its campaign and buyer. The results topic is
// partitioned by it (an order's outcomes in one partition, in order); the requested topic is
// not (see Partitioner), so two consumers may persist one buyer's orders at once: the store
// serializes them, as a batch holds its campaigns' row locks. Dead letters keep it, which
// tells their campaign (KeyCampaign) when the value cannot be read, and redrive holds a
// corrected event to it.
func Key(e Event) []byte { return []byte(e.CampaignID + "/" + e.UserID) }

// KeyCampaign returns the campaign of a record key from Key, and false if key is not one: it
// tells the campaign of a record whose value cannot be read.
func KeyCampaign(key []byte) (string, bool) {
	c, user, ok := strings.Cut(string(key), "/")
	if !ok || user == "" || !ValidCampaignID(c) {
		return "", false
	}
	return c, true
}
