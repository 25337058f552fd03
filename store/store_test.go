package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// newEvent returns a valid OrderRequested event for a new order of qty units.
func newEvent(campaign, user string, qty int) events.Event {
	now := time.Now().UTC()
	return events.Event{
		Type:       events.OrderRequested,
		Version:    events.Version,
		EventID:    events.NewID(),
		OccurredAt: now,
		OrderID:    events.NewOrderID(campaign),
		CampaignID: campaign,
		UserID:     user,
		Quantity:   qty,
		Deadline:   now.Add(30 * time.Second),
	}
}

// mustValid fails the test if e is not an event the consumer could have decoded.
func mustValid(t *testing.T, evs ...events.Event) {
	t.Helper()
	for _, e := range evs {
		if err := e.Validate(); err != nil {
			t.Fatalf("test event is invalid: %v", err)
		}
	}
}

// mustCampaign creates a campaign with a fresh id and returns it.
func mustCampaign(t *testing.T, s *store.Store, stock, limit int64) store.Campaign {
	t.Helper()
	return mustPayingCampaign(t, s, stock, limit, 0)
}

// mustPayingCampaign is mustCampaign for a campaign whose confirmed orders must be paid within
// window.
func mustPayingCampaign(t *testing.T, s *store.Store, stock, limit int64, window time.Duration) store.Campaign {
	t.Helper()
	c := store.Campaign{
		ID:              storetest.Name("c"),
		Name:            "test campaign",
		Stock:           stock,
		PerUserLimit:    limit,
		StartsAtMs:      time.Now().Add(-time.Minute).UnixMilli(),
		CreatedAtMs:     time.Now().UnixMilli(),
		PaymentWindowMs: window.Milliseconds(),
	}
	if err := s.CreateCampaign(context.Background(), c); err != nil {
		t.Fatalf("CreateCampaign: %v", err)
	}
	return c
}

// confirm runs ConfirmOrders and fails the test on an error.
func confirm(t *testing.T, s *store.Store, evs ...events.Event) []store.Result {
	t.Helper()
	mustValid(t, evs...)
	rs, err := s.ConfirmOrders(context.Background(), evs)
	if err != nil {
		t.Fatalf("ConfirmOrders: %v", err)
	}
	if len(rs) != len(evs) {
		t.Fatalf("ConfirmOrders returned %d results for %d events", len(rs), len(evs))
	}
	return rs
}

// wantResults compares results with want, in order.
func wantResults(t *testing.T, got []store.Result, want ...store.Result) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d results, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("result %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// sold returns the campaign's sold units.
func sold(t *testing.T, s *store.Store, id string) int64 {
	t.Helper()
	c, err := s.Campaign(context.Background(), id)
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	return c.Sold
}

// wantSold fails the test unless the campaign's sold units are want.
func wantSold(t *testing.T, s *store.Store, id string, want int64) {
	t.Helper()
	if got := sold(t, s, id); got != want {
		t.Errorf("campaign %s sold = %d, want %d", id, got, want)
	}
}

// wantStatus fails the test unless the order is stored with status want.
func wantStatus(t *testing.T, s *store.Store, orderID string, want events.Status) store.Order {
	t.Helper()
	o, err := s.Order(context.Background(), orderID)
	if err != nil {
		t.Fatalf("Order %s: %v", orderID, err)
	}
	if o.Status != want {
		t.Errorf("order %s status = %q, want %q", orderID, o.Status, want)
	}
	return o
}

// wantNoOrder fails the test if the store holds a row for orderID.
func wantNoOrder(t *testing.T, s *store.Store, orderID string) {
	t.Helper()
	o, err := s.Order(context.Background(), orderID)
	if code := events.ErrorCode(err); code != events.OrderNotFound {
		t.Errorf("Order %s = %+v, %v; want an %s error", orderID, o, err, events.OrderNotFound)
	}
}

// wantHoldings fails the test unless the campaign's holdings are want.
func wantHoldings(t *testing.T, s *store.Store, campaign string, want map[string]int64) {
	t.Helper()
	got, err := s.Holdings(context.Background(), campaign)
	if err != nil {
		t.Fatalf("Holdings: %v", err)
	}
	if len(got) != len(want) {
		t.Errorf("Holdings(%s) = %v, want %v", campaign, got, want)
		return
	}
	for u, n := range want {
		if got[u] != n {
			t.Errorf("Holdings(%s) = %v, want %v", campaign, got, want)
			return
		}
	}
}

var confirmed = store.Result{Status: events.Confirmed}

func TestStore(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()

		t.Run("migrate twice is a no-op", func(t *testing.T) {
			c := mustCampaign(t, s, 5, 1)
			var before, versions int
			if err := s.DB().Get(&before, `SELECT COUNT(*) FROM schema_migrations`); err != nil {
				t.Fatal(err)
			}
			if before == 0 {
				t.Fatal("schema_migrations is empty after the first Migrate")
			}
			for range 2 {
				if err := s.Migrate(ctx); err != nil {
					t.Fatalf("Migrate again: %v", err)
				}
			}
			if err := s.DB().Get(&versions, `SELECT COUNT(*) FROM schema_migrations`); err != nil {
				t.Fatal(err)
			}
			if versions != before {
				t.Errorf("schema_migrations has %d rows after migrating again, want %d", versions, before)
			}
			if got, err := s.Campaign(ctx, c.ID); err != nil || got != c {
				t.Errorf("after migrating again Campaign = %+v, %v; want %+v", got, err, c)
			}
		})

		t.Run("create and read a campaign", func(t *testing.T) {
			c := store.Campaign{
				ID:           storetest.Name("read"),
				Name:         "Singles' Day",
				Stock:        100,
				PerUserLimit: 2,
				StartsAtMs:   1_762_819_200_000,
				EndsAtMs:     1_762_905_600_000,
				CreatedAtMs:  1_762_000_000_000,
			}
			if err := s.CreateCampaign(ctx, c); err != nil {
				t.Fatalf("CreateCampaign: %v", err)
			}
			got, err := s.Campaign(ctx, c.ID)
			if err != nil {
				t.Fatalf("Campaign: %v", err)
			}
			if got != c {
				t.Errorf("Campaign = %+v, want %+v", got, c)
			}
			all, err := s.Campaigns(ctx)
			if err != nil {
				t.Fatalf("Campaigns: %v", err)
			}
			var found bool
			for _, x := range all {
				found = found || x == c
			}
			if !found {
				t.Errorf("Campaigns = %+v, lacks %+v", all, c)
			}
		})

		t.Run("create ignores the caller's sold", func(t *testing.T) {
			c := store.Campaign{ID: storetest.Name("sold"), Name: "n", Stock: 10, PerUserLimit: 1, Sold: 7}
			if err := s.CreateCampaign(ctx, c); err != nil {
				t.Fatalf("CreateCampaign: %v", err)
			}
			wantSold(t, s, c.ID, 0)
		})

		t.Run("duplicate campaign id", func(t *testing.T) {
			c := mustCampaign(t, s, 10, 1)
			dup := c
			dup.Name, dup.Stock = "other", 99
			err := s.CreateCampaign(ctx, dup)
			if code := events.ErrorCode(err); code != events.CampaignExists {
				t.Fatalf("CreateCampaign with a taken id = %v (code %q), want code %q", err, code, events.CampaignExists)
			}
			if got, err := s.Campaign(ctx, c.ID); err != nil || got != c {
				t.Errorf("after the duplicate Campaign = %+v, %v; want the original %+v", got, err, c)
			}
		})

		t.Run("invalid campaign is not a conflict", func(t *testing.T) {
			err := s.CreateCampaign(ctx, store.Campaign{ID: storetest.Name("bad"), Name: "n", Stock: -1, PerUserLimit: 1})
			if err == nil {
				t.Fatal("CreateCampaign with negative stock succeeded")
			}
			if code := events.ErrorCode(err); code == events.CampaignExists {
				t.Errorf("CreateCampaign with negative stock = %v, reported as %q", err, code)
			}
		})

		t.Run("missing campaign and order", func(t *testing.T) {
			_, err := s.Campaign(ctx, storetest.Name("missing"))
			if code := events.ErrorCode(err); code != events.CampaignNotFound {
				t.Errorf("Campaign(missing) = %v, want code %q", err, events.CampaignNotFound)
			}
			_, err = s.Order(ctx, events.NewOrderID("missing"))
			if code := events.ErrorCode(err); code != events.OrderNotFound {
				t.Errorf("Order(missing) = %v, want code %q", err, events.OrderNotFound)
			}
			_, _, err = s.RefundOrder(ctx, events.NewOrderID("missing"))
			if code := events.ErrorCode(err); code != events.OrderNotFound {
				t.Errorf("RefundOrder(missing) = %v, want code %q", err, events.OrderNotFound)
			}
			h, err := s.Holdings(ctx, storetest.Name("missing"))
			if err != nil || len(h) != 0 {
				t.Errorf("Holdings(missing) = %v, %v; want empty", h, err)
			}
		})

		t.Run("confirm orders", func(t *testing.T) {
			c := mustCampaign(t, s, 10, 3)
			a1, b, a2 := newEvent(c.ID, "alice", 2), newEvent(c.ID, "bob", 3), newEvent(c.ID, "alice", 1)
			wantResults(t, confirm(t, s, a1, b, a2), confirmed, confirmed, confirmed)
			wantSold(t, s, c.ID, 6)
			wantHoldings(t, s, c.ID, map[string]int64{"alice": 3, "bob": 3})
			o := wantStatus(t, s, a1.OrderID, events.Confirmed)
			want := store.Order{
				OrderID: a1.OrderID, CampaignID: c.ID, UserID: "alice", Quantity: 2,
				Status: events.Confirmed, CreatedAtMs: a1.OccurredAt.UnixMilli(), UpdatedAtMs: o.UpdatedAtMs,
			}
			if o != want {
				t.Errorf("Order = %+v, want %+v", o, want)
			}
			if o.UpdatedAtMs < o.CreatedAtMs {
				t.Errorf("order updated at %d before it was created at %d", o.UpdatedAtMs, o.CreatedAtMs)
			}
		})

		t.Run("empty batch", func(t *testing.T) {
			rs, err := s.ConfirmOrders(ctx, nil)
			if err != nil || len(rs) != 0 {
				t.Errorf("ConfirmOrders(nil) = %v, %v; want no results", rs, err)
			}
		})

		t.Run("redelivered batch changes nothing", func(t *testing.T) {
			c := mustCampaign(t, s, 10, 2)
			a, b := newEvent(c.ID, "alice", 2), newEvent(c.ID, "bob", 1)
			wantResults(t, confirm(t, s, a, b), confirmed, confirmed)
			dup := store.Result{Status: events.Confirmed, Duplicate: true}
			wantResults(t, confirm(t, s, a, b), dup, dup)
			// A redelivery's event id differs from the first delivery's; the order id is the key.
			again := a
			again.EventID = events.NewID()
			wantResults(t, confirm(t, s, b, again, b), dup, dup, dup)
			wantSold(t, s, c.ID, 3)
			wantHoldings(t, s, c.ID, map[string]int64{"alice": 2, "bob": 1})
		})

		t.Run("same event twice in one batch", func(t *testing.T) {
			c := mustCampaign(t, s, 10, 2)
			a := newEvent(c.ID, "alice", 2)
			wantResults(t, confirm(t, s, a, a), confirmed, store.Result{Status: events.Confirmed, Duplicate: true})
			wantSold(t, s, c.ID, 2)
			wantHoldings(t, s, c.ID, map[string]int64{"alice": 2})
		})

		t.Run("sold out", func(t *testing.T) {
			c := mustCampaign(t, s, 3, 2)
			carol, bob, alice := newEvent(c.ID, "carol", 2), newEvent(c.ID, "bob", 2), newEvent(c.ID, "alice", 1)
			wantResults(t, confirm(t, s, carol), confirmed)
			// Bob is refused whichever of the two the store tries first; the users are in
			// descending order because the store may reorder a batch, its results must not be.
			soldOut := store.Result{Reason: events.ReasonStoreSoldOut}
			wantResults(t, confirm(t, s, bob, alice), soldOut, confirmed)
			wantSold(t, s, c.ID, 3)
			wantNoOrder(t, s, bob.OrderID)
			wantHoldings(t, s, c.ID, map[string]int64{"alice": 1, "carol": 2})

			// Refused orders are not stored, so a redelivery is refused again, not a duplicate.
			dave := newEvent(c.ID, "dave", 1)
			wantResults(t, confirm(t, s, bob, dave), soldOut, soldOut)
			wantSold(t, s, c.ID, 3)
			wantNoOrder(t, s, bob.OrderID)
			wantNoOrder(t, s, dave.OrderID)
			wantHoldings(t, s, c.ID, map[string]int64{"alice": 1, "carol": 2})
		})

		t.Run("zero stock", func(t *testing.T) {
			c := mustCampaign(t, s, 0, 1)
			e := newEvent(c.ID, "alice", 1)
			wantResults(t, confirm(t, s, e), store.Result{Reason: events.ReasonStoreSoldOut})
			wantNoOrder(t, s, e.OrderID)
		})

		t.Run("per-user limit", func(t *testing.T) {
			c := mustCampaign(t, s, 100, 2)
			limit := store.Result{Reason: events.ReasonStoreLimit}

			tooMany := newEvent(c.ID, "alice", 3)
			wantResults(t, confirm(t, s, tooMany), limit)
			wantNoOrder(t, s, tooMany.OrderID)
			wantSold(t, s, c.ID, 0)

			first, second := newEvent(c.ID, "alice", 1), newEvent(c.ID, "alice", 1)
			third, bobs := newEvent(c.ID, "alice", 1), newEvent(c.ID, "bob", 2)
			wantResults(t, confirm(t, s, first, second, third, bobs), confirmed, confirmed, limit, confirmed)
			wantNoOrder(t, s, third.OrderID)

			later := newEvent(c.ID, "alice", 1)
			wantResults(t, confirm(t, s, later), limit)
			wantNoOrder(t, s, later.OrderID)
			wantSold(t, s, c.ID, 4)
			wantHoldings(t, s, c.ID, map[string]int64{"alice": 2, "bob": 2})

			// The limit is per campaign.
			other := mustCampaign(t, s, 100, 2)
			wantResults(t, confirm(t, s, newEvent(other.ID, "alice", 2)), confirmed)
		})

		t.Run("unknown campaign", func(t *testing.T) {
			c := mustCampaign(t, s, 10, 1)
			lost, ok := newEvent(storetest.Name("gone"), "alice", 1), newEvent(c.ID, "alice", 1)
			wantResults(t, confirm(t, s, lost, ok), store.Result{Reason: "campaign_not_found"}, confirmed)
			wantNoOrder(t, s, lost.OrderID)
			wantSold(t, s, c.ID, 1)
		})

		t.Run("fail order before confirm", func(t *testing.T) {
			c := mustCampaign(t, s, 10, 2)
			e := newEvent(c.ID, "alice", 2)
			o, err := s.FailOrder(ctx, e, events.ReasonExpired)
			if err != nil {
				t.Fatalf("FailOrder: %v", err)
			}
			if o.Status != events.Failed || o.Reason != events.ReasonExpired || o.OrderID != e.OrderID || o.Quantity != 2 || o.UserID != "alice" {
				t.Errorf("FailOrder = %+v, want a failed row with reason %q", o, events.ReasonExpired)
			}
			wantResults(t, confirm(t, s, e), store.Result{Status: events.Failed, Duplicate: true})
			wantSold(t, s, c.ID, 0)
			wantHoldings(t, s, c.ID, map[string]int64{})

			// A second FailOrder, with another reason, keeps the first row.
			o2, err := s.FailOrder(ctx, e, events.ReasonOperator)
			if err != nil {
				t.Fatalf("FailOrder again: %v", err)
			}
			if o2 != o {
				t.Errorf("FailOrder again = %+v, want the first row %+v", o2, o)
			}
		})

		t.Run("confirm before fail order", func(t *testing.T) {
			c := mustCampaign(t, s, 10, 2)
			e := newEvent(c.ID, "alice", 2)
			wantResults(t, confirm(t, s, e), confirmed)
			before := wantStatus(t, s, e.OrderID, events.Confirmed)
			o, err := s.FailOrder(ctx, e, events.ReasonExpired)
			if err != nil {
				t.Fatalf("FailOrder: %v", err)
			}
			if o != before {
				t.Errorf("FailOrder after confirm = %+v, want the confirmed row %+v", o, before)
			}
			wantSold(t, s, c.ID, 2)
			wantHoldings(t, s, c.ID, map[string]int64{"alice": 2})
		})

		t.Run("fencing tokens", func(t *testing.T) {
			c := mustCampaign(t, s, 10, 5)
			name := storetest.Name("lock")
			fail := func(f store.Fence) error {
				_, err := s.FailOrderFenced(ctx, newEvent(c.ID, "ann", 1), events.ReasonExpired, f)
				return err
			}

			// Compensators taking the lease at once never get the same token.
			const holders, each = 4, 5
			tokens := make(chan int64, holders*each)
			errs := make(chan error, holders)
			for range holders {
				go func() {
					for range each {
						f, err := s.IssueFence(ctx, name, 0)
						if err != nil {
							errs <- err
							return
						}
						tokens <- f.Token
					}
					errs <- nil
				}()
			}
			for range holders {
				if err := recvWithin(t, errs, "a holder's IssueFence calls"); err != nil {
					t.Fatalf("IssueFence: %v", err)
				}
			}
			close(tokens)
			seen := map[int64]bool{}
			for tok := range tokens {
				if seen[tok] || tok < 1 || tok > holders*each {
					t.Errorf("token %d issued twice or out of 1..%d", tok, holders*each)
				}
				seen[tok] = true
			}

			// Issuing a token refuses the earlier ones before its holder writes anything.
			earlier, err := s.IssueFence(ctx, name, 0)
			if err != nil {
				t.Fatal(err)
			}
			latest, err := s.IssueFence(ctx, name, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := fail(earlier); !errors.Is(err, store.ErrStaleFence) {
				t.Errorf("write with an earlier token: %v, want ErrStaleFence", err)
			}
			if err := fail(latest); err != nil {
				t.Errorf("write with the latest token: %v", err)
			}

			// A token the store recorded but did not issue (a compensator from before it issued
			// them): the next one issued is above it, never refused as stale.
			if err := fail(store.Fence{Name: name, Token: 1000}); err != nil {
				t.Fatal(err)
			}
			next, err := s.IssueFence(ctx, name, 0)
			if err != nil {
				t.Fatal(err)
			}
			if next.Token != 1001 {
				t.Errorf("issued %d after 1000 was recorded, want 1001", next.Token)
			}
			if err := fail(next); err != nil {
				t.Errorf("write with the token issued after 1000: %v", err)
			}

			// The floor (Redis's count of the lock's acquisitions, which compensators from before
			// the store issued tokens took as theirs) lifts the token; the next goes on above it.
			for _, c := range []struct{ floor, want int64 }{{5000, 5000}, {0, 5001}, {10, 5002}} {
				if f, err := s.IssueFence(ctx, name, c.floor); err != nil || f.Token != c.want {
					t.Errorf("IssueFence with floor %d = %d, %v; want %d", c.floor, f.Token, err, c.want)
				}
			}
		})

		t.Run("refund", func(t *testing.T) {
			c := mustCampaign(t, s, 10, 3)
			a, b := newEvent(c.ID, "alice", 2), newEvent(c.ID, "alice", 1)
			wantResults(t, confirm(t, s, a, b), confirmed, confirmed)
			for i := range 2 {
				o, _, err := s.RefundOrder(ctx, a.OrderID)
				if err != nil {
					t.Fatalf("RefundOrder #%d: %v", i+1, err)
				}
				if o.Status != events.Refunded || o.OrderID != a.OrderID || o.Quantity != 2 {
					t.Errorf("RefundOrder #%d = %+v, want the refunded row", i+1, o)
				}
				wantSold(t, s, c.ID, 1)
				wantHoldings(t, s, c.ID, map[string]int64{"alice": 1})
			}
			// A refunded order stays refunded: neither a redelivery nor a late failure touches it.
			wantResults(t, confirm(t, s, a), store.Result{Status: events.Refunded, Duplicate: true})
			if o, err := s.FailOrder(ctx, a, events.ReasonExpired); err != nil || o.Status != events.Refunded {
				t.Errorf("FailOrder after refund = %+v, %v; want the refunded row", o, err)
			}
			wantSold(t, s, c.ID, 1)

			// The refunded units can be bought again, by the same buyer too.
			wantResults(t, confirm(t, s, newEvent(c.ID, "alice", 2)), confirmed)
			wantSold(t, s, c.ID, 3)
			wantHoldings(t, s, c.ID, map[string]int64{"alice": 3})
		})

		t.Run("a refund is listed until its units are back in redis", func(t *testing.T) {
			c := mustCampaign(t, s, 10, 3)
			a, b, kept := newEvent(c.ID, "alice", 2), newEvent(c.ID, "bob", 1), newEvent(c.ID, "carol", 1)
			wantResults(t, confirm(t, s, a, b, kept), confirmed, confirmed, confirmed)
			for _, e := range []events.Event{a, b} {
				if _, _, err := s.RefundOrder(ctx, e.OrderID); err != nil {
					t.Fatal(err)
				}
			}
			wantRefunding := func(want ...string) {
				t.Helper()
				got, err := s.Refunding(ctx, c.ID)
				if err != nil {
					t.Fatal(err)
				}
				ids := map[string]bool{}
				for _, o := range got {
					ids[o.OrderID] = o.Status == events.Refunded
				}
				if len(got) != len(want) {
					t.Errorf("Refunding = %d orders %v, want %v", len(got), ids, want)
				}
				for _, id := range want {
					if !ids[id] {
						t.Errorf("Refunding misses the refunded order %s (got %v)", id, ids)
					}
				}
			}
			wantRefunding(a.OrderID, b.OrderID)
			if err := s.MarkRefunded(ctx, a.OrderID); err != nil {
				t.Fatal(err)
			}
			if err := s.MarkRefunded(ctx, kept.OrderID); err != nil { // not refunded: untouched
				t.Fatal(err)
			}
			wantRefunding(b.OrderID)
			// The sweeper's page, of every campaign (other stories' refunds may be in it too).
			all, err := s.UnfinishedRefunds(ctx, "", 1000)
			if err != nil {
				t.Fatal(err)
			}
			listed := map[string]bool{}
			for _, o := range all {
				listed[o.OrderID] = true
			}
			if !listed[b.OrderID] || listed[a.OrderID] || listed[kept.OrderID] {
				t.Errorf("UnfinishedRefunds lists b %v, a %v, kept %v; want b only of the three", listed[b.OrderID], listed[a.OrderID], listed[kept.OrderID])
			}
			wantStatus(t, s, kept.OrderID, events.Confirmed)
			if o := wantStatus(t, s, a.OrderID, events.Refunded); o.Reason != events.ReasonOperator {
				t.Errorf("a refund whose units are back has reason %q, want %q", o.Reason, events.ReasonOperator)
			}
			wantSold(t, s, c.ID, 1) // marking moves no units
		})

		t.Run("refund of a failed order", func(t *testing.T) {
			c := mustCampaign(t, s, 10, 2)
			e := newEvent(c.ID, "alice", 2)
			failed, err := s.FailOrder(ctx, e, events.ReasonOperator)
			if err != nil {
				t.Fatalf("FailOrder: %v", err)
			}
			o, _, err := s.RefundOrder(ctx, e.OrderID)
			if err != nil {
				t.Fatalf("RefundOrder: %v", err)
			}
			if o != failed {
				t.Errorf("RefundOrder of a failed order = %+v, want it unchanged %+v", o, failed)
			}
			wantSold(t, s, c.ID, 0)
			wantHoldings(t, s, c.ID, map[string]int64{})
		})

		t.Run("holdings", func(t *testing.T) {
			c := mustCampaign(t, s, 100, 5)
			other := mustCampaign(t, s, 100, 5)
			var evs []events.Event
			want := map[string]int64{}
			for i := range 6 {
				u := fmt.Sprintf("user-%d", i)
				evs = append(evs, newEvent(c.ID, u, i%3+1), newEvent(c.ID, u, 1))
				want[u] = int64(i%3 + 2)
			}
			evs = append(evs, newEvent(other.ID, "user-0", 4))
			failed := newEvent(c.ID, "user-9", 1)
			if _, err := s.FailOrder(ctx, failed, events.ReasonExpired); err != nil {
				t.Fatalf("FailOrder: %v", err)
			}
			for i, r := range confirm(t, s, evs...) {
				if r != confirmed {
					t.Errorf("result %d = %+v, want confirmed", i, r)
				}
			}
			wantHoldings(t, s, c.ID, want)
			wantHoldings(t, s, other.ID, map[string]int64{"user-0": 4})
		})

		// A rebuild restores Redis from what WhileHeld reads: the orders that hold units, and
		// those that gave them back, whose records a keyed retry must find.
		t.Run("while held", func(t *testing.T) {
			c := store.Campaign{ID: storetest.Name("held"), Name: "held", Stock: 10, PerUserLimit: 5,
				StartsAtMs: time.Now().Add(-time.Minute).UnixMilli(), CreatedAtMs: time.Now().UnixMilli(), PaymentWindowMs: 60_000}
			if err := s.CreateCampaign(ctx, c); err != nil {
				t.Fatal(err)
			}
			other := mustCampaign(t, s, 10, 5)
			kept, paid := newEvent(c.ID, "ann", 1), newEvent(c.ID, "ann", 1)
			refunded, expired, failed := newEvent(c.ID, "bob", 2), newEvent(c.ID, "cat", 1), newEvent(c.ID, "dan", 3)
			otherFailed := newEvent(other.ID, "ann", 1)
			confirm(t, s, kept, paid, refunded, expired)
			if _, _, err := s.PayOrder(ctx, paid.OrderID, "pay-1", time.Now()); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.RefundOrder(ctx, refunded.OrderID); err != nil {
				t.Fatal(err)
			}
			if _, err := s.ExpireOrder(ctx, expired.OrderID, time.Now().Add(2*time.Minute)); err != nil { // not paid in its window
				t.Fatal(err)
			}
			for _, e := range []events.Event{failed, otherFailed} {
				if _, err := s.FailOrder(ctx, e, events.ReasonProduce); err != nil {
					t.Fatal(err)
				}
			}
			statuses := func(os []store.Order) map[string]events.Status {
				m := map[string]events.Status{}
				for _, o := range os {
					m[o.OrderID] = o.Status
				}
				return m
			}
			err := s.WhileHeld(ctx, c.ID, time.Time{}, func(h store.Held) error {
				if h.Campaign.Sold != 2 || !maps.Equal(h.Holdings, map[string]int64{"ann": 2}) {
					t.Errorf("held: sold %d, holdings %v; want 2, ann's 2", h.Campaign.Sold, h.Holdings)
				}
				if got, want := statuses(h.Orders), map[string]events.Status{kept.OrderID: events.Confirmed, paid.OrderID: events.Paid}; !maps.Equal(got, want) {
					t.Errorf("held orders %v, want %v", got, want)
				}
				if got, want := statuses(h.Ended), map[string]events.Status{refunded.OrderID: events.Refunded, expired.OrderID: events.Expired,
					failed.OrderID: events.Failed}; !maps.Equal(got, want) {
					t.Errorf("ended orders %v, want %v", got, want)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			// Ended since a moment to come: none of them, the orders that hold units all the same.
			err = s.WhileHeld(ctx, c.ID, time.Now().Add(time.Hour), func(h store.Held) error {
				if len(h.Ended) != 0 || len(h.Orders) != 2 {
					t.Errorf("held since an hour from now: %d ended, %d orders; want 0 and 2", len(h.Ended), len(h.Orders))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	})
}
