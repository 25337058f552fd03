package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

func viewOK(context.Context, store.Campaign) (api.CampaignView, error) {
	return api.CampaignView{ID: "c"}, nil
}

// TestControlAnswerLostSaysUseTo: a store that fails as the commit's answer comes back may
// have taken an add: run again as it was, it would add again, so the operator is told so and
// how to put units on sale safely, as the api says it.
func TestControlAnswerLostSaysUseTo(t *testing.T) {
	lost := errors.New("read tcp 10.0.0.2:5432: connection reset by peer")
	err := answerControl(context.Background(), new(bytes.Buffer), "c", store.Campaign{}, nil, lost, viewOK)
	if events.ErrorCode(err) != events.Unavailable || !errors.Is(err, lost) ||
		!strings.Contains(err.Error(), "may have been changed") || !strings.Contains(err.Error(), "--to") {
		t.Errorf("add-stock whose answer the store lost: %v; want unavailable, may have been changed, use --to", err)
	}
}

// TestControlDoneButUnshownSaysDone: a control done whose campaign cannot be read back (Redis
// or the paid units unreadable) is not to be run again: an add run again adds again.
func TestControlDoneButUnshownSaysDone(t *testing.T) {
	restoring := events.Wrap(events.Unavailable, errors.New("LOADING"), "campaign \"c\" is being restored; try again in a few seconds")
	err := answerControl(context.Background(), new(bytes.Buffer), "c", store.Campaign{ID: "c"}, nil, nil,
		func(context.Context, store.Campaign) (api.CampaignView, error) { return api.CampaignView{}, restoring })
	if err == nil || !strings.Contains(err.Error(), "was changed") || strings.Contains(err.Error(), "try again") {
		t.Errorf("a control done, its campaign unreadable: %v; want it said changed, not try again", err)
	}
}

// TestCancelBehindPrintsTally: a cancel whose Redis step failed has given its orders back all
// the same; the operator is shown what it released and refunded along with the error.
func TestCancelBehindPrintsTally(t *testing.T) {
	behind := events.Errorf(events.Unavailable, "campaign \"c\" was changed in the store, and its sale follows within seconds: nothing needs running again")
	var out bytes.Buffer
	tally := &compensator.Tally{Released: 2, Refunded: 3}
	err := answerControl(context.Background(), &out, "c", store.Campaign{ID: "c"}, tally, behind, viewOK)
	if !errors.Is(err, behind) {
		t.Errorf("cancel with its sale behind: %v, want its error", err)
	}
	if !strings.Contains(out.String(), `"released": 2`) || !strings.Contains(out.String(), `"refunded": 3`) {
		t.Errorf("cancel with its sale behind printed %q; want its tally", out.String())
	}
}

// TestCancelOfNoCampaignShowsNoProgress: cancel, like compensate --campaign, looks the campaign
// up before it draws its progress: it printed "cancel nosuch  0  0s" for a campaign that is not
// there, then failed.
func TestCancelOfNoCampaignShowsNoProgress(t *testing.T) {
	mr := miniredis.RunT(t)
	progress := captureStderr(t)
	var out bytes.Buffer
	code := run(context.Background(), []string{"campaign", "cancel", "--id", "nosuch", "--redis-url", "redis://" + mr.Addr() + "/0",
		"--postgres-url", migratedSQLite(t), "--kafka-brokers", freeAddr(t)}, &out, &out)
	shown := progress()
	if code != 1 || !strings.Contains(out.String(), "campaign_not_found") || strings.Contains(shown, "cancel nosuch") {
		t.Errorf("cancel of no campaign exited %d, %q; stderr %q: want exit 1, campaign_not_found and no progress", code, out.String(), shown)
	}
}

// TestBulkCompensateCutShortPrintsTally: seckill compensate --campaign stopped by a failure
// (here Kafka, which refuses every refund's announcement) has refunded orders all the same:
// like campaign cancel, it prints what it did along with the error. It printed only the error,
// and the operator could not tell whether anything had been refunded.
func TestBulkCompensateCutShortPrintsTally(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	storeURL := migratedSQLite(t)
	confirmedOrders(t, mr, storeURL, "cut", "ann", "bob", "cat")

	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"compensate", "--campaign", "cut", "--status", "confirmed", "--redis-url", "redis://" + mr.Addr() + "/0",
		"--postgres-url", storeURL, "--kafka-brokers", freeAddr(t)}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "did not reach Kafka") || !strings.Contains(stdout.String(), `"refunded": 3`) {
		t.Errorf("compensate --campaign whose announcements Kafka did not take: exit %d, stdout %q, stderr %q; want exit 1, the error, and the tally of 3 refunded",
			code, stdout.String(), stderr.String())
	}
}

// confirmedOrders creates campaign on sale in the store at storeURL and in the Redis of mr, and
// an order of one unit for each of users, confirmed in both as the consumer confirms it.
func confirmedOrders(t *testing.T, mr *miniredis.Miniredis, storeURL, campaign string, users ...string) []events.Event {
	t.Helper()
	ctx := context.Background()
	r := lua.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}))
	defer r.Close()
	st, err := store.Open(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	if err := st.CreateCampaign(ctx, store.Campaign{ID: campaign, Name: "c", Stock: 100, PerUserLimit: 1,
		StartsAtMs: now.Add(-time.Hour).UnixMilli(), CreatedAtMs: now.UnixMilli(), OnSale: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadCampaign(ctx, lua.Campaign{ID: campaign, Remaining: 100, Limit: 1, StartsAt: now.Add(-time.Hour), Stock: 100}); err != nil {
		t.Fatal(err)
	}
	var evs []events.Event
	for _, user := range users {
		id := events.NewOrderID(campaign)
		res, err := r.Reserve(ctx, campaign, id, user, 1, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: now.UTC(),
			OrderID: id, CampaignID: campaign, UserID: user, Quantity: 1, Deadline: res.Deadline})
	}
	if _, err := st.ConfirmOrders(ctx, evs); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if _, err := r.Confirm(ctx, ev.OrderID); err != nil {
			t.Fatal(err)
		}
	}
	return evs
}

// TestCompensateStoppedFinishesTheOrderInHand: seckill compensate --order given ^C while it
// resolves its order finishes it (refunded in the store, in Redis and on Kafka) and says so,
// exit 0. It cancelled the order in hand with the signal: a refund stored whose units Redis held
// until the sweeper, and an error that read as a Kafka outage ("its announcement did not reach
// Kafka ... interrupt signal received"), exit 1.
func TestCompensateStoppedFinishesTheOrderInHand(t *testing.T) {
	mr := miniredis.RunT(t)
	storeURL := migratedSQLite(t)
	ev := confirmedOrders(t, mr, storeURL, "stopped", "ann")[0]
	kafka := kafkatest.FakeCluster(t)
	topics := kafkatest.Topics(t, kafka.ListenAddrs())
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	kafka.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		stop() // the operator's ^C, as the refund's announcement goes out
		time.Sleep(100 * time.Millisecond)
		return nil, nil, false // then Kafka takes it
	})
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"compensate", "--order", ev.OrderID, "--redis-url", "redis://" + mr.Addr() + "/0",
		"--postgres-url", storeURL, "--kafka-brokers", strings.Join(kafka.ListenAddrs(), ","), "--topic-prefix", topics.Prefix}, &stdout, &stderr)
	if code != 0 || !strings.Contains(stdout.String(), `"status": "refunded"`) {
		t.Errorf("compensate --order stopped as its order's refund went out: exit %d, stdout %q, stderr %q; want exit 0 and the order refunded",
			code, stdout.String(), stderr.String())
	}
	r := lua.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}))
	defer r.Close()
	if res, err := r.Reservation(context.Background(), ev.OrderID); err != nil || res.State != lua.StateRefunded {
		t.Errorf("the order's reservation in Redis: %+v, %v; want it refunded, its unit back", res, err)
	}
}

// TestCancelStoppedSaysRunItAgain: campaign cancel given ^C part-way prints what it did and
// says to run it again, which finishes it. It said the campaign "may have been changed: read it
// before running this again (to put units on sale, use --to TOTAL …)", the answer to an
// add-stock whose store commit was cut off, not to a cancel, which is safe to run again.
func TestCancelStoppedSaysRunItAgain(t *testing.T) {
	mr := miniredis.RunT(t)
	storeURL := migratedSQLite(t)
	var users []string
	for i := range 30 {
		users = append(users, fmt.Sprint("u", i))
	}
	confirmedOrders(t, mr, storeURL, "halt", users...)
	kafka := kafkatest.FakeCluster(t)
	topics := kafkatest.Topics(t, kafka.ListenAddrs())
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	kafka.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		stop() // the operator's ^C, as the first refund's announcement goes out
		return nil, nil, false
	})
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"campaign", "cancel", "--id", "halt", "--redis-url", "redis://" + mr.Addr() + "/0",
		"--postgres-url", storeURL, "--kafka-brokers", strings.Join(kafka.ListenAddrs(), ","), "--topic-prefix", topics.Prefix}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "run it again") || strings.Contains(stderr.String(), "may have been changed") ||
		!strings.Contains(stdout.String(), `"refunded": 30`) {
		t.Errorf("campaign cancel stopped part-way: exit %d, stdout %q, stderr %q; want exit 1, its tally, and to run it again",
			code, stdout.String(), stderr.String())
	}
}
