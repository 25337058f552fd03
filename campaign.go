package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/bench"
	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
)

const campaignUsage = `Usage: seckill campaign <action> --id ID [flags]   (seckill campaign <action> --help)

An operator's controls of a live campaign, as the admin endpoints and the console do them.
The store changes first; Redis follows at once (or within a sweep); each prints the campaign.

  close       end the sale now (purchases are refused as ended at every api)
  extend      move the end later: --ends-at 2026-12-01T20:00:00Z or --ends-at +30m
  add-stock   put more units on sale: --add N, or --to TOTAL (safe to run again)
  cancel      close for good, release every pending reservation, refund every confirmed
              and paid order (with progress); run again, it finishes what was left
`

// campaignActions are the summaries of the campaign command's actions.
var campaignActions = map[string]string{
	"close":     "End a campaign's sale now. Closing an ended campaign changes nothing.",
	"extend":    "Move a campaign's end to a later time; a closed campaign is on sale again until then.",
	"add-stock": "Put more units of a campaign on sale: the store's stock and Redis's remaining grow together.",
	"cancel":    "Cancel a campaign: close it for good, release every pending reservation and refund\nevery confirmed and paid order. Idempotent: run again, it finishes what was left.",
}

func runCampaign(ctx context.Context, args []string, stdout io.Writer) error {
	switch {
	case len(args) == 0:
		return usagef("%s", campaignUsage)
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		fmt.Fprint(stdout, campaignUsage)
		return nil
	}
	action := args[0]
	summary, ok := campaignActions[action]
	if !ok {
		return usagef("campaign: unknown action %q\n\n%s", action, campaignUsage)
	}
	f := newFlags("campaign "+action, summary, stdout)
	c := f.conn(usesAll)
	id := f.campaignID("id", "the campaign id (required)")
	var endsAt *string
	var add, to *int64
	switch action {
	case "extend":
		endsAt = f.String("ends-at", "", "the new end: an RFC 3339 time, or +DURATION from now, such as +30m (required)")
	case "add-stock":
		add = f.Int64("add", 0, "how many units to put on sale (this or --to)")
		to = f.Int64("to", 0, "the total stock to raise it to: running it again adds nothing more (this or --add)")
	}
	f.pick("id", "ends-at", "add", "to")
	var ends time.Time
	f.after = append(f.after, func() error {
		if *id == "" {
			return usagef("campaign %s: --id is required", action)
		}
		if action == "add-stock" {
			switch {
			case *add != 0 && *to != 0:
				return usagef("campaign add-stock: give --add or --to, not both")
			case *add == 0 && *to == 0:
				return usagef("campaign add-stock: give --add N (units to put on sale) or --to TOTAL (the stock to raise it to), at least 1")
			case *add < 0:
				return usagef("campaign add-stock: --add %d: want at least 1", *add)
			case *to < 0:
				return usagef("campaign add-stock: --to %d: want at least 1", *to)
			}
		}
		if endsAt != nil {
			var err error
			if ends, err = parseEndsAt(*endsAt, time.Now()); err != nil {
				return usagef("campaign extend: --ends-at: %v", err)
			}
		}
		return nil
	})
	if err := f.parse(args[1:]); err != nil {
		return err
	}
	op, d, done, err := openOperator(ctx, c)
	if err != nil {
		return err
	}
	defer done()

	var camp store.Campaign
	var tally *compensator.Tally
	switch action {
	case "close":
		camp, err = op.Close(ctx, *id)
	case "extend":
		camp, err = op.Extend(ctx, *id, ends)
	case "add-stock":
		if *to != 0 {
			camp, err = op.RaiseStock(ctx, *id, *to)
		} else {
			camp, err = op.AddStock(ctx, *id, *add)
		}
	case "cancel":
		// Looked up first, as compensate --campaign does: a progress line drawn for a campaign
		// that is not there reads as a cancel that started.
		if _, err = d.store.Campaign(ctx, *id); err != nil {
			break
		}
		update, stop := bench.NewProgress(os.Stderr).Track("cancel " + *id)
		tally = new(compensator.Tally)
		camp, *tally, err = op.Cancel(ctx, *id, update)
		stop()
	}
	return answerControl(ctx, stdout, *id, camp, tally, err, func(ctx context.Context, camp store.Campaign) (api.CampaignView, error) {
		return api.LiveCampaign(ctx, d.store, d.redis, camp)
	})
}

// answerControl prints what the control of campaign id did: the campaign it left (read back
// through view), with the cancel's tally, or returns its error err, worded as the admin
// endpoints word it.
func answerControl(ctx context.Context, stdout io.Writer, id string, camp store.Campaign, tally *compensator.Tally, err error,
	view func(context.Context, store.Campaign) (api.CampaignView, error)) error {
	if err != nil {
		if tally != nil && *tally != (compensator.Tally{}) {
			// A cancel whose Redis step or a later order failed has given back what it counted:
			// the operator sees it, with what is left to do in the error.
			if perr := printJSON(stdout, *tally); perr != nil {
				return errors.Join(err, perr)
			}
		}
		if errors.Is(err, compensator.ErrStopped) {
			return err // it says what it did, and to run it again
		}
		return api.ControlFailed(id, err, "running this", "use --to TOTAL, which adds nothing when run again")
	}
	v, err := view(ctx, camp)
	if err != nil {
		// This prints the causes too, unlike the api: not the read's own "try again", only
		// what failed under it.
		var e *events.Error
		if errors.As(err, &e) && e.Cause != nil {
			err = e.Cause
		}
		return api.ControlUnshown(id, err, "do not run this again; read it shortly (GET /v1/campaigns/"+id+")")
	}
	if tally != nil {
		return printJSON(stdout, api.CancelResult{Campaign: v, Tally: *tally})
	}
	return printJSON(stdout, v)
}

// parseEndsAt reads an end given as an RFC 3339 time or as +DURATION from now.
func parseEndsAt(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, fmt.Errorf("required")
	}
	if rest, ok := strings.CutPrefix(s, "+"); ok {
		d, err := time.ParseDuration(rest)
		if err != nil || d <= 0 {
			return time.Time{}, fmt.Errorf("%q: want +DURATION such as +30m or +2h", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time such as 2026-12-01T20:00:00Z, or +30m", s)
	}
	return t, nil
}

// openOperator opens what an operator's command acts through; done closes it all.
func openOperator(ctx context.Context, c conn) (*compensator.Operator, deps, func(), error) {
	d, err := c.open(ctx)
	if err != nil {
		return nil, d, nil, err
	}
	producer, err := events.NewClient(c.brokerList())
	if err != nil {
		d.close()
		return nil, d, nil, err
	}
	op := &compensator.Operator{
		Resolver:  &compensator.Resolver{Store: d.store, Redis: d.redis, Producer: producer, Results: c.topics().Results, Logger: c.logger(os.Stderr)},
		Campaigns: d.store,
		Sales:     d.redis,
	}
	return op, d, func() { events.FlushAndClose(producer); d.close() }, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
