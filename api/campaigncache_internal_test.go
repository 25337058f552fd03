package api

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
)

// TestChangedCampaignThroughAFlood: a campaign an operator changed through this api (forget)
// stays known, outside the budget of unknown ids. forget kept it with a zero expiry, which the
// next sweep of the cache read as long gone and dropped, so during a flood of made-up ids the
// sale's page answered 503 after every close, extend or raise.
func TestChangedCampaignThroughAFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCampaignCache(func(_ context.Context, id string) (storedCampaign, error) {
			if id == "mine" {
				return storedCampaign{camp: store.Campaign{ID: id}}, nil
			}
			return storedCampaign{}, events.Errorf(events.CampaignNotFound, "no %s", id)
		})
		c.forget("mine")
		for i := range 2 * unknownReads {
			c.get(context.Background(), fmt.Sprint("made-up-", i))
			if i == unknownReads/2 {
				time.Sleep(2 * campaignTTL) // a sweep is due
			}
		}
		if _, err := c.get(context.Background(), "mine"); err != nil {
			t.Fatalf("the changed campaign during a flood of made-up ids: %v", err)
		}
	})
}
