package bench_test

import (
	"context"
	"os"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/bench"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua/luatest"
	"github.com/seckill/seckill/store/storetest"
)

// TestEnvCloseDeletesTopicsOfAPrefixNamedTwice: the flash crowd names its prefix twice (its
// pipeline, then its audit), and Kafka refuses a DeleteTopics that names a topic twice for
// that topic: the run's flash-crowd topics stayed, a dozen partitions per round, until the test
// broker held thousands, which it paid for in CPU in every later bench. Close deletes each topic
// once and reports the topics Kafka did not delete.
func TestEnvCloseDeletesTopicsOfAPrefixNamedTwice(t *testing.T) {
	luatest.MustRedis(t)
	brokers := kafkatest.Real(t)
	ctx := context.Background()
	env, err := bench.NewEnv(ctx, os.Getenv(luatest.RedisEnv), storetest.PostgresURL(t), brokers)
	if err != nil {
		t.Fatal(err)
	}
	prefix := env.Prefix("twice")
	if again := env.Prefix("twice"); again != prefix {
		t.Fatalf("Prefix named the same scenario %q, then %q", prefix, again)
	}
	if err := env.CreateTopics(ctx, prefix, 1); err != nil {
		t.Fatal(err)
	}
	if err := env.Close(ctx, false); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	left, err := kadm.NewClient(cl).ListTopics(ctx, events.NewTopics(prefix).All()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, td := range left {
		if td.Err == nil {
			t.Errorf("topic %s is still there after Close", td.Topic)
		}
	}
}
