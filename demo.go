package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seckill/seckill/bench"
	"github.com/seckill/seckill/events"
)

// runDemo runs a small flash sale against a running seckill dev, so that the console has a
// sale to show: a campaign, a crowd that grows to a rush and sells it out, some buyers back
// for more than their limit.
func runDemo(ctx context.Context, args []string, stdout io.Writer) error {
	f := newFlags("demo", "Run a small flash sale against a running seckill dev (make run): create a campaign, then a\ncrowd of buyers that builds up to a rush and sells it out. Watch it in the console. It ends\nwith the purchases by outcome (accepted, sold_out, limit_exceeded, …) and the units accepted.", stdout)
	dataDir := f.String("data-dir", devDataDir, "the data directory of the seckill dev to reach (it writes its address and admin token there)")
	apiURL := f.String("api-url", "", "the api's address (default: the seckill dev's, from --data-dir)")
	adminToken := f.String("admin-token", "", "the admin token (default: the seckill dev's, from --data-dir)")
	buyers := f.Int("buyers", 2000, "how many buyers (each may buy 2)")
	stock := f.Int64("stock", 1500, "units on sale")
	duration := f.Duration("duration", 30*time.Second, "how long the crowd buys")
	rate := f.Int("rate", 200, "purchases per second at the rush (it builds up from a tenth of that)")
	dev := f.Bool("dev", true, "reach the seckill dev on --data-dir (the default; other flags override; with --dev=false, give --api-url and --admin-token of an api that takes X-User-ID as the buyer, as the dev does: the buyers send no token)")
	if err := f.parse(args); err != nil {
		return err
	}
	if *buyers < 1 || *stock < 1 || *duration <= 0 || *rate < 1 {
		return f.usagef("demo: --buyers, --stock, --duration and --rate must be positive")
	}
	if *stock > events.MaxUnits {
		return f.usagef("demo: --stock %d: want at most %d", *stock, int64(events.MaxUnits))
	}
	// A URL no request can go to is the flag's fault, not a make run that is not running.
	if u, err := url.Parse(*apiURL); *apiURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		return f.usagef("demo: --api-url %q: want http://host:port", *apiURL)
	}
	// Without the dev, nothing fills in what is missing: it was read from --data-dir all the
	// same, and the operator was told no dev runs there.
	if !*dev && (*apiURL == "" || *adminToken == "") {
		return f.usagef("demo: without --dev, give --api-url and --admin-token (the api's address and its admin token)")
	}
	if *apiURL == "" || *adminToken == "" {
		a, err := readDevAddrs(*dataDir)
		if err != nil {
			return err
		}
		if a.APIURL == "" {
			return fmt.Errorf("the seckill dev on %s does not say where its api is: restart it with make run", *dataDir)
		}
		*apiURL, *adminToken = cmp.Or(*apiURL, a.APIURL), cmp.Or(*adminToken, a.AdminToken)
	}
	base := strings.TrimSuffix(*apiURL, "/")
	campaign := demoCampaign(time.Now())
	body, _ := json.Marshal(map[string]any{"id": campaign, "name": "Demo flash sale", "stock": *stock, "per_user_limit": 2,
		"ends_at": time.Now().Add(*duration + time.Minute).UTC().Format(time.RFC3339)})
	code, answer, err := post(ctx, base+"/v1/campaigns", "Bearer "+*adminToken, "", body)
	if err != nil {
		return fmt.Errorf("reach the api at %s: %w (is make run running?)", base, err)
	}
	if code != http.StatusCreated {
		return fmt.Errorf("create the campaign: %d %s", code, answer)
	}
	fmt.Fprintf(stdout, "demo: campaign %s, %d units, %d buyers, %s; watch it at %s\n", campaign, *stock, *buyers, *duration, consoleLink(base, *adminToken))

	var (
		mu      sync.Mutex
		tally   = map[string]int{} // purchases by outcome
		units   int                // units of the accepted ones
		sent    atomic.Int64
		gone    atomic.Bool // the api refused a connection: make run has stopped
		wg      sync.WaitGroup
		summary = func() string {
			mu.Lock()
			defer mu.Unlock()
			keys := make([]string, 0, len(tally))
			for k := range tally {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			parts := make([]string, 0, len(keys))
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s %d", k, tally[k]))
			}
			return strings.Join(parts, ", ") + fmt.Sprintf(" (%d units accepted)", units)
		}
	)
	crowd, stopCrowd := context.WithCancel(ctx)
	defer stopCrowd()
	total := int(float64(*rate) * duration.Seconds() * 0.55) // the ramp's area: a tenth up to all of rate
	stop := bench.NewProgress(os.Stderr).Watch("demo "+campaign, int64(total), sent.Load, summary)
	start := time.Now()
	sem := make(chan struct{}, 64)
	for i := 0; i < total && crowd.Err() == nil; i++ {
		// Build up from a tenth of the rate to all of it over the first half, then hold.
		el := time.Since(start).Seconds()
		now := float64(*rate) * min(1, 0.1+0.9*el/(duration.Seconds()/2))
		time.Sleep(time.Duration(float64(time.Second) / now))
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			user := fmt.Sprintf("buyer-%d", rand.IntN(*buyers))
			qty := 1 + rand.IntN(2)
			code, answer, err := post(crowd, base+"/v1/campaigns/"+campaign+"/purchases", "", user, []byte(fmt.Sprintf(`{"quantity":%d}`, qty)))
			outcome := fmt.Sprint(code)
			switch {
			case errors.Is(err, syscall.ECONNREFUSED):
				gone.Store(true)
				stopCrowd()
				outcome = "error"
			case err != nil:
				outcome = "error"
			case code == http.StatusAccepted:
				outcome = "accepted"
			default:
				var e struct{ Error struct{ Code string } }
				if json.Unmarshal(answer, &e) == nil && e.Error.Code != "" {
					outcome = e.Error.Code
				}
			}
			mu.Lock()
			tally[outcome]++
			if outcome == "accepted" {
				units += qty
			}
			mu.Unlock()
			sent.Add(1)
		})
	}
	wg.Wait()
	stop()
	fmt.Fprintf(stdout, "demo: %d purchases: %s\n", sent.Load(), summary())
	if gone.Load() {
		return fmt.Errorf("the api at %s stopped answering: is make run still running?", base)
	}
	return ctx.Err()
}

// post sends a JSON body as the admin (auth) or as a buyer (user, the dev's X-User-ID).
func post(ctx context.Context, url, auth, user string, body []byte) (int, []byte, error) {
	// A purchase answers in milliseconds: one that takes longer than this met a stuck api.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if user != "" {
		req.Header.Set("X-User-ID", user)
		req.Header.Set("Idempotency-Key", events.NewID())
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, b, err
}

// demoCampaign names a demo's campaign: its start time, to tell runs apart at a glance, and
// four random characters, as two demos started in the same second (or at the same time of
// day, on a dev that kept its data) would otherwise both create one campaign.
func demoCampaign(now time.Time) string {
	id := events.NewID() // its last characters are random
	return "demo-" + now.UTC().Format("150405") + "-" + strings.ToLower(id[len(id)-4:])
}
