package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/store/storetest"
)

// TestShowDeadLetterWithoutValue: a dead letter too large for the DLQ with its value (a garbled
// record near max.message.bytes) goes without it. dlq show must say so and where the original
// is, not print an empty value as if the event had been empty; dlq list calls it unreadable.
func TestShowDeadLetterWithoutValue(t *testing.T) {
	src := &kgo.Record{Topic: "shop.orders.requested", Partition: 2, Offset: 7, Key: []byte("camp/ann"), Value: bytes.Repeat([]byte("x"), 1_000_000)}
	l := readDeadLetter(events.WithoutValue(events.DeadLetter("shop.orders.dlq", src, events.ReasonPoison+": decode event: invalid character 'x'")))
	var out strings.Builder
	state, _ := orderState(context.Background(), fakeAwaited{}, l)
	l.print(&out, state)
	for _, want := range []string{
		"decode   no value: its 1000000 bytes were too large for the dead-letter topic and left out",
		"value    (left out: the original is at shop.orders.requested/2/7)",
		"now      unreadable: left to the sweeper",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dlq show of a dead letter without its value: want %q in\n%s", want, out.String())
		}
	}
}

// TestDLQReadsWhileRedisIsDown: list, show and stats read the dead-letter topic, and list and
// show the store; none reads Redis. An on-call engineer runs them in an incident, which may be
// Redis's: they must answer then, and stats even with the store down too. (They have no
// --redis-url, nor stats a --postgres-url, since they read neither; given one that is down,
// should one come back, they must not dial it.)
func TestDLQReadsWhileRedisIsDown(t *testing.T) {
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers)
	storeURL := storetest.SQLiteURL(t)
	storetest.MustOpen(t, storeURL)
	e := events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: time.Now().UTC(),
		OrderID: "camp.order1", CampaignID: "camp", UserID: "ann", Quantity: 1}
	src, err := events.Record(topics.Requested, e)
	if err != nil {
		t.Fatal(err)
	}
	cl := kafkatest.Client(t, brokers)
	letter := events.DeadLetter(topics.DLQ, src, events.ReasonStoreSoldOut)
	if err := cl.ProduceSync(context.Background(), letter).FirstErr(); err != nil {
		t.Fatal(err)
	}
	down := "redis://" + freeAddr(t) + "/0" // nothing listens there
	conn := []string{"--redis-url", down, "--kafka-brokers", strings.Join(brokers, ","), "--topic-prefix", topics.Prefix}
	for _, tc := range []struct {
		args     []string
		storeURL string
		want     string
	}{
		{[]string{"list"}, storeURL, "1 dead letters in " + topics.DLQ},
		{[]string{"show", positionOf(letter).String()}, storeURL, "reason   " + events.ReasonStoreSoldOut},
		{[]string{"stats"}, "postgres://seckill@" + freeAddr(t) + "/seckill", "1 dead letters in " + topics.DLQ},
	} {
		args := append([]string{"dlq"}, tc.args...)
		args = append(args, connFor(args, append(conn, "--postgres-url", tc.storeURL))...)
		var stdout, stderr strings.Builder
		if code := run(context.Background(), args, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), tc.want) {
			t.Errorf("%v with Redis down: exit %d, want 0 and %q in\n%s%s", tc.args, code, tc.want, stdout.String(), stderr.String())
		}
	}
}

// TestDLQStatsCountsPoisonAsOneReason: a poison dead letter's reason carries why its event
// could not be read, which names the event ("poison: event 06h…: quantity 0: …"). stats
// counted each such reason apart, one row per letter: a hundred poison letters were a hundred
// rows of 1. They are one reason, poison, as seckill_dlq_total counts them.
func TestDLQStatsCountsPoisonAsOneReason(t *testing.T) {
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers)
	cl := kafkatest.Client(t, brokers)
	var letters []*kgo.Record
	for _, reason := range []string{events.ReasonPoison + ": event 1: quantity 0: want 1 to 1099511627776",
		events.ReasonPoison + ": event 2: quantity -1: want 1 to 1099511627776", events.ReasonStoreSoldOut} {
		src := &kgo.Record{Topic: topics.Requested, Key: []byte("camp/ann"), Value: []byte("{}")}
		letters = append(letters, events.DeadLetter(topics.DLQ, src, reason))
	}
	if err := cl.ProduceSync(context.Background(), letters...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	code := run(context.Background(), []string{"dlq", "stats", "--kafka-brokers", strings.Join(brokers, ","), "--topic-prefix", topics.Prefix}, &stdout, &stderr)
	rows := map[string]string{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			rows[f[0]] = f[1]
		}
	}
	if code != 0 || len(rows) != 2 || rows[events.ReasonPoison] != "2" || rows[events.ReasonStoreSoldOut] != "1" {
		t.Errorf("dlq stats of two poison letters and one store_sold_out: exit %d, want rows poison 2 and store_sold_out 1:\n%s%s", code, stdout.String(), stderr.String())
	}
}

// TestDLQListSaysWhatTheCompensatorLeftOut: the compensator leaves out of the store the dead
// letter of an order Redis holds confirmed, refunded or expired that the store lost (restored
// from a backup without its campaign's row), and commits it. dlq list called every dead letter
// whose order the store lacks "not in the store yet (the compensator has not handled it)",
// which sent the operator waiting for a compensator that was done, instead of to its WARN and
// the replay. Past the compensator group's committed offset a letter is handled: its order is
// not in the store because the compensator left it out (or the store lost it since).
func TestDLQListSaysWhatTheCompensatorLeftOut(t *testing.T) {
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers)
	storeURL := storetest.SQLiteURL(t)
	storetest.MustOpen(t, storeURL)
	cl := kafkatest.Client(t, brokers)
	var letters []*kgo.Record
	for _, id := range []string{"camp.left-out", "camp.waiting"} {
		e := events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: time.Now().UTC(),
			OrderID: id, CampaignID: "camp", UserID: "ann", Quantity: 1}
		src, err := events.Record(topics.Requested, e)
		if err != nil {
			t.Fatal(err)
		}
		letters = append(letters, events.DeadLetter(topics.DLQ, src, string(events.CampaignNotFound)))
	}
	// One buyer's events, so one partition: the compensator has committed past the first only.
	if err := cl.ProduceSync(context.Background(), letters...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var done kadm.Offsets
	done.Add(kadm.Offset{Topic: topics.DLQ, Partition: letters[0].Partition, At: letters[0].Offset + 1, LeaderEpoch: -1})
	if _, err := kadm.NewClient(cl).CommitOffsets(context.Background(), topics.CompensatorGroup(), done); err != nil {
		t.Fatal(err)
	}

	args := []string{"dlq", "list"}
	args = append(args, connFor(args, []string{"--kafka-brokers", strings.Join(brokers, ","), "--topic-prefix", topics.Prefix, "--postgres-url", storeURL})...)
	var stdout, stderr strings.Builder
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("dlq list: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	for id, want := range map[string]string{
		"camp.left-out": "not in the store: the compensator left it out",
		"camp.waiting":  "not in the store yet (the compensator has not handled it)",
	} {
		var line string
		for _, l := range strings.Split(stdout.String(), "\n") {
			if strings.Contains(l, id) {
				line = l
			}
		}
		if !strings.Contains(line, want) {
			t.Errorf("dlq list: the line of %s is %q, want %q in it; listed\n%s", id, line, want, stdout.String())
		}
	}
}

// TestDLQFilteredSaysOfHowMany: with a filter, dlq list and stats ended "0 dead letters in
// seckill.orders.dlq" for a topic holding some, as if it were empty; and dlq show of a letter
// that is not there blamed the --campaign, --reason and --since given when none was.
func TestDLQFilteredSaysOfHowMany(t *testing.T) {
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers)
	src := &kgo.Record{Topic: topics.Requested, Key: []byte("camp/ann"), Value: []byte("{}")}
	letter := events.DeadLetter(topics.DLQ, src, events.ReasonStoreSoldOut)
	if err := kafkatest.Client(t, brokers).ProduceSync(context.Background(), letter).FirstErr(); err != nil {
		t.Fatal(err)
	}
	conn := []string{"--kafka-brokers", strings.Join(brokers, ","), "--topic-prefix", topics.Prefix}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stats"}, "1 dead letters in " + topics.DLQ + "\n"},
		{[]string{"stats", "--reason", "poison"}, "0 of the 1 dead letters in " + topics.DLQ + " match --reason poison\n"},
	} {
		var stdout, stderr strings.Builder
		if code := run(context.Background(), append(append([]string{"dlq"}, tc.args...), conn...), &stdout, &stderr); code != 0 || !strings.HasSuffix(stdout.String(), tc.want) {
			t.Errorf("dlq %v: exit %d, want 0 and output ending %q:\n%s%s", tc.args, code, tc.want, stdout.String(), stderr.String())
		}
	}
	storeURL := storetest.SQLiteURL(t)
	storetest.MustOpen(t, storeURL)
	var stdout, stderr strings.Builder
	code := run(context.Background(), append([]string{"dlq", "show", "0/99", "--postgres-url", storeURL}, conn...), &stdout, &stderr)
	if code != 1 || strings.Contains(stderr.String(), "--campaign") {
		t.Errorf("dlq show of no letter, no filter given: exit %d, want 1 and no filter named:\n%s", code, stderr.String())
	}
}

// TestDLQSaysAMalformedRecordLeftPending: the compensator commits past the dead letter of an
// order whose reservation record Redis cannot parse, leaving the order out of the store and
// pending in Redis for a person to mend (its ERROR says so). dlq list and show called it only
// left out as lost by the store, and sent the operator to seckill replay, which mends nothing.
func TestDLQSaysAMalformedRecordLeftPending(t *testing.T) {
	e := events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: time.Now().UTC(),
		OrderID: "camp.order1", CampaignID: "camp", UserID: "ann", Quantity: 1}
	src, err := events.Record("shop.orders.requested", e)
	if err != nil {
		t.Fatal(err)
	}
	l := readDeadLetter(events.DeadLetter("shop.orders.dlq", src, events.ReasonStoreSoldOut))
	l.resolved = true
	state, done := orderState(context.Background(), fakeAwaited{}, l)
	if !done || !strings.Contains(state, "malformed") || !strings.Contains(state, "seckill compensate --order") {
		t.Errorf("a handled dead letter whose order the store lacks: %q (done %v); want it to name a malformed record and what mends it", state, done)
	}
}

// TestShowDeadLetterEscapesControlCharacters: a dead letter quotes what a producer wrote (a
// poison reason names its event's fields; the key and value are the event's), and dlq show
// and list print it to an operator's terminal, where an escape sequence would clear the screen,
// retitle the window or hide a line. They print such text quoted, with Go's escapes.
func TestShowDeadLetterEscapesControlCharacters(t *testing.T) {
	src := &kgo.Record{Topic: "shop.orders.requested", Partition: 2, Offset: 7, Key: []byte("camp/\x1b[2J"), Value: []byte("{\"event_id\":\"\x1b]0;owned\x07\"}")}
	l := readDeadLetter(events.DeadLetter("shop.orders.dlq", src, events.ReasonPoison+": event \"\x1b]0;owned\x07\": bad"))
	var out strings.Builder
	state, _ := orderState(context.Background(), fakeAwaited{}, l)
	l.print(&out, state)
	if strings.ContainsAny(out.String(), "\x1b\x07") {
		t.Errorf("dlq show printed a dead letter's control characters raw:\n%q", out.String())
	}
	for _, want := range []string{`key      "camp/\x1b[2J"`, `\x1b]0;owned\a`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dlq show: want %s in\n%s", want, out.String())
		}
	}
}

// TestDLQRedriveSaysOfHowMany: dlq redrive ends, as list and stats do, with how many dead
// letters there are and how many its filters matched. It said only "nothing to send, 0
// skipped": a redrive of an empty topic, of the wrong --topic-prefix's, or whose --campaign
// was mistyped read like one with nothing left to redrive.
func TestDLQRedriveSaysOfHowMany(t *testing.T) {
	brokers := kafkatest.Fake(t)
	topics := kafkatest.Topics(t, brokers)
	mr := miniredis.RunT(t)
	conn := []string{"--kafka-brokers", strings.Join(brokers, ","), "--topic-prefix", topics.Prefix,
		"--redis-url", "redis://" + mr.Addr() + "/0", "--postgres-url", migratedSQLite(t)}
	redrive := func(args ...string) string {
		t.Helper()
		var stdout, stderr strings.Builder
		if code := run(context.Background(), append(append([]string{"dlq", "redrive"}, args...), conn...), &stdout, &stderr); code != 0 {
			t.Fatalf("dlq redrive %v: exit %d\n%s%s", args, code, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	if out, want := redrive(), "0 dead letters in "+topics.DLQ+"\n"; !strings.HasSuffix(out, want) {
		t.Errorf("dlq redrive of an empty topic printed %q; want it to end %q", out, want)
	}
	src := &kgo.Record{Topic: topics.Requested, Key: []byte("camp/ann"), Value: []byte("{}")}
	letter := events.DeadLetter(topics.DLQ, src, events.ReasonStoreSoldOut)
	if err := kafkatest.Client(t, brokers).ProduceSync(context.Background(), letter).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if out, want := redrive("--dry-run", "--campaign", "cmap"), "0 of the 1 dead letters in "+topics.DLQ+" match --campaign cmap\n"; !strings.HasSuffix(out, want) {
		t.Errorf("dlq redrive --campaign cmap printed %q; want it to end %q", out, want)
	}
}
