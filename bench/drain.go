package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/seckill/seckill/compensator"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
)

// drain pre-produces n OrderRequested events of one campaign, then starts a consumer with the
// given batch size (0: its default) and measures how fast the orders reach PostgreSQL.
func (r *runner) drain(ctx context.Context, name string, n int64, batch int) (ScenarioResult, error) {
	sz := r.cfg.Sizes
	prefix := r.env.Prefix(name)
	topics := events.NewTopics(prefix)
	if err := r.env.CreateTopics(ctx, prefix, sz.Partitions); err != nil {
		return ScenarioResult{}, err
	}
	campaign, err := r.drainCampaign(ctx, name, n)
	if err != nil {
		return ScenarioResult{}, err
	}
	if !r.cfg.Keep {
		// Deferred before the consumer's stop, so run after it.
		defer func() {
			if err := r.env.DropCampaign(context.WithoutCancel(ctx), campaign); err != nil {
				r.res.Notes = append(r.res.Notes, fmt.Sprintf("%s: drop the campaign's Redis keys: %v", name, err))
			}
		}()
	}
	d := &DrainResult{Events: n, BatchSize: batch}
	if d.ProduceRate, err = r.produce(ctx, name, topics.Requested, campaign, n); err != nil {
		return ScenarioResult{}, err
	}
	updatesBefore, err := r.campaignUpdates(ctx)
	if err != nil {
		return ScenarioResult{}, err
	}

	metrics, err := FreeAddr()
	if err != nil {
		return ScenarioResult{}, err
	}
	pprofAddr, err := FreeAddr()
	if err != nil {
		return ScenarioResult{}, err
	}
	args := []string{"consumer", "--metrics-addr", metrics}
	if batch > 0 {
		args = append(args, "--batch-size", strconv.Itoa(batch))
	} else {
		d.BatchSize = 500 // the consumer's default
	}
	started := time.Now()
	cons, err := r.role(name+"-consumer", pprofAddr, append(args, r.connArgs(prefix)...)...)
	if err != nil {
		return ScenarioResult{}, err
	}
	defer cons.Stop(30 * time.Second)
	cpu := startCPU(map[string]int{"consumer": cons.Pid()})

	var (
		done      atomic.Int64
		firstNs   atomic.Int64 // when the first order was seen, for the progress line
		profiling bool
		firstAt   time.Time
		firstDone int64
		lastAt    time.Time
		profiles  sync.WaitGroup
		profMu    sync.Mutex
	)
	stop := r.prog.Watch(name, n, done.Load, func() string {
		ns := firstNs.Load()
		if ns == 0 {
			return "waiting for the first batch"
		}
		if el := time.Since(time.Unix(0, ns)).Seconds(); el > 0 {
			return fmt.Sprintf("%s orders/s", rate(float64(done.Load())/el))
		}
		return ""
	})
	deadline := started.Add(sz.DrainTimeout)
	var prevT float64
	var prevDone int64
	nextSample := started
	for {
		if exited, err := cons.Exited(); exited {
			stop()
			return ScenarioResult{}, fmt.Errorf("the consumer exited (%v):\n%s", err, cons.Tail(20))
		}
		sold, err := r.sold(ctx, campaign)
		now := time.Now()
		if err == nil {
			done.Store(sold)
			if sold > 0 && firstAt.IsZero() {
				firstAt, firstDone = now, sold
				firstNs.Store(now.UnixNano())
				d.FirstAfter = now.Sub(started).Seconds()
			}
			// Profile once a tenth is done, for four fifths of the estimated rest (as the HTTP
			// scenarios do): a window longer than the drain would mostly sample an idle consumer.
			if r.cfg.Profile && !profiling && sold >= max(n/10, 1) && sold < n && now.After(firstAt) {
				profiling = true
				orate := float64(sold-firstDone+1) / now.Sub(firstAt).Seconds()
				secs := min(max(int(0.8*float64(n-sold)/orate), 1), r.cfg.ProfileSeconds)
				for _, kind := range []string{"cpu", "allocs"} {
					profiles.Add(1)
					go func() {
						defer profiles.Done()
						ps, err := r.profile(ctx, name, "consumer", pprofAddr, kind, secs)
						profMu.Lock()
						defer profMu.Unlock()
						if err != nil {
							r.res.Notes = append(r.res.Notes, fmt.Sprintf("%s: %s profile of the consumer: %v", name, kind, err))
							return
						}
						r.addProfiles(ps)
					}()
				}
			}
			if sold > 0 {
				lastAt = now
			}
			if !now.Before(nextSample) || sold >= n {
				t := now.Sub(started).Seconds()
				p := DrainPoint{T: t, Done: sold, Lag: -1}
				if lag, err := r.lag(ctx, topics.Requested, topics.ConsumerGroup()); err == nil {
					p.Lag = lag
				}
				if t > prevT {
					p.Rate = float64(sold-prevDone) / (t - prevT)
				}
				prevT, prevDone = t, sold
				d.Timeline = append(d.Timeline, p)
				nextSample = nextSample.Add(time.Second)
			}
			if sold >= n {
				d.Complete = true
				break
			}
		}
		if now.After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	cpuUsed := cpu.stop()
	profiles.Wait()
	d.Persisted = done.Load()
	if !firstAt.IsZero() && lastAt.After(firstAt) {
		d.Elapsed = lastAt.Sub(firstAt).Seconds()
	}
	d.Batches, _ = scrapeCounter(ctx, "http://"+metrics+"/metrics", "seckill_consumer_batch_size_count")
	stopErr := cons.Stop(30 * time.Second)
	// A backend reports its statistics when it ends: the consumer's have ended now.
	if after, err := r.campaignUpdatesSettled(ctx, updatesBefore); err == nil {
		d.CampaignUpdates = after - updatesBefore
	}
	what := fmt.Sprintf("%s OrderRequested events already in Kafka, one consumer, batch size %d", count(n), d.BatchSize)
	res := ScenarioResult{What: what, Baseline: batch == 1, Unit: "orders/s", Drain: d, CPU: cpuUsed}
	res.setCPUPerOp(d.Persisted)
	if d.Elapsed > 0 {
		res.Throughput = float64(d.Persisted-firstDone) / d.Elapsed
	}
	if !d.Complete {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("%s: stopped after %s with %s of %s orders persisted; the rate is the rate so far",
			name, sz.DrainTimeout, count(d.Persisted), count(n)))
	}
	return res, stopErr
}

// drainCampaign makes a drain's campaign of n units, as many a buyer, on sale since an hour
// ago: in the store, and in Redis from the same record, as a campaign is put on sale.
func (r *runner) drainCampaign(ctx context.Context, name string, n int64) (string, error) {
	now := time.Now().Add(-time.Hour).UnixMilli()
	c := store.Campaign{ID: r.env.Campaign(name), Name: "bench " + name, Stock: n, PerUserLimit: n, StartsAtMs: now, CreatedAtMs: now}
	if err := r.env.Store.CreateCampaign(ctx, c); err != nil {
		return "", err
	}
	if _, err := r.env.Lua.LoadCampaign(ctx, compensator.RedisCampaign(c)); err != nil {
		return "", err
	}
	return c.ID, nil
}

// produce reserves n orders of campaign in Redis and writes their OrderRequested events to
// topic, as the api would have, and returns the rate it did so at. The reservations make the
// consumer's per-batch read and confirmation find pending orders and confirm them, their work
// in production: without them it found none, confirmed nothing, and warned once a batch that
// Redis did not hold what the store did.
func (r *runner) produce(ctx context.Context, name, topic, campaign string, n int64) (float64, error) {
	start := time.Now()
	cl, err := events.NewClient(r.env.Brokers, kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(50_000))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var (
		acked    atomic.Int64
		errMu    sync.Mutex
		firstErr error
	)
	users := r.users(name)
	stop := r.prog.Watch(name+" reserve and produce", n, acked.Load, nil)
	// Enough purchases at once for the coalescer to fill its batches, as a crowd does.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(256)
	for i := range n {
		g.Go(func() error {
			id, user := events.NewOrderID(campaign), string(users.appendUser(nil, i))
			res, err := r.env.Lua.Reserve(gctx, campaign, id, user, 1, time.Hour)
			if err != nil {
				return err
			}
			ev := events.Event{
				Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: time.Now().UTC(),
				OrderID: id, CampaignID: campaign, UserID: user, Quantity: 1, Deadline: res.Deadline.UTC(),
			}
			rec, err := events.Record(topic, ev)
			if err != nil {
				return err
			}
			// ctx, not gctx: Wait ends gctx while records are still in the client's buffer.
			cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
				if err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					return
				}
				acked.Add(1)
			})
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		stop()
		return 0, fmt.Errorf("reserve the backlog: %w", err)
	}
	flushErr := cl.Flush(ctx)
	el := time.Since(start).Seconds()
	stop()
	if err := errors.Join(firstErr, flushErr, ctx.Err()); err != nil {
		return 0, fmt.Errorf("produce the backlog: %w", err)
	}
	return float64(n) / el, nil
}

// lag returns how many records of topic the group has not committed yet (from the log's start
// for a partition it never committed), asking Kafka for at most 2s.
func (r *runner) lag(ctx context.Context, topic, group string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return events.Lag(ctx, r.env.Admin, topic, group)
}

// campaignUpdates returns how many rows of the run's campaigns table were ever updated.
func (r *runner) campaignUpdates(ctx context.Context) (int64, error) {
	var n int64
	err := r.env.Store.DB().GetContext(ctx, &n,
		`SELECT n_tup_upd FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'campaigns'`, r.env.Schema)
	return n, err
}

// campaignUpdatesSettled waits until the counter stops moving (the ended backends' statistics
// arrive shortly after they end).
func (r *runner) campaignUpdatesSettled(ctx context.Context, before int64) (int64, error) {
	last := before
	stable := 0
	for range 50 {
		time.Sleep(200 * time.Millisecond)
		n, err := r.campaignUpdates(ctx)
		if err != nil {
			return 0, err
		}
		if n == last && n != before {
			if stable++; stable >= 3 {
				return n, nil
			}
		} else {
			stable = 0
		}
		last = n
	}
	return last, nil
}

// scrapeCounter reads one sample of a Prometheus text exposition as an integer.
func scrapeCounter(ctx context.Context, url, name string) (int64, error) {
	v, err := scrapeValue(ctx, url, name)
	return int64(v), err
}

// scrapeValue reads one sample of a Prometheus text exposition.
func scrapeValue(ctx context.Context, url, name string) (float64, error) {
	b, err := fetch(ctx, url)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", url, name)
}
