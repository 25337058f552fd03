package consumer

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seckill/seckill/events/kafkatest"
)

// TestPaceAsksAgainForAFailedPartitionCount: Kafka answers an assignment's question for the
// topic's partition count with a transient error (a leader election during a broker's
// restart). On its first assignment a member has no count to fall back on but the partitions
// it owns: with 0 and 1 of 4 it paced at the whole group's rate, twice its share, until the
// next rebalance. It asks again within the question's bound.
func TestPaceAsksAgainForAFailedPartitionCount(t *testing.T) {
	const rate = 1200
	cluster := kafkatest.FakeCluster(t)
	brokers := cluster.ListenAddrs()
	topics := kafkatest.Topics(t, brokers)
	kafkatest.GrowPartitions(t, brokers, topics.Requested, 4)
	cl := kafkatest.Client(t, brokers)
	var failed atomic.Bool // set on kfake's goroutine
	cluster.ControlKey(int16(kmsg.Metadata), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		mr := req.(*kmsg.MetadataRequest)
		if len(mr.Topics) != 1 || mr.Topics[0].Topic == nil || *mr.Topics[0].Topic != topics.Requested || !failed.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		resp := mr.ResponseKind().(*kmsg.MetadataResponse)
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic, rt.ErrorCode = kmsg.StringPtr(topics.Requested), kerr.LeaderNotAvailable.Code
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	p := newPace(Config{Topics: topics, BatchSize: 500, MaxRate: rate, Logger: slog.New(slog.DiscardHandler)})

	p.assigned(context.Background(), cl, map[string][]int32{topics.Requested: {0, 1}})
	if !failed.Load() {
		t.Fatal("the partition count was never refused: the test steers nothing")
	}
	if got, want := float64(p.lim.Limit()), float64(rate*2/4); got != want {
		t.Errorf("owning 2 of 4 partitions after a refused count: pace %v, want %v", got, want)
	}
}
