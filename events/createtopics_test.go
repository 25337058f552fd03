package events_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
)

// TestCreateTopicsWhereKafkaMayNotCreate: a managed Kafka whose ACLs let the api produce but
// not create topics answers CreateTopics with TOPIC_AUTHORIZATION_FAILED, also for topics its
// operator created beforehand. The api took that for a failure and retried it for ever, never
// serving, though the README tells that operator to create the topics and says the api checks
// them. Topics that exist are now enough; a missing one is named, with what refused it.
func TestCreateTopicsWhereKafkaMayNotCreate(t *testing.T) {
	kafka := kafkatest.FakeCluster(t)
	brokers := kafka.ListenAddrs()
	adm := kadm.NewClient(kafkatest.Client(t, brokers))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	created := events.NewTopics("t" + strings.ToLower(events.NewID()))
	if err := events.CreateTopics(ctx, adm, created, 3, 1); err != nil { // the operator's
		t.Fatal(err)
	}
	kafka.ControlKey(int16(kmsg.CreateTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kafka.KeepControl()
		creq := req.(*kmsg.CreateTopicsRequest)
		resp := creq.ResponseKind().(*kmsg.CreateTopicsResponse)
		for _, rt := range creq.Topics {
			st := kmsg.NewCreateTopicsResponseTopic()
			st.Topic, st.ErrorCode = rt.Topic, kerr.TopicAuthorizationFailed.Code
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	if err := events.CreateTopics(ctx, adm, created, 3, 1); err != nil {
		t.Errorf("topics that exist, where Kafka may not create topics: %v, want nil", err)
	}
	missing := events.NewTopics("t" + strings.ToLower(events.NewID()))
	err := events.CreateTopics(ctx, adm, missing, 3, 1)
	if !errors.Is(err, kerr.TopicAuthorizationFailed) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing topics, where Kafka may not create topics: %v, want an error naming one missing and TOPIC_AUTHORIZATION_FAILED", err)
	}
}

// TestCreateTopicsSaysWhyKafkaRefused: a replication factor past the brokers registered is
// refused with INVALID_REPLICATION_FACTOR, which the api retries (brokers may still be joining)
// with a warning each time. The code alone does not say how many brokers Kafka has; its message
// does, and the error carries it.
func TestCreateTopicsSaysWhyKafkaRefused(t *testing.T) {
	brokers := kafkatest.Real(t)
	adm := kadm.NewClient(kafkatest.Client(t, brokers))
	meta, err := adm.BrokerMetadata(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	replication := int16(len(meta.Brokers) + 1)
	err = events.CreateTopics(t.Context(), adm, events.NewTopics("t"+strings.ToLower(events.NewID())), 1, replication)
	if !errors.Is(err, kerr.InvalidReplicationFactor) || !strings.Contains(err.Error(), "broker(s) are registered") {
		t.Errorf("topics of %d replicas on %d brokers: %v; want INVALID_REPLICATION_FACTOR with Kafka's message of how many brokers it has",
			replication, len(meta.Brokers), err)
	}
}
