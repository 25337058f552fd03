package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// TestConsoleP99OfPurchasesPastTheTopBucket: while Kafka hangs, purchases wait out the produce
// timeout (3 s), past the histogram's top bucket (about 1.9 s). The console's p99 must say the
// top bucket, not 0 ("no purchase") nor a fast bucket, in the very incident an operator watches
// it for.
func TestConsoleP99OfPurchasesPastTheTopBucket(t *testing.T) {
	top := purchaseBuckets[len(purchaseBuckets)-1] * 1000
	for _, tc := range []struct {
		name       string
		fast, slow int
	}{
		{"all slow", 0, 100},
		{"5% slow", 95, 5},
	} {
		before := latencyBuckets()
		for range tc.fast {
			purchaseSeconds.Observe(0.001)
		}
		for range tc.slow {
			purchaseSeconds.Observe(3)
		}
		if got := p99Ms(before, latencyBuckets()); got != top {
			t.Errorf("%s: p99 = %v ms, want the top bucket, %v ms", tc.name, got, top)
		}
	}
}

// noCampaigns is a store without campaigns: all a snapshot asks of it.
type noCampaigns struct{ Store }

func (noCampaigns) NewestCampaigns(context.Context, int) ([]store.Campaign, error) { return nil, nil }
func (noCampaigns) UnitsByStatus(context.Context, []string) ([]store.Units, error) { return nil, nil }
func (noCampaigns) AuditVerdicts(context.Context) (map[string]store.AuditVerdict, error) {
	return nil, nil
}

// TestConsoleFirstSnapshotRatesNoInstant: the first snapshot of a loop follows its sources'
// start by microseconds. A purchase in them made a rate of hundreds of thousands a second, a
// spike that the page's chart scales to for the five minutes it keeps.
func TestConsoleFirstSnapshotRatesNoInstant(t *testing.T) {
	s := New(Config{InsecureUserHeader: true, Logger: slog.New(slog.DiscardHandler)}, noCampaigns{}, nil, nil)
	defer s.Close()
	src := s.newConsoleSources()
	defer src.close()
	reservations.WithLabelValues("reserved").Inc() // a purchase as the console opens
	if r := src.snapshot(context.Background()).Purchases["accepted"]; r > 1 {
		t.Errorf("the first snapshot says %v purchases a second, of one purchase", r)
	}
}

// TestConsolePersistedRateAfterAKafkaMiss: a snapshot whose Kafka read failed (a broker slow
// past sourceTimeout) kept the committed offsets of the snapshot before it, and the next
// snapshot divided the orders committed over both seconds by one: the console showed the
// consumers persisting twice as fast as they were, after every miss.
func TestConsolePersistedRateAfterAKafkaMiss(t *testing.T) {
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers)
	ctx := context.Background()
	cl := kafkatest.Client(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	const orders = 100
	for range orders {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics.Requested, Partition: 0, Value: []byte("{}")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(cl)
	commit := func(at int64) {
		t.Helper()
		var os kadm.Offsets
		os.Add(kadm.Offset{Topic: topics.Requested, Partition: 0, At: at, LeaderEpoch: -1})
		if err := adm.CommitAllOffsets(ctx, topics.ConsumerGroup(), os); err != nil {
			t.Fatal(err)
		}
	}
	commit(0)

	s := New(Config{InsecureUserHeader: true, Brokers: brokers, Topics: topics, Logger: slog.New(slog.DiscardHandler)}, noCampaigns{}, nil, nil)
	defer s.Close()
	src := s.newConsoleSources()
	defer src.close()
	first := src.snapshot(ctx)
	if first.ConsumerLag != orders {
		t.Fatalf("first snapshot: lag %d, want %d (errors %v)", first.ConsumerLag, orders, first.Errors)
	}
	// The snapshots half a second apart, by the clock the rate is measured with: the bug's
	// rate, over the last interval alone, is then twice the true one.
	time.Sleep(500 * time.Millisecond)
	missed, cancel := context.WithCancel(ctx)
	cancel() // Kafka does not answer this one in time
	if snap := src.snapshot(missed); snap.ConsumerLag != -1 {
		t.Fatalf("a snapshot whose Kafka read failed shows a lag of %d", snap.ConsumerLag)
	}
	commit(orders) // the consumers persisted every order over the two seconds
	time.Sleep(500 * time.Millisecond)
	last := src.snapshot(ctx)
	want := orders / last.At.Sub(first.At).Seconds()
	if got := last.PersistedPerSec; got < want*0.8 || got > want*1.25 {
		t.Errorf("%d orders persisted in %v: the console says %.0f/s, want about %.0f/s", orders, last.At.Sub(first.At).Round(time.Millisecond), got, want)
	}
}

// unaudited is a store of one campaign whose audit verdicts cannot be read, and saleOf a Redis
// that tells any campaign's sale.
type unaudited struct{ noCampaigns }

func (unaudited) NewestCampaigns(context.Context, int) ([]store.Campaign, error) {
	return []store.Campaign{{ID: "c1", Name: "one", Stock: 10, PerUserLimit: 1}}, nil
}
func (unaudited) AuditVerdicts(context.Context) (map[string]store.AuditVerdict, error) {
	return nil, errors.New("relation audit_verdicts: canceling statement due to statement timeout")
}

type saleOf struct{ Redis }

func (saleOf) Sale(context.Context, string) (lua.Sale, error) {
	return lua.Sale{Loaded: true, Remaining: 10}, nil
}

// TestConsoleRowsWithoutTheAudit: the audit's verdicts are a column of the campaigns' rows. A
// read of them that failed (the store slow past the snapshot's time) took every row off the
// page, and the rows' buttons with them, in the incident an operator opens the console for.
func TestConsoleRowsWithoutTheAudit(t *testing.T) {
	s := New(Config{InsecureUserHeader: true, Logger: slog.New(slog.DiscardHandler)}, unaudited{}, saleOf{}, nil)
	defer s.Close()
	src := s.newConsoleSources()
	defer src.close()
	snap := src.snapshot(context.Background())
	if len(snap.Campaigns) != 1 || snap.Campaigns[0].ID != "c1" || snap.Campaigns[0].Audit != nil {
		t.Errorf("campaigns %+v, want c1's row without an audit", snap.Campaigns)
	}
	if len(snap.Errors) != 1 || !strings.Contains(snap.Errors[0], "audit") {
		t.Errorf("errors %q, want the audit's named", snap.Errors)
	}
}

// TestConsoleCountsPoisonAsOneReason: a poison letter's reason goes on to say why, naming its
// event, so each one's is its own. The console counted dead letters by their whole reason: a
// row a letter, in a table and a snapshot every second that grew with each poison event
// anyone could write to the requested topic. It counts them as dlq stats does.
func TestConsoleCountsPoisonAsOneReason(t *testing.T) {
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers)
	cl := kafkatest.Client(t, brokers)
	for _, reason := range []string{events.ReasonPoison + `: event "e1": quantity 0`, events.ReasonPoison + `: event "e2": bad time`, events.ReasonStoreSoldOut} {
		src := &kgo.Record{Topic: topics.Requested, Value: []byte("{}")}
		if err := cl.ProduceSync(context.Background(), events.DeadLetter(topics.DLQ, src, reason)).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	s := New(Config{InsecureUserHeader: true, Brokers: brokers, Topics: topics, Logger: slog.New(slog.DiscardHandler)}, noCampaigns{}, nil, nil)
	defer s.Close()
	src := s.newConsoleSources()
	defer src.close()
	var dead map[string]int64
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if dead = src.snapshot(context.Background()).DeadLetters; sum(dead) == 3 {
			break
		}
	}
	want := map[string]int64{events.ReasonPoison: 2, events.ReasonStoreSoldOut: 1}
	if !maps.Equal(dead, want) {
		t.Errorf("dead letters of two poison events and one store_sold_out: %v, want %v", dead, want)
	}
}

func sum(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

// halfRefunded is a store of one campaign of stock 10 whose orders Units lists, and heldBy a
// Redis that holds all but remaining of its units.
type halfRefunded struct{ noCampaigns }

func (halfRefunded) NewestCampaigns(context.Context, int) ([]store.Campaign, error) {
	return []store.Campaign{{ID: "c1", Name: "one", Stock: 10, Sold: 3, PerUserLimit: 5}}, nil
}

func (halfRefunded) UnitsByStatus(context.Context, []string) ([]store.Units, error) {
	return []store.Units{
		{Campaign: "c1", Status: events.Paid, Units: 3, Orders: 3},
		{Campaign: "c1", Status: events.Refunded, Reason: events.ReasonOperator, Units: 2, Orders: 2},
		{Campaign: "c1", Status: events.Refunded, Reason: "", Units: 1, Orders: 1},
		{Campaign: "c1", Status: events.Expired, Reason: events.ReasonUnpaid, Units: 1, Orders: 1},
		{Campaign: "c1", Status: events.Expired, Reason: "", Units: 2, Orders: 1},
	}, nil
}

func (halfRefunded) GivingBack(context.Context, []string) ([]store.Order, error) {
	return []store.Order{
		{OrderID: "r1", CampaignID: "c1", Quantity: 1, Status: events.Refunded},
		{OrderID: "e1", CampaignID: "c1", Quantity: 2, Status: events.Expired},
	}, nil
}

type heldBy struct {
	Redis
	remaining int64
}

// Reservations holds every order's units: confirmed.
func (heldBy) Reservations(_ context.Context, ids []string) (map[string]lua.Reservation, error) {
	out := map[string]lua.Reservation{}
	for _, id := range ids {
		out[id] = lua.Reservation{OrderID: id, State: lua.StateConfirmed}
	}
	return out, nil
}

func (r heldBy) Sale(context.Context, string) (lua.Sale, error) {
	return lua.Sale{Loaded: true, Remaining: r.remaining}, nil
}

// TestConsoleGivingBackIsNotGivenBack: a refund or an expiry is stored with reason "" and its
// units are back in Redis only once its Redis half has run (the compensator's, or the sweeper's
// after a stop between the two). The console counted it given back from the store's commit,
// and its units, which Redis still held, as a pending reservation's. It counts it as being
// given back until its units are back.
func TestConsoleGivingBackIsNotGivenBack(t *testing.T) {
	// Redis holds 3 paid units, the 3 of the refund and the expiry not back yet, and 1
	// pending reservation: 10 - 7 remain.
	s := New(Config{InsecureUserHeader: true, Logger: slog.New(slog.DiscardHandler)}, halfRefunded{}, heldBy{remaining: 3}, nil)
	defer s.Close()
	src := s.newConsoleSources()
	defer src.close()
	snap := src.snapshot(context.Background())
	if want := map[string]int64{"operator refund": 2, "payment window": 1}; !maps.Equal(snap.Compensations, want) {
		t.Errorf("given back: %v, want %v", snap.Compensations, want)
	}
	if want := map[string]int64{"operator refund": 1, "payment window": 1}; !maps.Equal(snap.GivingBack, want) {
		t.Errorf("being given back: %v, want %v", snap.GivingBack, want)
	}
	if len(snap.Campaigns) != 1 || snap.Campaigns[0].Pending != 1 {
		t.Errorf("campaigns %+v, want c1 with 1 unit pending", snap.Campaigns)
	}
}

// announcing is a store of one campaign of stock 10, 3 units paid, whose refund of 1 unit and
// expiry of 2 are stored with reason "": the refund's units still held in Redis, the expiry's
// given back there already, its announcement not yet taken by Kafka (MarkUnpaid runs after it).
type announcing struct{ noCampaigns }

func (announcing) NewestCampaigns(context.Context, int) ([]store.Campaign, error) {
	return []store.Campaign{{ID: "c1", Name: "one", Stock: 10, Sold: 3, PerUserLimit: 5}}, nil
}

func (announcing) UnitsByStatus(context.Context, []string) ([]store.Units, error) {
	return []store.Units{
		{Campaign: "c1", Status: events.Paid, Units: 3, Orders: 3},
		{Campaign: "c1", Status: events.Refunded, Reason: "", Units: 1, Orders: 1},
		{Campaign: "c1", Status: events.Expired, Reason: "", Units: 2, Orders: 1},
	}, nil
}

func (announcing) GivingBack(context.Context, []string) ([]store.Order, error) {
	return []store.Order{
		{OrderID: "r1", CampaignID: "c1", Quantity: 1, Status: events.Refunded},
		{OrderID: "e1", CampaignID: "c1", Quantity: 2, Status: events.Expired},
	}, nil
}

// recorded is a Redis that holds all but remaining of a campaign's units, and the reservation
// records states (order id -> state).
type recorded struct {
	heldBy
	states map[string]string
}

func (r recorded) Reservations(_ context.Context, ids []string) (map[string]lua.Reservation, error) {
	out := map[string]lua.Reservation{}
	for _, id := range ids {
		if st, ok := r.states[id]; ok {
			out[id] = lua.Reservation{OrderID: id, State: st}
		}
	}
	return out, nil
}

// TestConsolePendingOfAnExpiryRedisGaveBack: an expiry's (or a refund's) reason stays "" until
// Kafka has its announcement, after Redis gave its units back: during a Kafka outage, or after a
// rebuild of Redis from the store, which restores such an order's units to the sale. The console
// took every such order's units as held by Redis, and took them off the pending reservations'
// units, so a campaign's pending reservations were hidden (shown 0) for as long as Kafka was down.
func TestConsolePendingOfAnExpiryRedisGaveBack(t *testing.T) {
	// Redis holds the 3 paid units, the refund's 1 and 1 pending reservation: 10 - 5 remain.
	r := recorded{heldBy: heldBy{remaining: 5}, states: map[string]string{"r1": lua.StateConfirmed, "e1": lua.StateExpired}}
	s := New(Config{InsecureUserHeader: true, Logger: slog.New(slog.DiscardHandler)}, announcing{}, r, nil)
	defer s.Close()
	src := s.newConsoleSources()
	defer src.close()
	snap := src.snapshot(context.Background())
	if len(snap.Campaigns) != 1 || snap.Campaigns[0].Pending != 1 {
		t.Errorf("campaigns %+v, want c1 with 1 unit pending", snap.Campaigns)
	}
	if want := map[string]int64{"operator refund": 1, "payment window": 1}; !maps.Equal(snap.GivingBack, want) {
		t.Errorf("being given back: %v, want %v", snap.GivingBack, want)
	}
}

// firstDeadLetterSnapshot puts the dead letters letter(i) makes, n of them, on a new topic
// and returns a new console's first snapshot of them.
func firstDeadLetterSnapshot(t *testing.T, n int, letter func(dlq string, i int) *kgo.Record) ConsoleSnapshot {
	t.Helper()
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = letter(topics.DLQ, i)
	}
	if err := kafkatest.Client(t, brokers).ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	s := New(Config{InsecureUserHeader: true, Brokers: brokers, Topics: topics, Logger: slog.New(slog.DiscardHandler)}, noCampaigns{}, nil, nil)
	defer s.Close()
	src := s.newConsoleSources()
	defer src.close()
	return src.snapshot(context.Background())
}

// TestConsoleCountsEveryDeadLetterAtOnce: a snapshot counts every dead letter the topic held
// when it was taken. Each snapshot polled once, 100 ms at most: a console opened on a topic of
// more than one fetch showed a fraction of its dead letters, then more each second, as if they
// were arriving now.
func TestConsoleCountsEveryDeadLetterAtOnce(t *testing.T) {
	const letters = 3000
	value := []byte(strings.Repeat("x", 1000)) // 3 MB: a few fetches' worth
	snap := firstDeadLetterSnapshot(t, letters, func(dlq string, _ int) *kgo.Record {
		return events.DeadLetter(dlq, &kgo.Record{Topic: "requested", Value: value}, events.ReasonStoreSoldOut)
	})
	if n := sum(snap.DeadLetters); n != letters {
		t.Errorf("the first snapshot counts %d dead letters of the topic's %d (errors %q)", n, letters, snap.Errors)
	}
}

// TestConsoleBoundsTheDeadLetterKinds: the console counts dead letters by their reason's kind,
// a row each in every snapshot. Anyone who may write to the topic can give each letter a
// reason of its own (seckill's own are a few dozen kinds), and the rows, the api's map of them
// and every snapshot grew with each. Past maxDeadKinds kinds, the rest are counted as "other",
// every letter still counted.
func TestConsoleBoundsTheDeadLetterKinds(t *testing.T) {
	letters := maxDeadKinds + 50
	snap := firstDeadLetterSnapshot(t, letters, func(dlq string, i int) *kgo.Record {
		reason := fmt.Sprintf("made-up-%d", i)
		if i == 0 {
			reason = strings.Repeat("long", 1000) // longer than any reason seckill writes (DeadLetter clips at 1 KB)
		}
		r := events.DeadLetter(dlq, &kgo.Record{Topic: "requested", Value: []byte("x")}, "")
		r.Headers[0].Value = []byte(reason)
		return r
	})
	for kind := range snap.DeadLetters {
		if len(kind) > maxDeadKind {
			t.Errorf("a kind of %d bytes, want at most %d", len(kind), maxDeadKind)
		}
	}
	if n := sum(snap.DeadLetters); n != int64(letters) || len(snap.DeadLetters) > maxDeadKinds+1 || snap.DeadLetters[deadOther] == 0 {
		t.Errorf("%d dead letters of %d made-up reasons: %d counted in %d kinds, %d as %q; want every one counted, in at most %d kinds",
			letters, letters, n, len(snap.DeadLetters), snap.DeadLetters[deadOther], deadOther, maxDeadKinds+1)
	}
}
