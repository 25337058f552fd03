package kafkatest_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
)

// TestTopicsGoWithTheTest: a test's topics are deleted when it ends. The test broker kept every
// test's, thousands of partitions after a few runs, which it paid for in CPU in every later test
// and bench.
func TestTopicsGoWithTheTest(t *testing.T) {
	brokers := kafkatest.Fake(t)
	var topics events.Topics
	t.Run("a test", func(t *testing.T) { topics = kafkatest.Topics(t, brokers) })
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	left, err := kadm.NewClient(cl).ListTopics(context.Background(), topics.All()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, td := range left {
		if td.Err == nil {
			t.Errorf("topic %s outlived its test", td.Topic)
		}
	}
}
