package bench

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
)

// A load must not start while the consumer still persists the warm-up's orders: caughtUp waits
// for the group to commit everything produced, and no longer.
func TestCaughtUpWaitsForTheConsumer(t *testing.T) {
	ctx := context.Background()
	brokers := kafkatest.Fake(t)
	cl := kafkatest.Client(t, brokers)
	adm := kadm.NewClient(cl)
	p := &pipeline{r: &runner{env: &Env{Admin: adm}}, prefix: "caught-up"}
	topics := events.NewTopics(p.prefix)
	if err := events.CreateTopics(ctx, adm, topics, 3, 1); err != nil {
		t.Fatal(err)
	}
	if err := p.caughtUp(ctx); err != nil {
		t.Fatalf("an empty topic: %v", err)
	}
	const n = 5
	for range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.Requested, Value: []byte("order")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := p.caughtUp(short); err == nil {
		t.Fatal("caught up with five orders unread")
	}

	group, err := events.NewGroupClient(brokers, topics.ConsumerGroup(), topics.Requested, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Polls block rebalances (as the consumer's do), and leaving the group is one: a plain
	// Close after a poll, on a failure's way out, waited for it for good.
	defer group.CloseAllowingRebalance()
	// Bounded: a group that never got the records polled on with no end.
	pollCtx, stopPolling := context.WithTimeout(ctx, time.Minute)
	defer stopPolling()
	read := 0
	for read < n {
		fs := group.PollFetches(pollCtx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("%d of %d orders read: %v", read, n, err)
		}
		read += fs.NumRecords()
		if err := group.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.caughtUp(ctx); err != nil {
		t.Fatalf("after the group committed every order: %v", err)
	}
}

// Run takes the scenarios in AllScenarios order from a table of its own: every name a user may
// give (Config.Validate accepts AllScenarios) must have a way to run, and nothing else.
func TestEveryScenarioHasAStep(t *testing.T) {
	steps := (&runner{}).steps()
	for _, name := range AllScenarios {
		if steps[name] == nil {
			t.Errorf("no step runs %s", name)
		}
	}
	if len(steps) != len(AllScenarios) {
		t.Errorf("%d steps for %d scenarios", len(steps), len(AllScenarios))
	}
}
