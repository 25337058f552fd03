package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/bench"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// HeaderRedrivenFrom marks a redriven event with the dead letter it came from.
const HeaderRedrivenFrom = "seckill-redriven-from"

// position is a record's place in a topic, written PARTITION/OFFSET as dlq list prints it.
type position struct {
	partition int32
	offset    int64
}

func parsePosition(s string) (position, error) {
	p, o, ok := strings.Cut(s, "/")
	pn, err1 := strconv.ParseInt(p, 10, 32)
	on, err2 := strconv.ParseInt(o, 10, 64)
	if !ok || errors.Join(err1, err2) != nil || pn < 0 || on < 0 {
		return position{}, fmt.Errorf("%q: want PARTITION/OFFSET, as dlq list prints it", s)
	}
	return position{int32(pn), on}, nil
}

func (p position) String() string { return fmt.Sprintf("%d/%d", p.partition, p.offset) }

func positionOf(r *kgo.Record) position { return position{r.Partition, r.Offset} }

// readFix reads --file, the corrected event of the dead letter at.
func readFix(file string) (events.Event, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return events.Event{}, err
	}
	e, err := events.Decode(b)
	if err != nil {
		return e, fmt.Errorf("--file %s is still not an event this seckill reads: %v", file, err)
	}
	if e.Type != events.OrderRequested {
		return e, fmt.Errorf("--file %s is an %s event: only OrderRequested events go to the consumer", file, e.Type)
	}
	return e, nil
}

// awaited is what redrive reads to tell whether an event is still waited for: the order in the
// store, the reservation in Redis.
type awaited interface {
	orders
	Reservation(ctx context.Context, orderID string) (lua.Reservation, error)
	Sale(ctx context.Context, campaign string) (lua.Sale, error)
}

// redriveSources joins the two stores behind awaited.
type redriveSources struct {
	*store.Store
	*lua.Redis
}

// planRedrive picks, among the selected dead letters, the events to send back to the requested
// topic, and prints one line for each it sends or skips.
//
// A dead letter the compensator could not read is one the consumer could not read either: its
// reason is poison (the compensator decodes with the same code, and any readable one it failed
// in the store). Of those, an event is sent when it reads now (after an upgrade, or in its
// corrected form from fix) and is still awaited: its reservation pending in Redis for the same
// buyer and quantity, before its deadline, in a campaign not frozen for a rebuild, and no order
// in the store. Whatever has moved on
// (confirmed, failed by the sweeper, sent by an earlier redrive and persisted) is skipped; an
// event sent twice anyway is one order, as the consumer keys on its order id.
func planRedrive(ctx context.Context, src awaited, requested string, letters []deadLetter, fix *events.Event, out io.Writer) (send []*kgo.Record, skipped int, err error) {
	skip := func(l deadLetter, why string) {
		skipped++
		fmt.Fprintf(out, "skip  %s  %s\n", positionOf(l.rec), printable(why))
	}
	notPoison := 0
	sent := map[string]position{} // order id -> the dead letter it is sent from
	frozen := map[string]bool{}   // campaign -> frozen for a rebuild, read once per plan
	for _, l := range letters {
		at := positionOf(l.rec)
		if !strings.HasPrefix(l.reason, events.ReasonPoison) {
			if len(letters) == 1 { // the one --at names: say why nothing happens
				if state, done := orderState(ctx, src, l); done {
					skip(l, "the compensator handled it ("+l.reason+"): order "+state)
				} else {
					skip(l, "not poison ("+l.reason+"): left to the compensator: order "+state)
				}
			}
			notPoison++
			continue
		}
		if n := events.ValueOmitted(l.rec); n > 0 && fix == nil {
			// Nothing here to decode or send: say where the event is, not only that it is unreadable.
			skip(l, fmt.Sprintf("its value (%d bytes) was too large for the dead-letter topic and left out; the original is at %s (send a corrected event with --at %s --file F)", n, l.source, at))
			continue
		}
		e, err := events.Decode(l.rec.Value)
		if fix != nil {
			e, err = *fix, nil
			if !bytes.Equal(events.Key(e), l.rec.Key) {
				skip(l, fmt.Sprintf("the corrected event is keyed %s, the dead letter %s: it is another buyer's order", events.Key(e), l.rec.Key))
				continue
			}
			// A letter that reads names its order: a correction naming another (the same
			// buyer's next order, pasted by mistake) would leave this one unsent.
			if l.orderID != "" && e.OrderID != l.orderID {
				skip(l, "the corrected event is order "+e.OrderID+", the dead letter's "+l.orderID)
				continue
			}
		}
		switch {
		case err != nil:
			skip(l, "still unreadable: "+err.Error()+" (correct it with --at "+at.String()+" --file F)")
			continue
		case e.Type != events.OrderRequested:
			skip(l, "an "+string(e.Type)+" event: only OrderRequested events go to the consumer")
			continue
		case events.Header(l.rec, events.HeaderSourceTopic) != requested:
			skip(l, "it came from "+events.Header(l.rec, events.HeaderSourceTopic)+", not "+requested)
			continue
		}
		o, err := src.Order(ctx, e.OrderID)
		switch {
		case err == nil:
			skip(l, "order "+e.OrderID+" is in the store already: "+string(o.Status))
			continue
		case events.ErrorCode(err) != events.OrderNotFound:
			return nil, 0, err
		}
		res, err := src.Reservation(ctx, e.OrderID)
		switch {
		case errors.Is(err, lua.ErrNoReservation):
			skip(l, "Redis holds no reservation "+e.OrderID+": nothing waits for this event")
			continue
		case err != nil:
			return nil, 0, err
		case res.State != lua.StatePending:
			skip(l, "reservation "+e.OrderID+" is "+res.State)
			continue
		case res.User != e.UserID || res.Quantity != e.Quantity:
			skip(l, fmt.Sprintf("the event is %s buying %d, reservation %s is %s buying %d", e.UserID, e.Quantity, e.OrderID, res.User, res.Quantity))
			continue
		case time.Now().After(res.Deadline):
			skip(l, "reservation "+e.OrderID+" is past its deadline: the sweeper fails the order")
			continue
		}
		// A frozen campaign is being rebuilt from the store once the consumer has stored every
		// event sent before the rebuild began, and the rebuild gives back the units of the
		// reservations still pending, this one's too. Sent now, the event would come after
		// those the rebuild waits for, and the consumer would confirm an order whose units the
		// rebuilt sale sells again.
		isFrozen, read := frozen[res.Campaign]
		if !read {
			sale, err := src.Sale(ctx, res.Campaign)
			if err != nil {
				return nil, 0, err
			}
			isFrozen, frozen[res.Campaign] = sale.Frozen, sale.Frozen
		}
		if isFrozen {
			skip(l, "campaign "+res.Campaign+" is being rebuilt from the store after Redis lost data: "+
				"the rebuild gives back its pending reservations, "+e.OrderID+"'s too, so nothing will wait for this event")
			continue
		}
		// A poison event is dead-lettered again when its batch is redelivered (and was when replayed,
		// before replay stopped dead-lettering).
		if from, ok := sent[e.OrderID]; ok {
			skip(l, "order "+e.OrderID+" is sent from "+from.String()+" already")
			continue
		}
		sent[e.OrderID] = at
		rec, err := events.Record(requested, e)
		if err != nil {
			return nil, 0, err
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderRedrivenFrom, Value: []byte(at.String())})
		send = append(send, rec)
		fmt.Fprintf(out, "send  %s  order %s of %s, %d units, to %s\n", at, e.OrderID, e.CampaignID, e.Quantity, requested)
	}
	if notPoison > 0 && len(letters) > 1 {
		// Not read one by one, so not called handled: some may still wait for the compensator.
		fmt.Fprintf(out, "%d dead letters that are not poison are left to the compensator (dlq list says what became of each)\n", notPoison)
	}
	return send, skipped, nil
}

// redrive sends the planned events back to the requested topic, with progress on stderr.
func redrive(ctx context.Context, c conn, src awaited, letters []deadLetter, fix *events.Event, dryRun bool, out io.Writer) error {
	requested := c.topics().Requested
	send, skipped, err := planRedrive(ctx, src, requested, letters, fix, out)
	if err != nil {
		return err
	}
	if dryRun {
		fmt.Fprintf(out, "dry run: %d would be sent, %d skipped; nothing was sent\n", len(send), skipped)
		return nil
	}
	if len(send) == 0 {
		fmt.Fprintf(out, "nothing to send, %d skipped\n", skipped)
		return nil
	}
	cl, err := events.NewClient(c.brokerList())
	if err != nil {
		return err
	}
	defer events.FlushAndClose(cl)
	update, stop := bench.NewProgress(os.Stderr).Track("redrive")
	defer stop()
	for i := 0; i < len(send); i += 500 {
		batch := send[i:min(i+500, len(send))]
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			return fmt.Errorf("redrive: %d of %d sent, then: %w (run it again: what was persisted is skipped)", i, len(send), err)
		}
		update(i+len(batch), len(send))
	}
	fmt.Fprintf(out, "sent %d to %s, %d skipped\n", len(send), requested, skipped)
	return nil
}
