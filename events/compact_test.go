package events_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
)

// TestCheckTopicsSaysATopicIsCompacted: records are keyed by campaign and buyer, so a buyer's
// orders of one campaign share a key, and compaction keeps only the last record of a key. A
// requested topic created compacted (by hand, or under a broker's log.cleanup.policy=compact)
// drops a buyer's earlier order, answered 202, before a lagging consumer reads it, and a
// compacted results topic drops the payments a replay reads back. CheckTopics says so.
func TestCheckTopicsSaysATopicIsCompacted(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, brokers []string) {
		topics := kafkatest.Topics(t, brokers)
		adm := kadm.NewClient(kafkatest.Client(t, brokers))
		ctx := context.Background()
		resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: kadm.StringPtr("compact")}}, topics.Requested)
		if err == nil {
			_, err = resp.On(topics.Requested, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		// Kafka's brokers learn of a topic's new setting moments after it is made.
		var problems []string
		for deadline := time.Now().Add(10 * time.Second); len(problems) == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if problems, err = events.CheckTopics(ctx, adm, topics, 1); err != nil {
				t.Fatal(err)
			}
		}
		if len(problems) != 1 || !strings.Contains(problems[0], topics.Requested) || !strings.Contains(problems[0], "cleanup.policy=compact") {
			t.Errorf("CheckTopics with %s compacted: %q, want it named", topics.Requested, problems)
		}
	})
}
