// Package kafkatest gives tests a Kafka broker: the real one named by SECKILL_TEST_KAFKA_BROKERS,
// or an in-process kfake cluster.
package kafkatest

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seckill/seckill/events"
)

// BrokersEnv names the variable that points the tests at a real Kafka broker.
const BrokersEnv = "SECKILL_TEST_KAFKA_BROKERS"

// Broker is one kind of broker a test can run on.
type Broker struct {
	Name  string
	Start func(tb testing.TB) []string // returns seed brokers
}

// Brokers are the brokers the broker suite runs on: real Apache Kafka and kfake.
var Brokers = []Broker{{"kafka", Real}, {"kfake", Fake}}

// Each runs fn once per broker as named subtests.
func Each(t *testing.T, fn func(t *testing.T, brokers []string)) {
	t.Helper()
	for _, b := range Brokers {
		t.Run(b.Name, func(t *testing.T) { fn(t, b.Start(t)) })
	}
}

// Real returns the seed brokers of the real test broker; a missing or unreachable broker fails
// the test with the reason.
func Real(tb testing.TB) []string {
	tb.Helper()
	v := os.Getenv(BrokersEnv)
	if v == "" {
		tb.Fatalf("%s is not set: start the test services with `deploy/local/services.sh up` and `eval $(deploy/local/services.sh env)`, or run `make test`", BrokersEnv)
	}
	seeds := strings.Split(v, ",")
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		tb.Fatalf("kafka client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).BrokerMetadata(ctx); err != nil {
		tb.Fatalf("kafka at %s=%s is unreachable: %v", BrokersEnv, v, err)
	}
	return seeds
}

// Fake starts a kfake cluster for the test and returns its seed brokers.
func Fake(tb testing.TB) []string {
	tb.Helper()
	return FakeCluster(tb).ListenAddrs()
}

// FakeCluster starts a kfake cluster for the test and returns it, for a test that steers its
// answers (Cluster.ControlKey).
func FakeCluster(tb testing.TB) *kfake.Cluster {
	tb.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		tb.Fatalf("kfake: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// LoseRecordsOnce makes kafka answer the first fetch past a partition's offset 0 with
// OFFSET_OUT_OF_RANGE, as after an unclean leader election that truncated the log: franz-go
// resets the partition, rewinding, and reports an ErrDataLoss, which is informational. lost
// tells whether it has, so that a test can tell it did lose data.
func LoseRecordsOnce(kafka *kfake.Cluster) (lost func() bool) {
	var happened atomic.Bool // set on kfake's goroutine
	kafka.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kafka.KeepControl()
		fr := req.(*kmsg.FetchRequest)
		for _, rt := range fr.Topics {
			for _, rp := range rt.Partitions {
				if rp.FetchOffset == 0 || !happened.CompareAndSwap(false, true) {
					continue
				}
				resp := fr.ResponseKind().(*kmsg.FetchResponse)
				st := kmsg.NewFetchResponseTopic()
				st.Topic, st.TopicID = rt.Topic, rt.TopicID
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.OffsetOutOfRange.Code
				st.Partitions = append(st.Partitions, sp)
				resp.Topics = append(resp.Topics, st)
				return resp, nil, true
			}
		}
		return nil, nil, false
	})
	return happened.Load
}

// Client returns a client of brokers (events.NewClient with opts), closed when the test ends.
func Client(tb testing.TB, brokers []string, opts ...kgo.Opt) *kgo.Client {
	tb.Helper()
	cl, err := events.NewClient(brokers, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

// Topics returns topic names of the test's own, created on brokers with 3 partitions.
func Topics(tb testing.TB, brokers []string) events.Topics {
	tb.Helper()
	t := events.NewTopics("t" + strings.ToLower(events.NewID()))
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		tb.Fatalf("kafka client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Replicated as production has them where there are brokers enough (kafka3).
	replication := int16(1)
	if len(brokers) >= 3 {
		replication = 3
	}
	if err := events.CreateTopics(ctx, kadm.NewClient(cl), t, 3, replication); err != nil {
		tb.Fatalf("create topics: %v", err)
	}
	// Gone with the test: a broker that keeps every test's topics holds thousands of
	// partitions after a few runs, and pays for them in CPU in every later test and bench.
	tb.Cleanup(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			return
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := events.DeleteTopics(ctx, kadm.NewClient(cl), t.All()...); err != nil {
			tb.Logf("delete the test's topics: %v", err)
		}
	})
	return t
}

// IsReal reports whether brokers are the real test broker's.
func IsReal(brokers []string) bool {
	return strings.Join(brokers, ",") == os.Getenv(BrokersEnv)
}

// GrowPartitions gives topic n partitions in all, as an operator growing it would.
func GrowPartitions(tb testing.TB, brokers []string, topic string, n int) {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		tb.Fatalf("kafka client: %v", err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).UpdatePartitions(context.Background(), n, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		tb.Fatalf("grow %s to %d partitions: %v", topic, n, err)
	}
}
