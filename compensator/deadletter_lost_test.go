package compensator_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/consumer"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
)

// TestDeadLetterOfAnOrderTheStoreLost: the consumer confirmed Ann's order in the store and in
// Redis (and, in some cases, it was refunded or expired since, in both), then the store was
// restored from a backup taken before her campaign was created, and her event came again (the
// consumer died before committing its offset): the store refused it campaign_not_found and the
// consumer dead-lettered it. The compensator leaves it out of the store, with Redis's
// reservation as it ended and its unit sold or given back, and says so; once the operator has
// put the campaign's row back, a replay stores it as Redis ended it and the audit finds every
// invariant held. Before, the compensator stored it failed and announced OrderFailed to a
// buyer told confirmed (or refunded), while the release, which gives back pending reservations
// only, left it as it was in Redis: the order ended twice, and the failed row, final, kept the
// replay from storing it as it ended.
func TestDeadLetterOfAnOrderTheStoreLost(t *testing.T) {
	for _, tc := range []struct {
		state  string                                                         // Redis's, at the dead letter
		end    func(*lua.Redis, context.Context, string) (lua.Outcome, error) // how it got there from confirmed
		stored events.Status                                                  // what the replay stores
	}{
		{lua.StateConfirmed, nil, events.Confirmed},
		{lua.StateRefunded, (*lua.Redis).Refund, events.Refunded},
		{lua.StateExpired, (*lua.Redis).Expire, events.Expired},
	} {
		t.Run(tc.state, func(t *testing.T) {
			e := newEnv(t, 10, 5)
			camp, err := e.st.Campaign(e.ctx, e.campaign)
			if err != nil {
				t.Fatal(err)
			}
			ann := e.reserve(t, 1, time.Hour)[0]
			cl, err := events.NewClient(e.brokers)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			src, err := events.Record(e.topics.Requested, ann)
			if err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(e.ctx, src).FirstErr(); err != nil { // the api's produce
				t.Fatal(err)
			}
			e.confirm(t, []events.Event{ann})
			remaining := e.stock - int64(ann.Quantity)
			if tc.end != nil {
				// Only Redis's half: the restore below drops the store's anyway.
				if _, err := tc.end(e.r, e.ctx, ann.OrderID); err != nil {
					t.Fatal(err)
				}
				remaining = e.stock
			}
			e.sql(t, `DELETE FROM orders WHERE campaign_id = ?`, e.campaign)
			e.sql(t, `DELETE FROM purchases WHERE campaign_id = ?`, e.campaign)
			e.sql(t, `DELETE FROM campaigns WHERE id = ?`, e.campaign)
			if err := cl.ProduceSync(e.ctx, events.DeadLetter(e.topics.DLQ, src, string(events.CampaignNotFound))).FirstErr(); err != nil {
				t.Fatal(err)
			}

			logs := e.resolveDeadLetters(t, cl)

			if o, err := e.st.Order(e.ctx, ann.OrderID); events.ErrorCode(err) != events.OrderNotFound {
				t.Errorf("the dead letter of an order the store lost: the store has it %q (%q) %v, want none", o.Status, o.Reason, err)
			}
			e.wantRedis(t, ann, tc.state, remaining)
			if got := e.announced(t)[ann.OrderID]; len(got) != 0 {
				t.Errorf("announced %v, want nothing", got)
			}
			if !strings.Contains(logs, `"level":"WARN"`) || !strings.Contains(logs, ann.OrderID) || !strings.Contains(logs, "seckill replay") {
				t.Errorf("no warning naming %s and the replay:\n%s", ann.OrderID, logs)
			}
			// It says where the dead letter is, for dlq show, naming each key once.
			for _, line := range strings.Split(logs, "\n") {
				if !strings.Contains(line, ann.OrderID) || !strings.Contains(line, `"level":"WARN"`) {
					continue
				}
				if k, err := duplicateKey([]byte(line)); err != nil || k != "" || !strings.Contains(line, `"topic":"`+e.topics.DLQ+`","partition":`) {
					t.Errorf("logged %s (duplicate key %q, %v): want it to name the topic %s and the partition once", line, k, err, e.topics.DLQ)
				}
			}

			// The operator puts the campaign's row back and replays.
			camp.Sold = 0
			if err := e.st.CreateCampaign(e.ctx, camp); err != nil {
				t.Fatal(err)
			}
			stats, err := consumer.Replay(e.ctx, consumer.Config{Brokers: e.brokers, Topics: e.topics}, consumer.From{}, e.st, e.r, io.Discard)
			if err != nil || stats.Events != 1 || stats.Refused != 0 {
				t.Fatalf("replay: %+v %v, want 1 event, none refused", stats, err)
			}
			if states := e.check(t, []events.Event{ann}); states[tc.stored] != 1 {
				t.Errorf("after the replay: %v, want ann's order %s", states, tc.stored)
			}
			if rep, text := e.audit(t); !rep.OK() {
				t.Errorf("audit after the replay:\n%s", text)
			}
		})
	}
}

// resolveDeadLetters runs a compensator until it has resolved every dead letter on the DLQ
// (its group's lag is 0), stops and closes it (which delivers its announcements), and returns
// what it logged, as JSON lines. A minute is a hang guard, whose failure shows the log too.
func (e *env) resolveDeadLetters(t *testing.T, cl *kgo.Client) string {
	t.Helper()
	var logs bytes.Buffer // read only once the compensator has stopped
	c := e.compensator(t, compensator.Config{GuardInterval: time.Hour, SweepInterval: time.Hour,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		lag, err := events.Lag(e.ctx, kadm.NewClient(cl), e.topics.DLQ, e.topics.CompensatorGroup())
		if err == nil && lag == 0 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("the dead letters are not resolved after a minute: lag %d, %v; logged:\n%s", lag, err, logs.String())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	c.Close()
	return logs.String()
}
