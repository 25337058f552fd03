package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/seckill/seckill/bench"
	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
)

// errViolation makes audit exit 1 after it printed what is wrong.
var errViolation = errors.New("an invariant does not hold")

func runAudit(ctx context.Context, args []string, stdout io.Writer) error {
	f := newFlags("audit", "Check the invariants I1-I6 (conservation, single resolution, per-user limit, no\noversell, no lost order, paid or expired) across Redis, the store and Kafka. Exits 1 on a violation.", stdout)
	c := f.conn(usesStore | usesRedis | usesKafka)
	campaign := f.campaignID("campaign", "audit only this campaign (default: all)")
	grace := f.duration("grace", 5*time.Second, false, "how long the sweeper may take to act before its work counts as not done: a reservation pending past its deadline (I5), an order unpaid past its pay_by (I6), a refund or expiry the store has and Redis lacks (I2); the sweep interval")
	if err := f.parse(args); err != nil {
		return err
	}
	d, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer d.close()
	cl, err := events.NewClient(c.brokerList())
	if err != nil {
		return err
	}
	defer cl.Close()
	update, stop := bench.NewProgress(os.Stderr).Track("audit")
	a := &compensator.Auditor{Store: d.store, Redis: d.redis, Admin: kadm.NewClient(cl), Topics: c.topics(), Grace: *grace, Progress: update}
	rep, err := a.Audit(ctx, *campaign)
	stop()
	// The verdicts of the campaigns it could check stand without Kafka or a shard: they are
	// printed and kept, and the audit then fails with that error, which is no violation.
	if err != nil && len(rep.Campaigns) == 0 && !errors.Is(err, compensator.ErrNoKafka) {
		return err
	}
	rep.Print(stdout)
	// Kept for the console and the alerts (seckill_audit_violations).
	now := time.Now()
	for _, ca := range rep.Campaigns {
		if err := d.store.RecordAudit(ctx, ca.Verdict(now)); err != nil {
			return err
		}
	}
	if !rep.OK() {
		return errors.Join(errViolation, err) // err: nil, or what could not be checked
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "audit: every invariant holds")
	return nil
}
