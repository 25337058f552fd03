package consumer_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
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

// storedLog is a Persister that notes the orders the store holds once ConfirmOrders returns.
type storedLog struct {
	consumer.Persister
	mu     sync.Mutex
	stored map[string]bool
}

func (s *storedLog) ConfirmOrders(ctx context.Context, evs []events.Event) ([]store.Result, error) {
	res, err := s.Persister.ConfirmOrders(ctx, evs)
	if err == nil {
		s.mu.Lock()
		for i, r := range res {
			if r.Reason == "" {
				s.stored[evs[i].OrderID] = true
			}
		}
		s.mu.Unlock()
	}
	return res, err
}

func (s *storedLog) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stored[id]
}

// slowConfirmer confirms every order after a random pause, which widens the window in which a
// batch is being finished while the group rebalances.
type slowConfirmer struct{}

func (slowConfirmer) ConfirmAll(ctx context.Context, ids []string) (map[string]string, error) {
	select {
	case <-time.After(time.Duration(rand.IntN(40)) * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return nil, nil
}

func (slowConfirmer) Reservations(context.Context, []string) (map[string]lua.Reservation, error) {
	return nil, nil
}

// TestGroupChurnLosesNoOrder: members of one group come and go (each stopped as SIGTERM stops
// it) while orders arrive. At no time is an offset committed past an order the store does not
// hold, every order ends confirmed once, and every one is announced.
func TestGroupChurnLosesNoOrder(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, brokers []string) { groupChurn(t, brokers) })
}

func groupChurn(t *testing.T, brokers []string) {
	const n, partitions = 1500, 6
	ctx := context.Background()
	st := storetest.MustOpen(t, storetest.PostgresURL(t))
	campaign := openCampaign(t, st, "churn", n, 1, false)
	every, churn := 200, 4*time.Second
	if kafkatest.IsReal(brokers) {
		every, churn = 1000, 10*time.Second
	}
	topics := kafkatest.Topics(t, brokers)
	kafkatest.GrowPartitions(t, brokers, topics.Requested, partitions)
	cl := kafkatest.Client(t, brokers)
	adm := kadm.NewClient(cl)
	log := &storedLog{Persister: st, stored: map[string]bool{}}

	var (
		placeMu sync.Mutex
		placed  = map[int32]map[int64]string{} // partition -> offset -> order id
	)
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := range n {
			rec, err := events.Record(topics.Requested, orderEvent(campaign, fmt.Sprintf("user-%d", i), 1))
			if err != nil {
				t.Error(err)
				return
			}
			id := ""
			if e, err := events.Decode(rec.Value); err == nil {
				id = e.OrderID
			}
			r, err := cl.ProduceSync(ctx, rec).First()
			if err != nil {
				t.Error(err)
				return
			}
			placeMu.Lock()
			if placed[r.Partition] == nil {
				placed[r.Partition] = map[int64]string{}
			}
			placed[r.Partition][r.Offset] = id
			placeMu.Unlock()
			if i%50 == 0 {
				time.Sleep(churn / (n / 50) / 2)
			}
		}
	}()

	// The watch: every committed offset covers only orders the store holds.
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() {
		for {
			select {
			case <-watchCtx.Done():
				watched <- nil
				return
			case <-time.After(5 * time.Millisecond):
			}
			offs, err := adm.FetchOffsets(watchCtx, topics.ConsumerGroup())
			if err != nil {
				continue
			}
			var bad error
			offs.Each(func(o kadm.OffsetResponse) {
				if o.Topic != topics.Requested || bad != nil {
					return
				}
				placeMu.Lock()
				defer placeMu.Unlock()
				for off := int64(0); off < o.At; off++ {
					id, ok := placed[o.Partition][off]
					if ok && !log.has(id) {
						bad = fmt.Errorf("partition %d committed at %d, past offset %d whose order %s the store does not hold", o.Partition, o.At, off, id)
						return
					}
				}
			})
			if bad != nil {
				watched <- bad
				return
			}
		}
	}()

	cfg := consumer.Config{Brokers: brokers, Topics: topics, BatchSize: 50, Logger: slog.New(slog.DiscardHandler)}
	start := func() func() {
		cons, err := consumer.New(cfg, log, slowConfirmer{})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- cons.Run(runCtx) }()
		return sync.OnceFunc(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			cons.Close()
		})
	}
	members := []func(){start(), start(), start()}
	defer func() {
		for _, stop := range members {
			stop()
		}
	}()
	churnUntil := time.Now().Add(churn)
	for time.Now().Before(churnUntil) {
		time.Sleep(time.Duration(every+rand.IntN(every)) * time.Millisecond)
		i := rand.IntN(len(members))
		members[i]()
		members[i] = start()
	}
	<-produced
	waitCommitted(t, adm, topics, "orders left behind by the churn")
	stopWatch()
	if err := <-watched; err != nil {
		t.Fatal(err)
	}
	c, err := st.Campaign(ctx, campaign)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sold != n {
		t.Errorf("sold %d, want %d", c.Sold, n)
	}

	// Every order is announced at least once.
	ends, err := events.EndOffsets(ctx, adm, topics.Results)
	if err != nil {
		t.Fatal(err)
	}
	rd := kafkatest.Client(t, brokers, kgo.ConsumeTopics(topics.Results), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	announced := map[string]bool{}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	readCtx, cancelRead := context.WithTimeout(ctx, 20*time.Second)
	defer cancelRead()
	for len(left) > 0 && readCtx.Err() == nil {
		rd.PollFetches(readCtx).EachRecord(func(r *kgo.Record) {
			if e, err := events.Decode(r.Value); err == nil && e.Type == events.OrderConfirmed {
				announced[e.OrderID] = true
			}
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
		})
	}
	if len(announced) != n {
		t.Errorf("%d orders announced confirmed, want %d", len(announced), n)
	}
}
