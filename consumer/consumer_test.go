package consumer_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// confirmer records the batches the consumer confirms in Redis.
type confirmer struct {
	mu      sync.Mutex
	largest int
}

// ConfirmAll confirms every order.
func (c *confirmer) ConfirmAll(_ context.Context, ids []string) (map[string]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.largest = max(c.largest, len(ids))
	return nil, nil
}

// Reservations knows of no reservation: the orders go to the store as they come.
func (c *confirmer) Reservations(context.Context, []string) (map[string]lua.Reservation, error) {
	return nil, nil
}

// TestMaxRate checks the controlled pace: with --max-rate 200, 300 events already in Kafka take
// at least the half second the last 100 must wait for, no batch holds more than a second's
// worth, and every order is persisted once.
func TestMaxRate(t *testing.T) {
	const rate, n = 200, 300
	ctx := context.Background()
	st, campaign, brokers, topics := backlog(t, "pace", n)

	conf := &confirmer{}
	cons, err := consumer.New(consumer.Config{Brokers: brokers, Topics: topics, BatchSize: 500, MaxRate: rate}, st, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- cons.Run(runCtx) }()
	for {
		c, err := st.Campaign(ctx, campaign)
		if err != nil {
			t.Fatal(err)
		}
		if c.Sold == n {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("after 30s %d of %d orders persisted", c.Sold, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The first second's worth goes at once; the other 100 events wait 100/200 s for tokens.
	if min := time.Second * (n - rate) / rate; elapsed < min {
		t.Errorf("%d events at --max-rate %d persisted in %v, want at least %v", n, rate, elapsed, min)
	}
	if conf.largest > rate {
		t.Errorf("a batch of %d events, want at most a second's worth (%d)", conf.largest, rate)
	}
	orders, err := st.Confirmed(ctx, campaign)
	if err != nil {
		t.Fatal(err)
	}
	if len(orders) != n {
		t.Errorf("%d confirmed orders, want %d", len(orders), n)
	}
}

// backlog returns a store (SQLite) with a campaign of n units, one each per buyer, and kfake
// topics whose requested topic holds an OrderRequested event for each unit.
func backlog(t *testing.T, name string, n int) (*store.Store, string, []string, events.Topics) {
	t.Helper()
	ctx := context.Background()
	st := storetest.MustOpen(t, storetest.SQLiteURL(t))
	campaign := openCampaign(t, st, name, int64(n), 1, false)
	now := time.Now().Add(-time.Minute)
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers)
	cl := kafkatest.Client(t, brokers)
	for i := range n {
		rec, err := events.Record(topics.Requested, events.Event{Type: events.OrderRequested, Version: events.Version,
			EventID: events.NewID(), OccurredAt: now.UTC(), OrderID: events.NewOrderID(campaign), CampaignID: campaign,
			UserID: fmt.Sprintf("user-%d", i), Quantity: 1, Deadline: now.Add(time.Hour).UTC()})
		if err != nil {
			t.Fatal(err)
		}
		cl.Produce(ctx, rec, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return st, campaign, brokers, topics
}

// orderEvent is a new OrderRequested of qty units of campaign for user, due in an hour.
func orderEvent(campaign, user string, qty int) events.Event {
	now := time.Now().UTC()
	return events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: now,
		OrderID: events.NewOrderID(campaign), CampaignID: campaign, UserID: user, Quantity: qty, Deadline: now.Add(time.Hour)}
}

// runConsumer runs a consumer of cfg (logging nowhere unless cfg says) over st until the test
// ends, or until stop, which stops it, waits for it and leaves the group; it returns both.
func runConsumer(t *testing.T, cfg consumer.Config, st consumer.Persister) (cons *consumer.Consumer, stop func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cons, err := consumer.New(cfg, st, &confirmer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			cons.Close()
		})
	}
	t.Cleanup(stop)
	return cons, stop
}

// openCampaign stores a campaign of stock units, limit per buyer, on sale since a minute ago
// (onSale: put on sale in Redis too), and returns its id.
func openCampaign(t *testing.T, st *store.Store, prefix string, stock, limit int64, onSale bool) string {
	t.Helper()
	campaign := storetest.Name(prefix)
	start := time.Now().Add(-time.Minute).UnixMilli()
	if err := st.CreateCampaign(context.Background(), store.Campaign{ID: campaign, Name: prefix, Stock: stock, PerUserLimit: limit,
		StartsAtMs: start, CreatedAtMs: start, OnSale: onSale}); err != nil {
		t.Fatal(err)
	}
	return campaign
}

// waitCommitted waits up to 20 s until the consumer group has committed every record of the
// requested topic; stuck says what it means if it does not.
func waitCommitted(t *testing.T, adm *kadm.Client, topics events.Topics, stuck string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		lag, err := events.Lag(context.Background(), adm, topics.Requested, topics.ConsumerGroup())
		if err != nil {
			t.Fatal(err)
		}
		if lag == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s the consumer group still lags %d records: %s", lag, stuck)
		}
	}
}

// produceBehindPoison writes poison to the requested topic and then an order of campaign for
// each of users, all on one partition, as a producer other than seckill's could (one that takes
// records of up to 2 MB), and returns an admin client of the same brokers.
func produceBehindPoison(t *testing.T, brokers []string, topics events.Topics, poison []byte, campaign string, users ...string) *kadm.Client {
	t.Helper()
	other, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(2<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	recs := []*kgo.Record{{Topic: topics.Requested, Key: []byte("k"), Value: poison}}
	for _, user := range users {
		rec, err := events.Record(topics.Requested, orderEvent(campaign, user, 1))
		if err != nil {
			t.Fatal(err)
		}
		rec.Key = []byte("k")
		recs = append(recs, rec)
	}
	if err := other.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatalf("produce the poison record and the orders behind it: %v", err)
	}
	return kadm.NewClient(other)
}
