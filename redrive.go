package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seckill/seckill/bench"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
)

// HeaderRedrivenFrom marks a redriven event with the dead letter it came from.
const HeaderRedrivenFrom = "seckill-redriven-from"

// redriveFix is an operator's corrected event for one dead letter.
type redriveFix struct {
	partition int32
	offset    int64
	event     events.Event
}

// readFix reads --at and --file: both or neither.
func readFix(at, file string) (*redriveFix, error) {
	if at == "" || file == "" {
		return nil, errors.New("--at and --file go together: the dead letter, and its corrected event")
	}
	p, o, ok := strings.Cut(at, "/")
	pn, err1 := strconv.ParseInt(p, 10, 32)
	on, err2 := strconv.ParseInt(o, 10, 64)
	if !ok || errors.Join(err1, err2) != nil {
		return nil, fmt.Errorf("--at %q: want PARTITION/OFFSET, as dlq list prints it", at)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	e, err := events.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("--file %s is still not an event this seckill reads: %v", file, err)
	}
	if e.Type != events.OrderRequested {
		return nil, fmt.Errorf("--file %s is an %s event: only OrderRequested events go to the consumer", file, e.Type)
	}
	return &redriveFix{partition: int32(pn), offset: on, event: e}, nil
}

// redrive sends back to the requested topic each unreadable dead letter that now reads (or that
// fix corrects) and whose order the store does not have yet.
func redrive(ctx context.Context, c conn, st *store.Store, letters []deadLetter, fix *redriveFix, dryRun bool, out io.Writer) error {
	requested := c.topics().Requested
	var send []*kgo.Record
	skipped := 0
	skip := func(l deadLetter, why string) {
		skipped++
		fmt.Fprintf(out, "skip  %d/%d  %s\n", l.rec.Partition, l.rec.Offset, why)
	}
	fixed := false
	for _, l := range letters {
		at := fmt.Sprintf("%d/%d", l.rec.Partition, l.rec.Offset)
		if l.decodeErr == nil {
			continue // the compensator handled it: its order is failed and its units are back
		}
		e, err := events.Decode(l.rec.Value)
		if fix != nil && fix.partition == l.rec.Partition && fix.offset == l.rec.Offset {
			e, err, fixed = fix.event, nil, true
		}
		switch {
		case err != nil:
			skip(l, "still unreadable: "+err.Error()+" (correct it with --at "+at+" --file F)")
			continue
		case events.Header(l.rec, events.HeaderSourceTopic) != requested:
			skip(l, "it came from "+events.Header(l.rec, events.HeaderSourceTopic)+", not "+requested)
			continue
		}
		o, err := st.Order(ctx, e.OrderID)
		switch {
		case err == nil:
			skip(l, "order "+e.OrderID+" is in the store already: "+string(o.Status))
			continue
		case events.ErrorCode(err) != events.OrderNotFound:
			return err
		}
		rec, err := events.Record(requested, e)
		if err != nil {
			return err
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderRedrivenFrom, Value: []byte(at)})
		send = append(send, rec)
		fmt.Fprintf(out, "send  %s  order %s of %s, %d units, to %s\n", at, e.OrderID, e.CampaignID, e.Quantity, requested)
	}
	if fix != nil && !fixed {
		return fmt.Errorf("no unreadable dead letter at %d/%d to correct", fix.partition, fix.offset)
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
	defer closeProducer(cl)
	update, stop := bench.NewProgress(os.Stderr).Track("redrive")
	defer stop()
	for i := 0; i < len(send); i += 500 {
		batch := send[i:min(i+500, len(send))]
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			return fmt.Errorf("redrive: %d of %d sent, then: %w (run it again: what was sent is skipped)", i, len(send), err)
		}
		update(i+len(batch), len(send))
	}
	fmt.Fprintf(out, "sent %d to %s, %d skipped\n", len(send), requested, skipped)
	return nil
}
