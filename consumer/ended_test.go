package consumer_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// idsConfirmer records the orders the consumer confirms in Redis.
type idsConfirmer struct {
	mu  sync.Mutex
	ids []string
}

// ConfirmAll confirms every order.
func (c *idsConfirmer) ConfirmAll(_ context.Context, ids []string) (map[string]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = append(c.ids, ids...)
	return nil, nil
}

// Reservations knows of no reservation: the orders go to the store as they come.
func (c *idsConfirmer) Reservations(context.Context, []string) (map[string]lua.Reservation, error) {
	return nil, nil
}

// TestEndedOrderIsNotConfirmedInRedis: the event of an order the store ended first (the api
// failed it when its produce timed out though the record reached Kafka, or the sweeper failed it
// at its deadline) reaches the consumer while its reservation may still be pending in Redis: the
// release is the resolver's second step, which may fail and be left to the sweeper. The consumer
// confirms in Redis only what the store confirmed: a failed order's reservation confirmed there
// holds its units for good, as neither the release nor the sweeper moves a confirmed one.
func TestEndedOrderIsNotConfirmedInRedis(t *testing.T) {
	ctx := context.Background()
	st := storetest.MustOpen(t, storetest.SQLiteURL(t))
	campaign := openCampaign(t, st, "ended", 10, 1, true)
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers)
	now := time.Now().UTC()
	ev := func(user string) events.Event {
		return events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: now,
			OrderID: events.NewOrderID(campaign), CampaignID: campaign, UserID: user, Quantity: 1, Deadline: now.Add(time.Hour)}
	}
	failed, bought := ev("ann"), ev("bob")
	if o, err := st.FailOrderFenced(ctx, failed, events.ReasonProduce, store.Fence{}); err != nil || o.Status != events.Failed {
		t.Fatalf("fail ann's order in the store: %+v %v", o, err)
	}
	cl := kafkatest.Client(t, brokers)
	for _, e := range []events.Event{failed, bought} {
		rec, err := events.Record(topics.Requested, e)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	conf := &idsConfirmer{}
	cons, err := consumer.New(consumer.Config{Brokers: brokers, Topics: topics}, st, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cons.Run(runCtx) }()
	waitCommitted(t, kadm.NewClient(cl), topics, "the two events were not persisted")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	conf.mu.Lock()
	defer conf.mu.Unlock()
	if !slices.Equal(conf.ids, []string{bought.OrderID}) {
		t.Errorf("confirmed in redis %v, want bob's order %s alone (ann's %s is failed in the store)", conf.ids, bought.OrderID, failed.OrderID)
	}
}
