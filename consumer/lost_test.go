package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store/storetest"
)

type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}

// gatedConfirmer holds its first ConfirmAll until release is closed.
type gatedConfirmer struct {
	once             sync.Once
	holding, release chan struct{}
}

func (g *gatedConfirmer) ConfirmAll(ctx context.Context, ids []string) (map[string]string, error) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.holding)
		<-g.release
	}
	return nil, nil
}

func (g *gatedConfirmer) Reservations(context.Context, []string) (map[string]lua.Reservation, error) {
	return nil, nil
}

// TestLostMemberCommitsNothingStale: member A's session is lost (its heartbeats do not reach
// the coordinator) while it finishes a batch; B takes the partitions, persists the backlog and
// more, and commits. A's late commit of its batch must not move the group's offsets back, and
// no order is lost.
func TestLostMemberCommitsNothingStale(t *testing.T) {
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	st := storetest.MustOpen(t, storetest.PostgresURL(t))
	campaign := openCampaign(t, st, "lost", 100, 1, false)
	topics := kafkatest.Topics(t, brokers)
	cl := kafkatest.Client(t, brokers)
	adm := kadm.NewClient(cl)
	produce := func(from, n int) {
		for i := from; i < from+n; i++ {
			rec, err := events.Record(topics.Requested, orderEvent(campaign, fmt.Sprintf("user-%d", i), 1))
			if err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(0, 30)

	var dropping atomic.Bool
	var aID atomic.Value
	aID.Store("")
	cluster.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if dropping.Load() && req.(*kmsg.HeartbeatRequest).MemberID == aID.Load().(string) {
			return nil, errors.New("heartbeat dropped"), true
		}
		return nil, nil, false
	})

	cfg := consumer.Config{Brokers: brokers, Topics: topics, BatchSize: 10, SessionTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)}
	gate := &gatedConfirmer{holding: make(chan struct{}), release: make(chan struct{})}
	release := sync.OnceFunc(func() { close(gate.release) })
	t.Cleanup(release)
	var aLog syncBuffer
	aCfg := cfg
	aCfg.Logger = slog.New(slog.NewTextHandler(&aLog, nil))
	a, err := consumer.New(aCfg, st, gate)
	if err != nil {
		t.Fatal(err)
	}
	aCtx, stopA := context.WithCancel(ctx)
	aDone := make(chan error, 1)
	go func() { aDone <- a.Run(aCtx) }()
	defer func() { stopA(); <-aDone; a.Close() }()
	select {
	case <-gate.holding:
	case <-time.After(30 * time.Second):
		t.Fatal("A did not reach its first confirm in 30s")
	}
	groups, err := adm.DescribeGroups(ctx, topics.ConsumerGroup())
	if err != nil {
		t.Fatal(err)
	}
	members := groups[topics.ConsumerGroup()].Members
	if len(members) != 1 {
		t.Fatalf("group members %+v, want A alone", members)
	}
	aID.Store(members[0].MemberID)
	dropping.Store(true)

	_, stopB := runConsumer(t, cfg, st)
	defer stopB()
	waitCommitted(t, adm, topics, "B did not take over A's partitions")
	produce(30, 10)
	waitCommitted(t, adm, topics, "B did not persist the orders after the takeover")
	ends, err := events.EndOffsets(ctx, adm, topics.Requested)
	if err != nil {
		t.Fatal(err)
	}

	dropping.Store(false)
	release()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		offs, err := adm.FetchOffsets(ctx, topics.ConsumerGroup())
		if err != nil {
			continue
		}
		ends.Each(func(e kadm.ListedOffset) {
			if o, ok := offs.Lookup(e.Topic, e.Partition); ok && o.At < e.Offset {
				t.Fatalf("partition %d committed back at %d after the group had committed %d", e.Partition, o.At, e.Offset)
			}
		})
	}
	// The scenario happened: A's commits after the loss were refused, not skipped.
	if !strings.Contains(aLog.String(), "offset commit failed") {
		t.Errorf("A's log has no refused commit:\n%s", aLog.String())
	}
	c, err := st.Campaign(ctx, campaign)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sold != 40 {
		t.Errorf("sold %d, want 40", c.Sold)
	}
}
