package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

func TestChangeCampaign(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()

		t.Run("concurrent additions all count, each one version", func(t *testing.T) {
			c := mustCampaign(t, s, 10, 1)
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() {
					if _, _, err := s.ChangeCampaign(ctx, c.ID, func(c *store.Campaign) error { c.Stock += 3; return nil }); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			got, err := s.Campaign(ctx, c.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Stock != 70 || got.Version != 20 {
				t.Fatalf("stock %d version %d, want 70 and 20", got.Stock, got.Version)
			}
		})

		t.Run("a refused change writes nothing", func(t *testing.T) {
			c := mustCampaign(t, s, 10, 1)
			_, _, err := s.ChangeCampaign(ctx, c.ID, func(c *store.Campaign) error {
				c.EndsAtMs = 1
				return events.Errorf(events.CampaignCancelled, "no")
			})
			if events.ErrorCode(err) != events.CampaignCancelled {
				t.Fatalf("err %v, want the change's own", err)
			}
			if got, err := s.Campaign(ctx, c.ID); err != nil || got.EndsAtMs != 0 || got.Version != 0 {
				t.Fatalf("a refused change wrote: %+v (%v)", got, err)
			}
		})

		t.Run("stock never shrinks", func(t *testing.T) {
			c := mustCampaign(t, s, 10, 1)
			if _, _, err := s.ChangeCampaign(ctx, c.ID, func(c *store.Campaign) error { c.Stock--; return nil }); err == nil {
				t.Fatal("a smaller stock was accepted")
			}
		})

		t.Run("unknown campaign", func(t *testing.T) {
			_, _, err := s.ChangeCampaign(ctx, "nope-"+events.NewID()[14:], func(*store.Campaign) error { return nil })
			if events.ErrorCode(err) != events.CampaignNotFound {
				t.Fatalf("err %v, want campaign_not_found", err)
			}
		})

		t.Run("units by status and reason", func(t *testing.T) {
			c, other := mustCampaign(t, s, 10, 5), mustCampaign(t, s, 10, 5)
			a, b, x := newEvent(c.ID, "a", 2), newEvent(c.ID, "b", 3), newEvent(other.ID, "x", 1)
			confirm(t, s, a, b, x)
			if _, _, err := s.RefundOrder(ctx, b.OrderID); err != nil {
				t.Fatal(err)
			}
			if _, err := s.FailOrder(ctx, newEvent(c.ID, "d", 1), events.ReasonExpired); err != nil {
				t.Fatal(err)
			}
			us, err := s.UnitsByStatus(ctx, []string{c.ID})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			for _, u := range us {
				got[u.Campaign+" "+string(u.Status)+" "+u.Reason] = u.Units
			}
			want := map[string]int64{c.ID + " confirmed ": 2, c.ID + " refunded ": 3, c.ID + " failed expired": 1}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("UnitsByStatus = %v, want %v", got, want)
			}
		})

		t.Run("the last audit verdict per campaign", func(t *testing.T) {
			c := mustCampaign(t, s, 10, 1)
			for _, v := range []store.AuditVerdict{
				{Campaign: c.ID, AtMs: 1, OK: false, Violations: "I1 a\nI4 b"},
				{Campaign: c.ID, AtMs: 2, OK: true},
			} {
				if err := s.RecordAudit(ctx, v); err != nil {
					t.Fatal(err)
				}
			}
			vs, err := s.AuditVerdicts(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if v := vs[c.ID]; v.AtMs != 2 || !v.OK || v.ViolationCount() != 0 {
				t.Fatalf("verdict %+v, want the second", v)
			}
			if n := (store.AuditVerdict{Violations: "I1 a\nI4 b"}).ViolationCount(); n != 2 {
				t.Fatalf("ViolationCount %d, want 2", n)
			}
		})
	})
}

func TestNewestCampaigns(t *testing.T) {
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		// Created out of order, two in one millisecond: newest first, then by id.
		for _, c := range []struct {
			id string
			at int64
		}{{"b", 30}, {"old", 10}, {"a", 30}, {"mid", 20}, {"new", 40}} {
			if err := s.CreateCampaign(ctx, store.Campaign{ID: c.id, Name: c.id, Stock: 1, PerUserLimit: 1, CreatedAtMs: c.at}); err != nil {
				t.Fatal(err)
			}
		}
		for n, want := range map[int]string{0: "", 3: "new a b", 9: "new a b mid old"} {
			cs, err := s.NewestCampaigns(ctx, n)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range cs {
				got = append(got, c.ID)
			}
			if strings.Join(got, " ") != want {
				t.Errorf("newest %d: %q, want %q", n, got, want)
			}
		}
	})
}
