package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// orderRow is an order row as the invariant checks read it.
type orderRow struct {
	OrderID  string        `db:"order_id"`
	UserID   string        `db:"user_id"`
	Quantity int64         `db:"quantity"`
	Status   events.Status `db:"status"`
}

// checkTotals reads the campaign's rows and checks the store's invariants: sold is the sum of
// confirmed quantities and at most stock, each buyer's purchases row is the sum of the buyer's
// confirmed quantities and at most the limit. It returns the orders by id.
func checkTotals(t *testing.T, s *store.Store, c store.Campaign) map[string]orderRow {
	t.Helper()
	db := s.DB()
	var rows []orderRow
	if err := db.Select(&rows, db.Rebind(`SELECT order_id, user_id, quantity, status FROM orders WHERE campaign_id = ?`), c.ID); err != nil {
		t.Fatalf("read orders: %v", err)
	}
	var bought []struct {
		UserID string `db:"user_id"`
		Bought int64  `db:"bought"`
	}
	if err := db.Select(&bought, db.Rebind(`SELECT user_id, bought FROM purchases WHERE campaign_id = ?`), c.ID); err != nil {
		t.Fatalf("read purchases: %v", err)
	}
	var sold int64
	if err := db.Get(&sold, db.Rebind(`SELECT sold FROM campaigns WHERE id = ?`), c.ID); err != nil {
		t.Fatalf("read sold: %v", err)
	}

	orders := make(map[string]orderRow, len(rows))
	perUser := map[string]int64{}
	var confirmedUnits int64
	for _, r := range rows {
		if _, dup := orders[r.OrderID]; dup {
			t.Errorf("order %s is stored twice", r.OrderID)
		}
		orders[r.OrderID] = r
		if r.Status == events.Confirmed || r.Status == events.Paid {
			confirmedUnits += r.Quantity
			perUser[r.UserID] += r.Quantity
		}
	}
	if sold > c.Stock {
		t.Errorf("oversold: sold %d > stock %d", sold, c.Stock)
	}
	if sold != confirmedUnits {
		t.Errorf("sold %d != %d units in confirmed orders", sold, confirmedUnits)
	}
	for u, n := range perUser {
		if n > c.PerUserLimit {
			t.Errorf("user %s holds %d confirmed units > limit %d", u, n, c.PerUserLimit)
		}
	}
	seen := map[string]bool{}
	for _, b := range bought {
		seen[b.UserID] = true
		if b.Bought != perUser[b.UserID] {
			t.Errorf("purchases of %s = %d, confirmed orders hold %d", b.UserID, b.Bought, perUser[b.UserID])
		}
	}
	for u, n := range perUser {
		if !seen[u] {
			t.Errorf("user %s holds %d confirmed units but has no purchases row", u, n)
		}
	}
	return orders
}

func TestConfirmOrdersConcurrent(t *testing.T) {
	const (
		stock    = 100
		limit    = 2
		users    = 200
		nEvents  = 400
		workers  = 8
		maxBatch = 20
	)
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, seed))
		c := mustCampaign(t, s, stock, limit)

		evs := make([]events.Event, nEvents)
		index := make(map[string]int, nEvents)
		for i := range evs {
			evs[i] = newEvent(c.ID, fmt.Sprintf("user-%03d", rng.IntN(users)), 1+rng.IntN(3))
			index[evs[i].OrderID] = i
		}
		mustValid(t, evs...)
		// Every event is delivered twice, to two different workers, in random order.
		work := make([][]events.Event, workers)
		for _, e := range evs {
			a := rng.IntN(workers)
			b := (a + 1 + rng.IntN(workers-1)) % workers
			work[a] = append(work[a], e)
			work[b] = append(work[b], e)
		}
		for _, w := range work {
			rng.Shuffle(len(w), func(i, j int) { w[i], w[j] = w[j], w[i] })
		}

		var (
			mu      sync.Mutex
			results = make([][]store.Result, nEvents)
			wg      sync.WaitGroup
			start   = make(chan struct{})
		)
		for k, w := range work {
			wrng := rand.New(rand.NewPCG(seed, uint64(k+1))) // rand.Rand is not safe for concurrent use
			wg.Go(func() {
				<-start
				for len(w) > 0 {
					n := min(len(w), 1+wrng.IntN(maxBatch))
					batch := w[:n]
					w = w[n:]
					rs, err := s.ConfirmOrders(context.Background(), batch)
					if err != nil {
						t.Errorf("ConfirmOrders: %v", err)
						return
					}
					mu.Lock()
					for i, r := range rs {
						k := index[batch[i].OrderID]
						results[k] = append(results[k], r)
					}
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		if t.Failed() {
			return
		}

		orders := checkTotals(t, s, c)
		var confirmedOrders, soldOut, limited int
		for i, e := range evs {
			rs := results[i]
			if len(rs) != 2 {
				t.Fatalf("order %s has %d results, want 2", e.OrderID, len(rs))
			}
			row, stored := orders[e.OrderID]
			first, second := rs[0], rs[1]
			if first.Duplicate {
				first, second = second, first
			}
			switch {
			case stored:
				if row.Status != events.Confirmed || row.Quantity != int64(e.Quantity) || row.UserID != e.UserID {
					t.Errorf("order %s stored as %+v, want a confirmed row of the event %+v", e.OrderID, row, e)
				}
				if first != confirmed || second != (store.Result{Status: events.Confirmed, Duplicate: true}) {
					t.Errorf("stored order %s: results %+v, want one confirmation and one duplicate", e.OrderID, rs)
				}
				confirmedOrders++
			default:
				for _, r := range rs {
					if r.Status != "" || r.Duplicate || r.Reason != events.ReasonStoreSoldOut && r.Reason != events.ReasonStoreLimit {
						t.Errorf("order %s is not stored, but a delivery got %+v", e.OrderID, r)
					}
					switch r.Reason {
					case events.ReasonStoreSoldOut:
						soldOut++
					case events.ReasonStoreLimit:
						limited++
					}
				}
			}
			if e.Quantity > limit && stored {
				t.Errorf("order %s of %d units > limit %d was stored", e.OrderID, e.Quantity, limit)
			}
		}
		if len(orders) != confirmedOrders {
			t.Errorf("%d order rows, %d orders confirmed by the deliveries", len(orders), confirmedOrders)
		}
		if soldOut == 0 || limited == 0 {
			t.Errorf("no contention exercised: %d sold-out and %d limit refusals", soldOut, limited)
		}
		t.Logf("%d orders confirmed, %d units sold, %d sold-out and %d limit refusals", confirmedOrders, sold(t, s, c.ID), soldOut, limited)
	})
}

// TestFailOrderRacesConfirm runs the compensator's FailOrder against the consumer's ConfirmOrders
// on the same orders at the same time: each order must end in exactly one state, and both sides
// must agree on which.
func TestFailOrderRacesConfirm(t *testing.T) {
	const n = 120
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		c := mustCampaign(t, s, n, 1)
		evs := make([]events.Event, n)
		for i := range evs {
			evs[i] = newEvent(c.ID, fmt.Sprintf("user-%03d", i), 1)
		}
		mustValid(t, evs...)
		confirmResults := make([]store.Result, n)
		failRows := make([]store.Order, n)
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; i < n; i += 6 {
				rs, err := s.ConfirmOrders(context.Background(), evs[i:i+6])
				if err != nil {
					t.Errorf("ConfirmOrders: %v", err)
					return
				}
				copy(confirmResults[i:], rs)
			}
		})
		wg.Go(func() {
			// From the other end, so the two meet in the middle.
			for i := n - 1; i >= 0; i-- {
				o, err := s.FailOrder(context.Background(), evs[i], events.ReasonExpired)
				if err != nil {
					t.Errorf("FailOrder: %v", err)
					return
				}
				failRows[i] = o
			}
		})
		wg.Wait()
		if t.Failed() {
			return
		}
		orders := checkTotals(t, s, c)
		var nConfirmed, nFailed int
		for i, e := range evs {
			row := orders[e.OrderID]
			switch row.Status {
			case events.Confirmed:
				nConfirmed++
				if confirmResults[i] != confirmed || failRows[i].Status != events.Confirmed {
					t.Errorf("order %s is confirmed, but ConfirmOrders said %+v and FailOrder returned %+v", e.OrderID, confirmResults[i], failRows[i])
				}
			case events.Failed:
				nFailed++
				if confirmResults[i] != (store.Result{Status: events.Failed, Duplicate: true}) || failRows[i].Status != events.Failed {
					t.Errorf("order %s failed, but ConfirmOrders said %+v and FailOrder returned %+v", e.OrderID, confirmResults[i], failRows[i])
				}
			default:
				t.Errorf("order %s ended as %+v", e.OrderID, row)
			}
		}
		t.Logf("%d confirmed, %d failed", nConfirmed, nFailed)
	})
}

// TestRefundRacesRedelivery refunds confirmed orders while their events are redelivered in
// batches beside new orders: a refund happens once, a redelivery never confirms a refunded order
// again, and neither side deadlocks.
func TestRefundRacesRedelivery(t *testing.T) {
	const n = 60
	storetest.Each(t, func(t *testing.T, s *store.Store) {
		c := mustCampaign(t, s, 3*n, 2)
		old := make([]events.Event, n)
		for i := range old {
			old[i] = newEvent(c.ID, fmt.Sprintf("user-%03d", i), 1)
		}
		for i, r := range confirm(t, s, old...) {
			if r != confirmed {
				t.Fatalf("setup: result %d = %+v", i, r)
			}
		}
		var wg sync.WaitGroup
		for w := range 3 {
			wg.Go(func() {
				for i := 0; i < n; i += 4 {
					// "new-" users sort before the redelivered "user-" ones and "zz-" after, so
					// the batch confirms new orders on both sides of the refunded ones.
					batch := []events.Event{
						newEvent(c.ID, fmt.Sprintf("new-%d-%03d", w, i), 1),
						old[i], old[i+1], old[i+2], old[i+3],
						newEvent(c.ID, fmt.Sprintf("zz-%d-%03d", w, i), 1),
					}
					rs, err := s.ConfirmOrders(context.Background(), batch)
					if err != nil {
						t.Errorf("ConfirmOrders: %v", err)
						return
					}
					for j, r := range rs[1:5] {
						if !r.Duplicate || r.Status != events.Confirmed && r.Status != events.Refunded {
							t.Errorf("redelivery of %s = %+v, want a duplicate", batch[j+1].OrderID, r)
						}
					}
				}
			})
		}
		for range 2 {
			wg.Go(func() {
				for i := n - 1; i >= 0; i-- {
					o, _, err := s.RefundOrder(context.Background(), old[i].OrderID)
					if err != nil {
						t.Errorf("RefundOrder: %v", err)
						return
					}
					if o.Status != events.Refunded {
						t.Errorf("RefundOrder(%s) = %+v, want refunded", old[i].OrderID, o)
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		orders := checkTotals(t, s, c)
		for _, e := range old {
			if orders[e.OrderID].Status != events.Refunded {
				t.Errorf("order %s = %+v, want refunded", e.OrderID, orders[e.OrderID])
			}
		}
		// 3 workers × n/4 batches × 2 new orders each, all confirmed; every old order refunded.
		wantSold(t, s, c.ID, int64(3*(n/4)*2))
	})
}

// givingBack are the ways a process other than the consumer ends an order with its units given
// back, under its campaign's lock: the sweeper fails it, a replay records it given back.
var givingBack = []struct {
	name string
	end  func(ctx context.Context, s *store.Store, e events.Event) (events.Status, error)
}{
	{"sweeper fails it", func(ctx context.Context, s *store.Store, e events.Event) (events.Status, error) {
		fence, err := s.IssueFence(ctx, "sweeper-"+e.CampaignID, 1)
		if err != nil {
			return "", err
		}
		o, err := s.FailOrderFenced(ctx, e, events.ReasonExpired, fence)
		return o.Status, err
	}},
	{"replay records it given back", func(ctx context.Context, s *store.Store, e events.Event) (events.Status, error) {
		if _, _, err := s.RecordGivenBack(ctx, []store.Order{{OrderID: e.OrderID, CampaignID: e.CampaignID, UserID: e.UserID,
			Quantity: int64(e.Quantity), Status: events.Failed, Reason: "released_before_replay", CreatedAtMs: e.OccurredAt.UnixMilli()}}); err != nil {
			return "", err
		}
		o, err := s.Order(ctx, e.OrderID)
		return o.Status, err
	}},
}

// TestGivenBackBesideBatchDecision ends an order of a batch, its units given back, after the
// batch has read which of its orders the store holds and before it inserts them: the batch must
// not count that order's unit as taken and refuse a neighbour as sold out while the unit is
// free. A test transaction's uncommitted row of the batch's first order holds the batch at its
// insert, after its decision, for as long as the test needs. The order ends as the sweeper fails
// it, and as a replay records it given back. PostgreSQL only: SQLite runs one transaction at a
// time (one connection per store, one writer per file, and a transaction whose reads are older
// than another's commit cannot write), so an order cannot end inside a batch there.
func TestGivenBackBesideBatchDecision(t *testing.T) {
	for _, tc := range givingBack {
		t.Run(tc.name, func(t *testing.T) {
			s := storetest.MustOpen(t, storetest.PostgresURL(t))
			ctx := context.Background()
			c := mustCampaign(t, s, 2, 1)
			first, ending, next := newEvent(c.ID, "user-a", 1), newEvent(c.ID, "user-b", 1), newEvent(c.ID, "user-c", 1)
			mustValid(t, first, ending, next)

			hold, err := s.DB().BeginTxx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer hold.Rollback()
			var holdPid int
			if err := hold.Get(&holdPid, `SELECT pg_backend_pid()`); err != nil {
				t.Fatal(err)
			}
			if _, err := hold.Exec(`INSERT INTO orders (order_id, campaign_id, user_id, quantity, status, reason, created_at_ms, updated_at_ms)
				VALUES ($1, $2, $3, 1, 'failed', 'test', 0, 0)`, first.OrderID, first.CampaignID, first.UserID); err != nil {
				t.Fatal(err)
			}

			var (
				results            []store.Result
				ended              events.Status
				batchErr, endErr   error
				batchDone, endDone = make(chan struct{}), make(chan struct{})
			)
			defer func() {
				hold.Rollback()
				recvWithin(t, batchDone, "the batch (its blocking transaction rolled back)")
			}()
			go func() {
				defer close(batchDone)
				results, batchErr = s.ConfirmOrders(ctx, []events.Event{first, ending, next})
			}()
			batchPid := blockedBy(t, s, holdPid, batchDone)
			if batchPid == 0 {
				t.Fatalf("the batch ended before its insert: %+v, %v", results, batchErr)
			}
			go func() {
				defer close(endDone)
				ended, endErr = tc.end(ctx, s, ending)
			}()
			// The order's end either is stored now, or waits for the batch: both are what it may do.
			blockedBy(t, s, batchPid, endDone)
			if err := hold.Rollback(); err != nil {
				t.Fatal(err)
			}
			recvWithin(t, batchDone, "the batch (its blocking transaction rolled back)")
			recvWithin(t, endDone, "the order's end")
			if batchErr != nil || endErr != nil {
				t.Fatalf("ConfirmOrders: %v; the order's end: %v", batchErr, endErr)
			}

			checkTotals(t, s, c)
			if results[1].Status != ended {
				t.Errorf("the batch says %s is %+v, the store then holds it %s", ending.OrderID, results[1], ended)
			}
			if got := sold(t, s, c.ID); results[2].Reason == events.ReasonStoreSoldOut && got < c.Stock {
				t.Errorf("the batch refused %s as sold out with %d of %d units sold (%s is %s)", next.OrderID, got, c.Stock, ending.OrderID, ended)
			}
			t.Logf("batch %+v; then %s", results, ended)
		})
	}
}

// TestGivenBackBesideAnotherSQLiteProcess ends an order as the sweeper and a replay do, in a
// process beside another that writes the same SQLite file (a `--dev` command beside `seckill
// dev`): both must succeed, one waiting for the other, as busy_timeout is there for. A
// transaction that began deferred and read first held a snapshot that SQLite could not turn into
// a write once the other process had committed, and said "database is locked" at once. The
// other process writes as this one's transaction compiles its first write: an authorizer on
// this store's one connection, which SQLite calls for each statement it compiles, is the hook.
// It gives the other's write up to two seconds: a deferred transaction lets it commit at once
// (and then fails); the store's transactions hold the file's write lock from their start, so
// the other waits for this one's commit, and then writes.
func TestGivenBackBesideAnotherSQLiteProcess(t *testing.T) {
	for _, tc := range givingBack {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			url := storetest.SQLiteURL(t)
			other := storetest.MustOpen(t, url)
			s, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			c := mustCampaign(t, other, 2, 1)
			ending := newEvent(c.ID, "user-a", 1)
			mustValid(t, ending)

			var inTx, fired bool
			wrote := make(chan error, 1)
			hook := func(action sqlite.AuthorizerActionCode, arg1, _, _, _ string) sqlite.AuthorizerReturnCode {
				switch {
				case action == sqlite.AuthTransaction && arg1 == "BEGIN":
					inTx = true
				case action == sqlite.AuthInsert && inTx && !fired:
					fired = true
					done := make(chan struct{})
					go func() {
						defer close(done)
						_, err := other.FailOrder(ctx, newEvent(c.ID, "user-b", 1), events.ReasonOperator)
						wrote <- err
					}()
					select {
					case <-done:
					case <-time.After(2 * time.Second):
					}
				}
				return sqlite.AuthorizerOK
			}
			conn, err := s.DB().Conn(ctx) // the store's one connection, which its calls then use
			if err != nil {
				t.Fatal(err)
			}
			err = conn.Raw(func(dc any) error { return dc.(sqlite.AuthorizerRegisterer).RegisterAuthorizer(hook) })
			conn.Close()
			if err != nil {
				t.Fatal(err)
			}

			ended, err := tc.end(ctx, s, ending)
			if err != nil || ended != events.Failed {
				t.Errorf("the order's end beside another process's write = %q, %v; want failed", ended, err)
			}
			if !fired {
				t.Fatal("the order's end wrote nothing the hook saw")
			}
			if err := recvWithin(t, wrote, "the other process's write"); err != nil {
				t.Errorf("the other process's write beside the order's end: %v; want it done, after waiting", err)
			}
		})
	}
}

// blockedBy waits until a backend of the test server waits for a lock that backend pid holds,
// and returns its pid, or 0 if done closes first (what was to wait ended instead). After a
// minute of neither it fails the test.
func blockedBy(t *testing.T, s *store.Store, pid int, done <-chan struct{}) int {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		var waiter int
		if err := s.DB().Get(&waiter, `SELECT COALESCE(MAX(pid), 0) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid); err != nil {
			t.Fatalf("who waits for backend %d: %v", pid, err)
		}
		if waiter != 0 {
			return waiter
		}
		select {
		case <-done:
			return 0
		case <-time.After(time.Millisecond): // the next look
		}
	}
	t.Fatalf("after a minute nothing waits for backend %d, and what was to wait has not ended", pid)
	return 0
}

// recvWithin receives from ch, what finishes (a goroutine of the test, the code it runs): a
// deadlock there fails the test after a minute, saying what did not finish, instead of holding
// the package until go test's timeout.
func recvWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute): // a hang guard, not a measurement
	}
	t.Fatalf("after a minute, %s has not finished", what)
	var zero T
	return zero
}
