package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
)

// runDLQ reads the dead-letter topic: what landed there, why, and what became of each order.
func runDLQ(ctx context.Context, args []string, stdout io.Writer) error {
	const help = "Usage: seckill dlq list|show|stats|redrive [flags]\n\n" +
		"  list     one line per dead letter: where it came from, why, and the order's state now\n" +
		"  show     one dead letter whole (seckill dlq show PARTITION/OFFSET)\n" +
		"  stats    dead letters by reason\n" +
		"  redrive  send the dead letters the compensator could not read back to the consumer, once\n" +
		"           they can be read (after an upgrade, or with --at P/O --file F): --dry-run first\n" +
		"\nseckill dlq <subcommand> --help lists its flags.\n"
	switch {
	case len(args) == 0:
		return usagef("%s", help)
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		fmt.Fprint(stdout, help)
		return nil
	}
	verb := args[0]
	if verb != "list" && verb != "show" && verb != "stats" && verb != "redrive" {
		return usagef("dlq: unknown subcommand %q\n\n%s", verb, help)
	}
	f := newFlags("dlq "+verb, map[string]string{
		"list":  "List the dead letters, one line each: where it came from, why, and the order's state now.",
		"show":  "Print one dead letter whole: its headers and its value.\nArguments: PARTITION/OFFSET, as dlq list prints it.",
		"stats": "Count the dead letters by reason.",
		"redrive": "Send the dead letters the compensator could not read (reason poison) back to the\n" +
			"requested topic, once they read: after an upgrade to a seckill that knows them, or with\n" +
			"--at P/O --file F, the corrected event of one (same buyer and quantity; resending the\n" +
			"same bytes mends nothing). An event goes only while its reservation waits for it:\n" +
			"pending in Redis, before its deadline (when the sweeper fails the order), and no order\n" +
			"in the store; so a redrive run again once the consumer has stored what the first sent\n" +
			"sends none of it again, and one run before that is harmless: the consumer keys on the\n" +
			"order id. Dead letters that are not poison stay: they are the compensator's.",
	}[verb], stdout)
	if verb == "show" {
		f.positional = "PARTITION/OFFSET"
	}
	// Each verb reaches only what it reads, and has only those flags: list, show and stats are
	// what on-call runs in an incident, which may be Redis's (stats reads neither Redis nor the
	// store).
	reach := usesKafka
	switch verb {
	case "redrive":
		reach |= usesStore | usesRedis
	case "list", "show":
		reach |= usesStore
	}
	c := f.conn(reach)
	campaign := f.campaignID("campaign", "only the dead letters of this campaign")
	reason := f.String("reason", "", "only the dead letters whose reason starts with this")
	since := f.String("since", "", "only the dead letters written since: an RFC 3339 time, or a duration ago (1h)")
	var dryRun *bool
	var fixAt, fixFile *string
	if verb == "redrive" {
		dryRun = f.Bool("dry-run", false, "print what would be sent, and send nothing")
		fixAt = f.String("at", "", "only the dead letter at PARTITION/OFFSET, as dlq list prints it")
		fixFile = f.String("file", "", "with --at: its corrected OrderRequested event (JSON)")
	}
	rest := args[1:]
	var pos []string // show's PARTITION/OFFSET, before or after the flags
	if verb == "show" && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		pos, rest = rest[:1], rest[1:]
	}
	var (
		after time.Time
		one   *position // the dead letter to show, or the one to redrive
		fix   *events.Event
	)
	// In parse, before --dev reads the dev's file: a bad value is told first.
	f.after = append(f.after, func() error {
		pos = append(pos, f.Args()...)
		if *since != "" {
			if d, err := time.ParseDuration(*since); err == nil && d < 0 {
				return usagef("dlq: --since %s: want a duration ago of 0 or more", *since)
			} else if err == nil {
				after = time.Now().Add(-d)
			} else if after, err = time.Parse(time.RFC3339, *since); err != nil {
				return usagef("dlq: --since %q is neither an RFC 3339 time nor a duration", *since)
			}
		}
		if verb == "show" || verb == "redrive" && *fixAt != "" {
			arg := strings.Join(pos, "")
			if verb == "redrive" {
				arg = *fixAt
			}
			p, err := parsePosition(arg)
			if err != nil || verb == "show" && len(pos) != 1 {
				return usagef("dlq %s: name one dead letter as PARTITION/OFFSET (dlq list prints them)", verb)
			}
			one = &p
		}
		if verb == "redrive" && *fixFile != "" {
			if one == nil {
				return usagef("dlq redrive: --file corrects one dead letter: name it with --at PARTITION/OFFSET")
			}
			e, err := readFix(*fixFile)
			if err != nil {
				return usagef("dlq redrive: %v", err)
			}
			fix = &e
		}
		return nil
	})
	if err := f.parse(rest); err != nil {
		return err
	}
	var (
		d   deps
		err error
	)
	switch {
	case reach&usesRedis != 0:
		d, err = c.open(ctx)
	case reach&usesStore != 0:
		d.store, err = c.openStore(ctx)
	}
	if err != nil {
		return err
	}
	defer d.close()
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var resolved kadm.OffsetResponses
	if verb != "stats" {
		// Before the store is read: a letter found resolved was resolved before its order is
		// read, so an order missing then is one the compensator left out.
		if resolved, err = compensatorCommitted(rctx, c); err != nil {
			return err
		}
	}
	recs, err := events.ReadTopic(rctx, c.brokerList(), c.topics().DLQ)
	if err != nil {
		return err
	}
	var letters []deadLetter
	for _, r := range recs {
		l := readDeadLetter(r)
		if o, ok := resolved.Lookup(r.Topic, r.Partition); ok && o.Err == nil && r.Offset < o.At {
			l.resolved = true
		}
		switch {
		case *campaign != "" && l.campaign != *campaign,
			*reason != "" && !strings.HasPrefix(l.reason, *reason),
			!after.IsZero() && r.Timestamp.Before(after),
			one != nil && positionOf(r) != *one:
			continue
		}
		letters = append(letters, l)
	}
	// The filters given, to name beside a count or a letter not found: a filtered count alone
	// read as the topic's, and an empty one as an empty topic.
	var filters []string
	for _, fl := range []struct{ name, value string }{{"campaign", *campaign}, {"reason", *reason}, {"since", *since}} {
		if fl.value != "" {
			filters = append(filters, "--"+fl.name+" "+fl.value)
		}
	}
	given := strings.Join(filters, " ")
	count := fmt.Sprintf("%d dead letters in %s", len(letters), c.topics().DLQ)
	if one != nil && len(letters) == 0 {
		if given != "" {
			return fmt.Errorf("no dead letter at %s in %s matching %s", one, c.topics().DLQ, given)
		}
		return fmt.Errorf("no dead letter at %s in %s", one, c.topics().DLQ)
	}
	if given != "" {
		count = fmt.Sprintf("%d of the %d dead letters in %s match %s", len(letters), len(recs), c.topics().DLQ, given)
	}
	switch verb {
	case "redrive":
		if err := redrive(ctx, c, redriveSources{d.store, d.redis}, letters, fix, *dryRun, stdout); err != nil {
			return err
		}
		if one == nil { // --at names its letter, found or refused above
			fmt.Fprintln(stdout, count)
		}
	case "stats":
		byReason := map[string]int{}
		for _, l := range letters {
			byReason[events.ReasonKind(l.reason)]++
		}
		reasons := make([]string, 0, len(byReason))
		for r := range byReason {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "reason\tdead letters")
		for _, r := range reasons {
			fmt.Fprintf(tw, "%s\t%d\n", printable(r), byReason[r])
		}
		tw.Flush()
		fmt.Fprintln(stdout, count)
	case "show":
		state, _ := orderState(ctx, d.store, letters[0])
		letters[0].print(stdout, state)
	default:
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "at\twritten\treason\tsource\torder\tnow")
		for _, l := range letters {
			state, _ := orderState(ctx, d.store, l)
			fmt.Fprintf(tw, "%d/%d\t%s\t%s\t%s\t%s\t%s\n", l.rec.Partition, l.rec.Offset, l.rec.Timestamp.UTC().Format(time.RFC3339),
				printable(l.reason), printable(l.source), printable(orDash(l.orderID)), printable(state))
		}
		tw.Flush()
		fmt.Fprintln(stdout, count)
	}
	return nil
}

// deadLetter is one record of the dead-letter topic, as far as it can be read.
type deadLetter struct {
	rec               *kgo.Record
	reason, source    string
	orderID, campaign string // "" when the event cannot be decoded
	decodeErr         error
	// resolved: the compensator's group has committed past it, so the compensator is done
	// with it. Not known to stats, which reads nothing else.
	resolved bool
}

// compensatorCommitted returns where the compensator's group has committed the dead-letter
// topic, per partition: one admin request, where the compensator's own reading of Redis would
// need a Redis connection that list and show do without.
func compensatorCommitted(ctx context.Context, c conn) (kadm.OffsetResponses, error) {
	cl, err := events.NewClient(c.brokerList())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return events.CommittedOffsets(ctx, kadm.NewClient(cl), c.topics().CompensatorGroup())
}

func readDeadLetter(r *kgo.Record) deadLetter {
	l := deadLetter{rec: r, reason: events.Header(r, events.HeaderReason),
		source: events.Header(r, events.HeaderSourceTopic) + "/" + events.Header(r, events.HeaderSourcePartition) + "/" + events.Header(r, events.HeaderSourceOffset)}
	e, err := events.Decode(r.Value)
	if n := events.ValueOmitted(r); n > 0 {
		err = fmt.Errorf("no value: its %d bytes were too large for the dead-letter topic and left out", n)
	}
	if err != nil {
		l.decodeErr = err
		l.campaign, _ = events.KeyCampaign(r.Key) // so that --campaign finds it too
		return l
	}
	l.orderID, l.campaign = e.OrderID, e.CampaignID
	return l
}

// orders is the store as the dlq commands read it.
type orders interface {
	Order(ctx context.Context, id string) (store.Order, error)
}

// orderState says what the compensator did with a dead letter: the order's state in the store,
// and whether the compensator is done with it. list, show and redrive all decide it here, so that
// none says the compensator handled a letter another says it has not: done is an order in the
// store (which the compensator writes before it commits), or one its group has committed past.
func orderState(ctx context.Context, st orders, l deadLetter) (state string, done bool) {
	if l.orderID == "" {
		return "unreadable: left to the sweeper (see dlq redrive)", l.resolved
	}
	o, err := st.Order(ctx, l.orderID)
	switch {
	case events.ErrorCode(err) == events.OrderNotFound && strings.HasPrefix(l.reason, events.ReasonPoison):
		// It reads now, but the compensator, like the consumer, could not read it then.
		return "not in the store: unreadable when it came (see dlq redrive)", l.resolved
	case events.ErrorCode(err) == events.OrderNotFound && l.resolved:
		// The compensator fails a dead-lettered order in the store, unless Redis holds it
		// confirmed, refunded or expired and the store lost it (a restore): that one it leaves
		// out, with a WARN; or Redis holds its record malformed: that one it leaves pending, with
		// an ERROR, for a person to mend. The store may also have lost a failed row since.
		return "not in the store: the compensator left it out (confirmed, refunded or expired in Redis, lost by the store: " +
			"see its WARN; put back what the store refused it for, then run seckill replay), or left it pending as its " +
			"reservation record in Redis is malformed (see its ERROR; mend the record, then run seckill compensate --order), " +
			"or the store lost it since", true
	case events.ErrorCode(err) == events.OrderNotFound:
		return "not in the store yet (the compensator has not handled it)", false
	case err != nil:
		return "cannot tell: " + err.Error(), l.resolved
	case o.Reason != "":
		return string(o.Status) + " (" + o.Reason + ")", true
	}
	return string(o.Status), true
}

func (l deadLetter) print(w io.Writer, state string) {
	fmt.Fprintf(w, "at       %d/%d\nwritten  %s\nreason   %s\nsource   %s\norder    %s\nnow      %s\n",
		l.rec.Partition, l.rec.Offset, l.rec.Timestamp.UTC().Format(time.RFC3339Nano), printable(l.reason), printable(l.source), printable(orDash(l.orderID)), printable(state))
	if l.decodeErr != nil {
		fmt.Fprintf(w, "decode   %s\n", printable(l.decodeErr.Error()))
	}
	value := printable(string(l.rec.Value))
	if events.ValueOmitted(l.rec) > 0 {
		value = "(left out: the original is at " + printable(l.source) + ")"
	}
	fmt.Fprintf(w, "key      %s\nvalue    %s\n", printable(string(l.rec.Key)), value)
}

// printable returns s as it is when it is UTF-8 that prints, else quoted with Go's escapes. A
// dead letter quotes what a producer wrote (its key and value, and a poison reason names the
// event's fields), and an escape sequence printed raw would drive the operator's terminal:
// clear it, retitle it, hide a line.
func printable(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsGraphic(r) }) < 0 {
		return s
	}
	return strconv.QuoteToGraphic(s)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
