package consumer_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestConsumerKeepsAGivenBackOrderEnded: the live consumer meets again an order the store lost
// and Redis has given back, as the replay does (recordGivenBack): the store is restored from a
// backup taken before Ann bought the campaign's one unit, and the group's offsets are reset (a
// new group reads from the start). Meanwhile Ann's order ended and its unit went back to Redis
// (released by the sweeper while pending, refunded by an operator, expired unpaid), and Bob
// bought it and was confirmed. The consumer stores Ann's order as Redis ended it and Bob's
// confirmed with the unit. Before, it stored Ann's order confirmed, counting the unit Redis had
// sold to Bob, and refused Bob's as store_sold_out, though confirmed in Redis. On both databases.
func TestConsumerKeepsAGivenBackOrderEnded(t *testing.T) {
	storetest.Each(t, func(t *testing.T, st *store.Store) {
		for _, tc := range []struct {
			name      string
			giveBack  func(s *replaySale, e events.Event)
			as        events.Status
			asBecause string
		}{
			{"released", func(s *replaySale, e events.Event) {
				if o, err := s.res.Fail(s.ctx, e, events.ReasonExpired, "sweeper"); err != nil || o.Status != events.Failed {
					s.t.Fatalf("the sweeper fails %s's order: %+v %v", e.UserID, o, err)
				}
			}, events.Failed, events.ReasonReleasedBeforeReplay},
			{"refunded", func(s *replaySale, e events.Event) {
				s.confirm(e)
				s.refund(e)
			}, events.Refunded, events.ReasonOperator},
			{"expired", func(s *replaySale, e events.Event) {
				s.confirm(e)
				s.unpaid(e)
				s.expire(e)
			}, events.Expired, events.ReasonUnpaid},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := newReplaySale(t, st, 1)
				restore := s.backup()
				ann := s.buy("ann")
				tc.giveBack(s, ann)
				bob := s.buy("bob")
				s.confirm(bob)
				restore()

				s.consume()
				s.wantOrders(1, []wantOrder{{ann, tc.as, tc.asBecause}, {bob, events.Confirmed, ""}})
				s.wantHeld(1, map[string]int64{"bob": 1})
				s.wantRedisSold(1, 1)
			})
		}
	})
}

// TestConsumerMovesOnAnOrderRedisEndedSinceTheBackup: the store is restored from a backup that
// holds Ann's order confirmed (or paid), which Redis has refunded (or expired) since, and the
// consumer reads her event again (its group's offsets reset), in one batch with Bob's, who
// bought the unit Redis put back on sale. The consumer moves Ann's order on in the store as
// Redis ended it, its unit off sold and off Ann's total, before it persists the batch, so Bob's
// order is confirmed with the unit. Before, Ann's order was moved on only after the batch's
// commit (from the confirm's answer), and Bob's was refused store_sold_out and dead-lettered,
// though Redis had sold him the unit. On both databases.
func TestConsumerMovesOnAnOrderRedisEndedSinceTheBackup(t *testing.T) {
	storetest.Each(t, func(t *testing.T, st *store.Store) {
		for _, tc := range []struct {
			name      string
			before    func(s *replaySale, e events.Event) // in the backup
			end       func(s *replaySale, e events.Event) // after it
			as        events.Status
			asBecause string
		}{
			{"refunded", func(*replaySale, events.Event) {}, (*replaySale).refund, events.Refunded, events.ReasonOperator},
			// Its refund unfinished: the OrderRefunded naming its payment may have been lost
			// with the store, and the sweeper announces it again.
			{"paid, refunded", (*replaySale).pay, (*replaySale).refund, events.Refunded, ""},
			{"expired", (*replaySale).unpaid, (*replaySale).expire, events.Expired, events.ReasonUnpaid},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := newReplaySale(t, st, 1)
				ann := s.buy("ann")
				s.confirm(ann)
				tc.before(s, ann)
				restore := s.backup()
				tc.end(s, ann)
				restore()
				bob := s.buy("bob")

				s.consume()
				s.wantOrders(1, []wantOrder{{ann, tc.as, tc.asBecause}, {bob, events.Confirmed, ""}})
				s.wantHeld(1, map[string]int64{"bob": 1})
				s.wantRedisSold(1, 1)
			})
		}
	})
}

// consume runs the live consumer, with Redis, over the requested topic until its group has
// committed every record.
func (s *replaySale) consume() {
	s.t.Helper()
	cons, err := consumer.New(consumer.Config{Brokers: s.brokers, Topics: s.topics, Logger: slog.New(slog.DiscardHandler)}, s.st, s.r)
	if err != nil {
		s.t.Fatal(err)
	}
	defer cons.Close()
	ctx, cancel := context.WithCancel(s.ctx)
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	waitCommitted(s.t, kadm.NewClient(s.cl), s.topics, "the events were not persisted")
	cancel()
	if err := <-done; err != nil {
		s.t.Fatalf("Run: %v", err)
	}
}

// redisDown is a Redis that does not answer reads: the consumer's confirmations go unanswered
// too, which it already does not wait for.
type redisDown struct{ confirmer }

func (*redisDown) Reservations(context.Context, []string) (map[string]lua.Reservation, error) {
	return nil, errors.New("redis: connection refused")
}

// TestConsumerPersistsWhileRedisIsDown: the read of the batch's reservations for orders Redis
// gave back does not hold up the store while Redis does not answer: the orders are persisted
// as before the read, and the sweeper confirms them in Redis once it answers. Waiting, the
// consumer would leave them to be failed by the sweeper at their deadline.
func TestConsumerPersistsWhileRedisIsDown(t *testing.T) {
	const n = 5
	st, campaign, brokers, topics := backlog(t, "redis-down", n)
	cons, err := consumer.New(consumer.Config{Brokers: brokers, Topics: topics, Logger: slog.New(slog.DiscardHandler)}, st, &redisDown{})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := st.Campaign(context.Background(), campaign)
		if err != nil {
			t.Fatal(err)
		}
		if c.Sold == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s with Redis down, %d of %d orders persisted", c.Sold, n)
		}
	}
}
