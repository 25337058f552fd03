package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// pageStore knows one campaign, with a payment window, and counts the reads of it; with
// down set it fails every read.
type pageStore struct {
	api.Store
	down            atomic.Bool
	campaigns, paid atomic.Int64
}

func (s *pageStore) Campaign(_ context.Context, id string) (store.Campaign, error) {
	s.campaigns.Add(1)
	switch {
	case s.down.Load():
		return store.Campaign{}, errors.New("connection refused")
	case id != "page":
		return store.Campaign{}, events.Errorf(events.CampaignNotFound, "campaign %q not found", id)
	}
	return store.Campaign{ID: id, Name: "Page", Stock: 100, Sold: 40, PerUserLimit: 1, PaymentWindowMs: 600_000}, nil
}

func (s *pageStore) PaidUnits(context.Context, string) (int64, error) {
	s.paid.Add(1)
	return 30, nil
}

// liveSale reports what Redis has left, read on every request.
type liveSale struct {
	api.Redis
	remaining atomic.Int64
}

func (r *liveSale) Stuck() bool { return false }

func (r *liveSale) Sale(context.Context, string) (lua.Sale, error) {
	return lua.Sale{Loaded: true, Remaining: r.remaining.Load()}, nil
}

// TestCampaignPagePolledByACrowd: at a sale's start every buyer's page polls its campaign. The
// store is read once a second per campaign, not once per poll, while the units left are
// Redis's of the moment.
func TestCampaignPagePolledByACrowd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, r := &pageStore{}, &liveSale{}
		r.remaining.Store(60)
		srv := api.New(api.Config{Logger: slog.New(slog.DiscardHandler)}, st, r, nil)
		defer srv.Close()
		get := func(id string) (int, api.CampaignView) {
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/campaigns/"+id, nil))
			var v api.CampaignView
			if rec.Code == http.StatusOK {
				if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
					t.Fatal(err)
				}
			}
			return rec.Code, v
		}

		var wg sync.WaitGroup
		for range 200 {
			wg.Go(func() {
				if code, v := get("page"); code != http.StatusOK || v.Sold != 40 || v.Paid != 30 || v.Remaining != 60 {
					t.Errorf("answered %d %+v", code, v)
				}
			})
		}
		wg.Wait()
		if c, p := st.campaigns.Load(), st.paid.Load(); c != 1 || p != 1 {
			t.Errorf("200 polls read the campaign %d times and its paid units %d times; want once each", c, p)
		}

		r.remaining.Store(59) // a unit sold: the next poll shows it, from Redis
		if _, v := get("page"); v.Remaining != 59 || st.campaigns.Load() != 1 {
			t.Errorf("remaining %d after %d store reads; want 59 from Redis, no new read", v.Remaining, st.campaigns.Load())
		}
		time.Sleep(time.Second)
		if get("page"); st.campaigns.Load() != 2 {
			t.Errorf("a second later: %d store reads, want 2", st.campaigns.Load())
		}

		// A campaign not found is kept as one found is (TestUnknownCampaignPolledByACrowd); a
		// store down is not.
		for range 2 {
			if code, _ := get("nope"); code != http.StatusNotFound {
				t.Errorf("unknown campaign answered %d", code)
			}
		}
		time.Sleep(time.Second)
		st.down.Store(true)
		if code, _ := get("page"); code != http.StatusServiceUnavailable {
			t.Errorf("store down: answered %d, want 503", code)
		}
		st.down.Store(false)
		if code, _ := get("page"); code != http.StatusOK {
			t.Errorf("store back: answered %d, want 200 at once", code)
		}
		if n := st.campaigns.Load(); n != 5 {
			t.Errorf("%d store reads; want 5: one of the unknown campaign, the failed read and the one after it read anew", n)
		}
	})
}

// TestUnknownCampaignPolledByACrowd: a campaign's page is out before the campaign is created
// (or a link has a typo), and its crowd polls it and presses buy. Each poll and each purchase
// asked the store again, as a miss was never kept: the store is read once a second per
// campaign id instead, whatever the number of polls and purchases, and the ids of campaigns
// that do not exist are forgotten a few seconds after they were asked for.
func TestUnknownCampaignPolledByACrowd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &pageStore{}
		r := &fakeRedis{err: events.Errorf(events.CampaignNotFound, "campaign not found")}
		srv := api.New(api.Config{Logger: slog.New(slog.DiscardHandler), InsecureUserHeader: true}, st, r, nil)
		defer srv.Close()
		for i := range 100 {
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/campaigns/soon", nil))
			if rec.Code != http.StatusNotFound {
				t.Fatalf("poll %d answered %d %s, want 404", i, rec.Code, rec.Body)
			}
			rec = httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, request("POST", "/v1/campaigns/soon/purchases", `{"quantity":1}`, user(fmt.Sprint("buyer", i))...))
			if rec.Code != http.StatusNotFound {
				t.Fatalf("purchase %d answered %d %s, want 404", i, rec.Code, rec.Body)
			}
		}
		if n := st.campaigns.Load(); n != 1 {
			t.Errorf("100 polls and 100 purchases of a campaign that does not exist read the store %d times; want once", n)
		}

		for i := range 1000 {
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, fmt.Sprint("/v1/campaigns/nope", i), nil))
		}
		time.Sleep(3 * time.Second)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/campaigns/page", nil))
		if n := api.CampaignsKept(srv); n > 1 {
			t.Errorf("3 s after 1,000 ids of no campaign were asked for, %d campaigns are kept; want only the one asked for since", n)
		}
	})
}

// TestCreatedCampaignShownAtOnce: a campaign polled before it existed is shown by the api that
// created it as soon as it answers 201, not a campaignTTL later.
func TestCreatedCampaignShownAtOnce(t *testing.T) {
	h := newHarness(t)
	h.fail(t, request("GET", "/v1/campaigns/fresh", ""), http.StatusNotFound, events.CampaignNotFound)
	h.createCampaign(t, `{"id":"fresh","name":"Fresh","stock":5,"per_user_limit":1}`)
	h.do(t, request("GET", "/v1/campaigns/fresh", ""), http.StatusOK)
}

// TestMadeUpCampaignIDs: ids of no campaign are anyone's to make up, and each new one was a
// store read, up to the per-address limit of every client. The store now sees at most
// api.UnknownReads a second of them; the rest are told to try again, and a campaign the store
// knows is read as soon as the budget allows.
func TestMadeUpCampaignIDs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, r := &pageStore{}, &liveSale{}
		srv := api.New(api.Config{Logger: slog.New(slog.DiscardHandler)}, st, r, nil)
		defer srv.Close()
		get := func(id string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/campaigns/"+id, nil))
			return rec
		}
		codes := map[int]int{}
		for i := range 1000 {
			rec := get(fmt.Sprint("made-up-", i))
			codes[rec.Code]++
			if rec.Code == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") == "" {
				t.Fatalf("a 503 without Retry-After: %s", rec.Body)
			}
		}
		if n := st.campaigns.Load(); n > api.UnknownReads {
			t.Errorf("1,000 made-up ids at once read the store %d times; want at most %d", n, api.UnknownReads)
		}
		if codes[http.StatusNotFound]+codes[http.StatusServiceUnavailable] != 1000 || codes[http.StatusNotFound] == 0 {
			t.Errorf("answers %v; want 404 for the ids read, 503 for the rest", codes)
		}
		time.Sleep(time.Second)
		if rec := get("page"); rec.Code != http.StatusOK {
			t.Errorf("a second later, a campaign the store knows answered %d %s", rec.Code, rec.Body)
		}
	})
}

// TestKnownCampaignThroughAFlood: a campaign this api has shown stays outside the budget of
// unknown ids for a while after its entry expires. The cache dropped every expired entry, so
// two seconds after its last view a real campaign was unknown again, and a flood of made-up
// ids, which any client can send, kept it answering 503.
func TestKnownCampaignThroughAFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, r := &pageStore{}, &liveSale{}
		srv := api.New(api.Config{Logger: slog.New(slog.DiscardHandler)}, st, r, nil)
		defer srv.Close()
		get := func(id string) int {
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/campaigns/"+id, nil))
			return rec.Code
		}
		if code := get("page"); code != http.StatusOK {
			t.Fatalf("the campaign answered %d", code)
		}
		time.Sleep(3 * time.Second) // its entry expired a while ago
		for i := range 1000 {
			get(fmt.Sprint("made-up-", i))
		}
		if code := get("page"); code != http.StatusOK {
			t.Errorf("the campaign during a flood of made-up ids answered %d, want 200", code)
		}
	})
}
