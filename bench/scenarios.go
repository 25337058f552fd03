package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
)

// big is a stock or limit no scenario reaches.
const big = int64(1) << 40

func (r *runner) users(prefix string) Users {
	return Users{N: r.cfg.Sizes.FlashUsers, Prefix: prefix + "-" + r.env.tag() + "-u"}
}

// startBaseline starts a baseline server and waits until it answers.
func (r *runner) startBaseline(ctx context.Context, kind string) (proc *Proc, addr, pprofAddr string, err error) {
	if addr, err = FreeAddr(); err != nil {
		return nil, "", "", err
	}
	if pprofAddr, err = FreeAddr(); err != nil {
		return nil, "", "", err
	}
	proc, err = r.role(kind, pprofAddr, "baseline", "--kind", kind, "--addr", addr,
		"--redis-url", r.env.RedisURL, "--postgres-url", r.env.PGURL)
	if err != nil {
		return nil, "", "", err
	}
	if err := WaitHTTP(ctx, "http://"+addr+"/healthz", proc, 30*time.Second); err != nil {
		proc.Stop(10 * time.Second)
		return nil, "", "", err
	}
	return proc, addr, pprofAddr, nil
}

// baseline measures one of the baseline servers on the workload it is compared with.
func (r *runner) baseline(ctx context.Context, kind string) (ScenarioResult, error) {
	sz := r.cfg.Sizes
	var what string
	campaign, warmCampaign := r.env.Campaign(kind), ""
	n, users := sz.Requests, r.users(kind)
	switch kind {
	case Constant:
		what = "Echo handler answering a fixed JSON body: the HTTP stack alone"
	case BareReserve:
		what = "Echo handler running the reserve script once per request (lua.Redis.Reserve), no Kafka"
		if _, err := r.env.Lua.LoadCampaign(ctx, lua.Campaign{ID: campaign, Remaining: big, Limit: big, StartsAt: time.Now().Add(-time.Minute)}); err != nil {
			return ScenarioResult{}, err
		}
	case SyncDB:
		what = fmt.Sprintf("the naive design: one PostgreSQL transaction per purchase; the flash crowd's workload (stock %s, limit 1)", count(sz.FlashStock))
		n = sz.SyncDBRequests
		warmCampaign = r.env.Campaign(kind + "-warm")
		now := time.Now().Add(-time.Minute).UnixMilli()
		for _, c := range []store.Campaign{
			{ID: campaign, Name: "bench sync-db", Stock: sz.FlashStock, PerUserLimit: 1, StartsAtMs: now, CreatedAtMs: now},
			{ID: warmCampaign, Name: "bench sync-db warm-up", Stock: big, PerUserLimit: big, StartsAtMs: now, CreatedAtMs: now},
		} {
			if err := r.env.Store.CreateCampaign(ctx, c); err != nil {
				return ScenarioResult{}, err
			}
		}
	}
	if warmCampaign == "" {
		warmCampaign = campaign
	}
	proc, addr, pprofAddr, err := r.startBaseline(ctx, kind)
	if err != nil {
		return ScenarioResult{}, err
	}
	m, err := r.measure(ctx, kind,
		Load{Addr: addr, Requests: sz.Warmup, NewRequester: PurchaseRequests(addr, warmCampaign, r.users(kind+"-warm"), r.id)},
		Load{Addr: addr, Requests: n, NewRequester: PurchaseRequests(addr, campaign, users, r.id)},
		nil, map[string]int{kind: proc.Pid()}, kind, pprofAddr)
	r.addProfiles(m.profiles)
	err = errors.Join(err, proc.Stop(30*time.Second))
	return httpResult(what, true, m), err
}

// soldOut measures purchases of a campaign whose stock is gone: the warm-up sells it.
func (r *runner) soldOut(ctx context.Context) (ScenarioResult, error) {
	sz := r.cfg.Sizes
	p, err := r.startPipeline(ctx, ScSoldOut, r.cfg.ConsumerRate)
	if err != nil {
		return ScenarioResult{}, err
	}
	defer p.stop()
	campaign := r.env.Campaign(ScSoldOut)
	stock := min(100, max(sz.Warmup/2, 1))
	if err := p.createCampaign(ctx, campaign, stock, 1); err != nil {
		return ScenarioResult{}, err
	}
	m, err := r.measure(ctx, ScSoldOut,
		Load{Addr: p.apiAddr, Requests: max(sz.Warmup, stock+1), NewRequester: PurchaseRequests(p.apiAddr, campaign, r.users(ScSoldOut+"-warm"), r.id)},
		Load{Addr: p.apiAddr, Requests: sz.Requests, NewRequester: PurchaseRequests(p.apiAddr, campaign, r.users(ScSoldOut), r.id)},
		p.caughtUp, map[string]int{"api": p.api.Pid()}, "api", p.apiPprof)
	r.addProfiles(m.profiles)
	err = errors.Join(err, p.stop())
	return httpResult(fmt.Sprintf("purchases after the stock (%d units) is gone", stock), false, m), err
}

// allAccept measures purchases that all succeed: every request runs the script and produces,
// while the consumer beside the api persists at most pace orders/s (0: as fast as it can).
func (r *runner) allAccept(ctx context.Context, name string, pace int) (ScenarioResult, error) {
	sz := r.cfg.Sizes
	p, err := r.startPipeline(ctx, name, pace)
	if err != nil {
		return ScenarioResult{}, err
	}
	defer p.stop()
	campaign := r.env.Campaign(name)
	if err := p.createCampaign(ctx, campaign, sz.Requests+sz.Warmup, sz.Requests+sz.Warmup); err != nil {
		return ScenarioResult{}, err
	}
	var before [2]float64
	load := Load{Addr: p.apiAddr, Requests: sz.Requests, NewRequester: PurchaseRequests(p.apiAddr, campaign, r.users(name), r.id),
		Started: func(time.Time) { before = p.produceStats(ctx) }}
	m, err := r.measure(ctx, name,
		Load{Addr: p.apiAddr, Requests: sz.Warmup, NewRequester: PurchaseRequests(p.apiAddr, campaign, r.users(name+"-warm"), r.id)},
		load, p.caughtUp, map[string]int{"api": p.api.Pid(), "consumer": p.cons.Pid(), "compensator": p.comp.Pid()}, "api", p.apiPprof)
	r.addProfiles(m.profiles)
	r.noteProduce(name, before, p.produceStats(ctx))
	if sold, err := r.sold(ctx, campaign); err == nil && m.load != nil {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("%s: when the load ended, %s of %s accepted orders were in PostgreSQL (%s)",
			name, count(sold), count(m.load.Count("2")+sz.Warmup), paceNote(pace)))
	}
	err = errors.Join(err, p.stop())
	return httpResult("purchases that all succeed: the reserve script and the produce on every request; "+paceNote(pace), false, m), err
}

// paceNote says how fast the consumer beside the api persisted.
func paceNote(pace int) string {
	if pace <= 0 {
		return "the consumer beside the api persists as fast as it can"
	}
	return fmt.Sprintf("the consumer beside the api persists at most %s orders/s (--max-rate)", count(int64(pace)))
}

func (r *runner) sold(ctx context.Context, campaign string) (int64, error) {
	var sold int64
	err := r.env.Store.DB().GetContext(ctx, &sold, `SELECT sold FROM campaigns WHERE id = $1`, campaign)
	return sold, err
}

// flashCrowd is the crowd: many more buyers than units, limit 1, and the check that
// exactly the stock was sold. With keep, the pipeline is returned running, for idle-conns.
func (r *runner) flashCrowd(ctx context.Context, keep bool) (ScenarioResult, *pipeline, error) {
	sz := r.cfg.Sizes
	p, err := r.startPipeline(ctx, ScFlashCrowd, r.cfg.ConsumerRate)
	if err != nil {
		return ScenarioResult{}, nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			p.stop()
		}
	}()
	campaign, warm := r.env.Campaign(ScFlashCrowd), r.env.Campaign(ScFlashCrowd+"-warm")
	if err := p.createCampaign(ctx, warm, big, big); err != nil {
		return ScenarioResult{}, nil, err
	}
	if err := p.createCampaign(ctx, campaign, sz.FlashStock, 1); err != nil {
		return ScenarioResult{}, nil, err
	}
	// The store's progress, sampled while the crowd buys and until every order is in.
	var (
		mu        sync.Mutex
		persisted []DrainPoint
		loadStart time.Time
		target    int64 = -1 // accepted orders, once the load is over
		doneAt    float64
	)
	pollCtx, stopPoll := context.WithCancel(ctx)
	allIn := make(chan struct{})
	go func() {
		defer close(allIn)
		for {
			select {
			case <-pollCtx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			sold, err := r.sold(pollCtx, campaign)
			if err != nil {
				continue
			}
			mu.Lock()
			if !loadStart.IsZero() {
				t := time.Since(loadStart).Seconds()
				persisted = append(persisted, DrainPoint{T: t, Done: sold, Lag: -1})
				if target >= 0 && sold >= target {
					doneAt = t
					mu.Unlock()
					return
				}
			}
			mu.Unlock()
		}
	}()
	var produceBefore [2]float64
	load := Load{Addr: p.apiAddr, Requests: sz.FlashRequests, NewRequester: PurchaseRequests(p.apiAddr, campaign, r.users(ScFlashCrowd), r.id),
		Started: func(start time.Time) {
			produceBefore = p.produceStats(ctx)
			mu.Lock()
			loadStart = start
			mu.Unlock()
		}}
	m, err := r.measure(ctx, ScFlashCrowd,
		Load{Addr: p.apiAddr, Requests: sz.Warmup, NewRequester: PurchaseRequests(p.apiAddr, warm, r.users(ScFlashCrowd+"-warm"), r.id)},
		load, p.caughtUp, map[string]int{"api": p.api.Pid(), "consumer": p.cons.Pid(), "compensator": p.comp.Pid()}, "api", p.apiPprof)
	r.noteProduce(ScFlashCrowd, produceBefore, p.produceStats(ctx))
	r.addProfiles(m.profiles)
	res := httpResult(fmt.Sprintf("stock %s, limit 1, %s purchases from %s buyers", count(sz.FlashStock), count(sz.FlashRequests), count(sz.FlashUsers)), false, m)
	if err != nil {
		stopPoll()
		return res, nil, err
	}
	f := &FlashResult{Stock: sz.FlashStock, Limit: 1, Accepted: m.load.Count("2"), SoldOutAfter: m.load.FirstSeen["409 sold_out"]}
	mu.Lock()
	target = f.Accepted
	mu.Unlock()
	select {
	case <-allIn:
	case <-time.After(2 * time.Minute):
	case <-ctx.Done():
	}
	stopPoll()
	mu.Lock()
	f.PersistedAfter, f.Persisted = doneAt, persisted
	mu.Unlock()
	if err := r.checkFlash(ctx, campaign, f); err != nil {
		return res, nil, err
	}
	res.Flash = f
	if keep {
		stopped = true
		return res, p, nil
	}
	stopped = true
	return res, nil, p.stop()
}

// produceStats reads the api's produce latency histogram (seckill_produce_seconds): its sum in
// seconds and its count; zeros when the api does not export it.
func (p *pipeline) produceStats(ctx context.Context) [2]float64 {
	url := "http://" + p.apiAdmin + "/metrics"
	sum, err1 := scrapeValue(ctx, url, "seckill_produce_seconds_sum")
	n, err2 := scrapeValue(ctx, url, "seckill_produce_seconds_count")
	if err1 != nil || err2 != nil {
		return [2]float64{}
	}
	return [2]float64{sum, n}
}

// noteProduce notes the mean time the api waited for Kafka's acknowledgement during a load.
func (r *runner) noteProduce(name string, before, after [2]float64) {
	if n := after[1] - before[1]; n > 0 {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("%s: the api waited %.1fms on average for Kafka to acknowledge each of %s produces (seckill_produce_seconds)",
			name, 1000*(after[0]-before[0])/n, count(int64(n))))
	}
}

// checkFlash asks the store and Redis what the flash crowd bought.
func (r *runner) checkFlash(ctx context.Context, campaign string, f *FlashResult) error {
	db := r.env.Store.DB()
	if err := db.GetContext(ctx, &f.Sold, `SELECT sold FROM campaigns WHERE id = $1`, campaign); err != nil {
		return fmt.Errorf("check the flash crowd: %w", err)
	}
	if err := db.GetContext(ctx, &f.Confirmed, `SELECT count(*) FROM orders WHERE campaign_id = $1 AND status = 'confirmed'`, campaign); err != nil {
		return fmt.Errorf("check the flash crowd: %w", err)
	}
	if err := db.GetContext(ctx, &f.OverLimit, `SELECT count(*) FROM (SELECT user_id FROM orders
		WHERE campaign_id = $1 AND status = 'confirmed' GROUP BY user_id HAVING sum(quantity) > $2) over`, campaign, f.Limit); err != nil {
		return fmt.Errorf("check the flash crowd: %w", err)
	}
	var overPurchases int64
	if err := db.GetContext(ctx, &overPurchases, `SELECT count(*) FROM purchases WHERE campaign_id = $1 AND bought > $2`, campaign, f.Limit); err != nil {
		return fmt.Errorf("check the flash crowd: %w", err)
	}
	f.OverLimit += overPurchases
	remaining, _, err := r.env.Lua.Remaining(ctx, campaign)
	if err != nil {
		return fmt.Errorf("check the flash crowd: %w", err)
	}
	f.RedisRemaining = remaining
	if HasCommand(r.cfg.Binary, "audit") {
		args := append([]string{"audit", "--campaign", campaign}, r.serverArgs(r.env.Prefix(ScFlashCrowd))...)
		args, env := hideSecrets(args)
		cmd := exec.CommandContext(ctx, r.cfg.Binary, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		f.Audit = "clean"
		if err != nil {
			f.Audit = "FAILED: " + strings.TrimSpace(string(out))
		}
	}
	f.OK = f.Sold == f.Stock && f.Confirmed == f.Stock && f.Accepted == f.Stock && f.OverLimit == 0 &&
		f.RedisRemaining == 0 && (f.Audit == "" || f.Audit == "clean")
	return nil
}

// idleConns opens many keep-alive connections to the api, each after one request, and reads
// the api's resident memory.
func (r *runner) idleConns(ctx context.Context, p *pipeline) (ScenarioResult, error) {
	n := r.cfg.Sizes.IdleConns
	pid := p.api.Pid()
	before, _, err := RSS(pid)
	if err != nil {
		return ScenarioResult{}, err
	}
	conns := make([]*conn, n)
	var opened sync.WaitGroup
	var next, ok, failed int64
	var mu sync.Mutex
	var firstErr error
	req := []byte("GET /healthz HTTP/1.1\r\nHost: " + p.apiAddr + "\r\n\r\n")
	stopProg := r.prog.Watch(ScIdleConns, int64(n), func() int64 { mu.Lock(); defer mu.Unlock(); return ok + failed }, nil)
	for range 64 {
		opened.Add(1)
		go func() {
			defer opened.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= int64(n) {
					return
				}
				c := newConn(p.apiAddr, 30*time.Second)
				status, _, err := c.roundTrip(req)
				mu.Lock()
				if err == nil && status == 200 {
					c.c.SetDeadline(time.Time{})
					conns[i] = c
					ok++
				} else {
					failed++
					if firstErr == nil {
						firstErr = fmt.Errorf("status %d: %v", status, err)
					}
					c.close()
				}
				mu.Unlock()
			}
		}()
	}
	opened.Wait()
	stopProg()
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.close()
			}
		}
	}()
	if failed > 0 {
		return ScenarioResult{}, fmt.Errorf("%d of %d connections failed: %v", failed, n, firstErr)
	}
	time.Sleep(2 * time.Second) // let the server settle: every connection waits in its read
	after, peak, err := RSS(pid)
	if err != nil {
		return ScenarioResult{}, err
	}
	const mb = 1 << 20
	idle := &IdleResult{Connections: n, RSSBefore: float64(before) / mb, RSSAfter: float64(after) / mb, PeakRSS: float64(peak) / mb,
		PerConnKB: float64(after-before) / float64(n) / 1024}
	if ms, err := memStats(ctx, "http://"+p.apiPprof); err == nil {
		idle.HeapInuse, idle.StackInuse, idle.HeapIdle = float64(ms["HeapInuse"])/mb, float64(ms["StackInuse"])/mb, float64(ms["HeapIdle"]-ms["HeapReleased"])/mb
		idle.Goroutines = int(ms["goroutines"])
	}
	return ScenarioResult{What: fmt.Sprintf("api resident memory with %s idle keep-alive connections, after the flash crowd", count(int64(n))),
		Unit: "MB", Throughput: idle.RSSAfter, Idle: idle}, nil
}

// memStats reads runtime.MemStats as /debug/pprof/heap?debug=1 prints them ("# HeapInuse = 123"),
// and the goroutine count from /debug/pprof/goroutine?debug=1 ("goroutine profile: total 123").
func memStats(ctx context.Context, base string) (map[string]int64, error) {
	heap, err := fetch(ctx, base+"/debug/pprof/heap?debug=1")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(heap), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "# "), " = ")
		if !ok || strings.ContainsAny(k, " []") {
			continue
		}
		if k == "Stack" { // "# Stack = <StackInuse> / <StackSys>"
			k = "StackInuse"
		}
		v, _, _ = strings.Cut(v, " / ")
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	if out["HeapInuse"] == 0 {
		return nil, fmt.Errorf("%s: no MemStats in the heap profile", base)
	}
	if g, err := fetch(ctx, base+"/debug/pprof/goroutine?debug=1"); err == nil {
		var n int64
		if _, err := fmt.Sscanf(string(g), "goroutine profile: total %d", &n); err == nil {
			out["goroutines"] = n
		}
	}
	return out, nil
}

// redisCeiling runs redis-benchmark with the EVALSHA the api sends, on a campaign that never
// runs out, at the scenarios' concurrency.
func (r *runner) redisCeiling(ctx context.Context) (ScenarioResult, error) {
	sz := r.cfg.Sizes
	campaign := r.env.Campaign("ceiling")
	if _, err := r.env.Lua.LoadCampaign(ctx, lua.Campaign{ID: campaign, Remaining: big, Limit: big, StartsAt: time.Now().Add(-time.Minute)}); err != nil {
		return ScenarioResult{}, err
	}
	order, user := events.NewOrderID(campaign), "ceiling-user"
	args, err := ReserveCommand(ctx, r.env.Redis, campaign, order, user)
	if err != nil {
		return ScenarioResult{}, err
	}
	if fb, err := ReserveFallsBack(ctx, r.env.Redis, campaign, events.NewOrderID(campaign), user); err == nil && fb {
		r.res.Notes = append(r.res.Notes, "lua.Redis.Reserve sends EVALSHA with a SHA Redis does not know (NOSCRIPT), then EVAL with the whole script: two round trips per purchase in the api and in bare-reserve; the ceiling runs one EVALSHA with the script's real SHA.")
	}
	// A fresh order id and buyer per call, as the api's purchases have.
	args = RandomizeArgs(args, []string{order, user}, []string{campaign + ".__rand_int__", "u__rand_int__"})
	stop := r.prog.Watch(ScRedisCeiling, 0, nil, func() string { return "redis-benchmark running" })
	var c RedisCeiling
	for attempt := 1; ; attempt++ {
		// Tests sharing this Redis may flush its scripts (SCRIPT FLUSH) at any time: load them
		// right before each attempt, and try again when one was flushed mid-run.
		if err = r.env.Lua.Load(ctx); err == nil {
			c, err = RunRedisBenchmark(ctx, r.cfg.RedisBenchmark, r.env.Redis, sz.Concurrency, sz.RedisRequests, args)
		}
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "NOSCRIPT") {
			break
		}
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("redis-ceiling: attempt %d met NOSCRIPT (the shared Redis's scripts were flushed); ran again", attempt))
	}
	stop()
	if err != nil {
		return ScenarioResult{}, err
	}
	return ScenarioResult{What: fmt.Sprintf("redis-benchmark: EVALSHA of the reserve script, %d clients", sz.Concurrency),
		Baseline: true, Throughput: c.Throughput, Unit: "EVALSHA/s", Latency: c.Latency, Redis: &c}, nil
}
