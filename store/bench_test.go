package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// BenchmarkConfirmOrders measures orders/s into PostgreSQL for a batch of 500 against one order
// per transaction (the row-at-a-time baseline), side by side:
//
//	go test -run '^$' -bench ConfirmOrders ./store/
func BenchmarkConfirmOrders(b *testing.B) {
	for _, size := range []int{1, 500} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			s := storetest.MustOpen(b, storetest.PostgresURL(b))
			benchConfirm(b, s, size, 10000, 0)
		})
	}
}

// BenchmarkConfirmOrdersDrain is the bench's drain without Kafka: batches of 500 orders of one
// campaign whose 100,000 buyers have bought before (the drain's millionth order finds them all
// in purchases), side by side: the reads of known orders and buyers' totals that SQLite does and
// that PostgreSQL falls back to (sql=reads), and PostgreSQL's optimistic way (sql=optimistic):
//
//	go test -run '^$' -bench ConfirmOrdersDrain -benchtime 100000x ./store/
func BenchmarkConfirmOrdersDrain(b *testing.B) {
	for _, sql := range []string{"reads", "optimistic"} {
		b.Run("sql="+sql, func(b *testing.B) {
			s := storetest.MustOpen(b, storetest.PostgresURL(b))
			if sql == "reads" {
				store.UseReads(s)
			}
			benchConfirm(b, s, 500, 100_000, 100_000)
		})
	}
}

// benchConfirm confirms b.N orders of users buyers in batches of size, after seeding the
// campaign with one order of each of the first seeded buyers.
func benchConfirm(b *testing.B, s *store.Store, size, users, seeded int) {
	ctx := context.Background()
	c := store.Campaign{ID: storetest.Name("bench"), Name: "bench", Stock: 1 << 40, PerUserLimit: 1 << 40, CreatedAtMs: time.Now().UnixMilli()}
	if err := s.CreateCampaign(ctx, c); err != nil {
		b.Fatal(err)
	}
	user := func(i int) string { return fmt.Sprintf("bench-buyer-%d", i%users) }
	if seeded > 0 {
		// What earlier batches would have written, in three statements. No ANALYZE: the
		// bench's drain runs on a fresh schema, faster than autovacuum's first look at it.
		db := s.DB()
		if _, err := db.ExecContext(ctx, `INSERT INTO orders (order_id, campaign_id, user_id, quantity, status, created_at_ms, updated_at_ms)
			SELECT $1 || '.seed' || g, $1, 'bench-buyer-' || g, 1, 'confirmed', 0, 0 FROM generate_series(0, $2 - 1) AS g`, c.ID, seeded); err != nil {
			b.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO purchases (campaign_id, user_id, bought)
			SELECT $1, 'bench-buyer-' || g, 1 FROM generate_series(0, $2 - 1) AS g`, c.ID, seeded); err != nil {
			b.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `UPDATE campaigns SET sold = $2 WHERE id = $1`, c.ID, seeded); err != nil {
			b.Fatal(err)
		}
	}
	evs := make([]events.Event, b.N)
	for i := range evs {
		evs[i] = events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: time.Now(),
			OrderID: events.NewOrderID(c.ID), CampaignID: c.ID, UserID: user(i * 7919), Quantity: 1}
	}
	// CPU per order moves less than orders/s when the machine is shared: the server's, read
	// from /proc when the server is local and the store holds one connection, and ours.
	s.DB().SetMaxOpenConns(1)
	var backend int
	if err := s.DB().GetContext(ctx, &backend, `SELECT pg_backend_pid()`); err != nil {
		b.Fatal(err)
	}
	pgBefore, pgErr := procCPU(backend)
	goBefore := selfCPU()
	b.ResetTimer()
	for i := 0; i < len(evs); i += size {
		if _, err := s.ConfirmOrders(ctx, evs[i:min(i+size, len(evs))]); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "orders/s")
	b.ReportMetric(float64((selfCPU()-goBefore).Microseconds())/float64(b.N), "go-µs/order")
	if pgAfter, err := procCPU(backend); err == nil && pgErr == nil {
		b.ReportMetric(float64((pgAfter-pgBefore).Microseconds())/float64(b.N), "pg-µs/order")
	}
}

// procCPU returns the CPU time a local process has used, from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // after the command's name
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / 100, nil // USER_HZ is 100 on Linux
}

// selfCPU returns the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkConfirmOrdersReplay measures a replay, every order stored already, in batches of 500:
// with the reads (sql=reads) against the optimistic way (sql=optimistic), which tries each batch
// and falls back to the reads:
//
//	go test -run '^$' -bench ConfirmOrdersReplay -benchtime 50000x ./store/
func BenchmarkConfirmOrdersReplay(b *testing.B) {
	for _, sql := range []string{"reads", "optimistic"} {
		b.Run("sql="+sql, func(b *testing.B) {
			s := storetest.MustOpen(b, storetest.PostgresURL(b))
			ctx := context.Background()
			c := store.Campaign{ID: storetest.Name("bench"), Name: "bench", Stock: 1 << 40, PerUserLimit: 1 << 40, CreatedAtMs: time.Now().UnixMilli()}
			if err := s.CreateCampaign(ctx, c); err != nil {
				b.Fatal(err)
			}
			evs := make([]events.Event, b.N)
			for i := range evs {
				evs[i] = events.Event{Type: events.OrderRequested, Version: events.Version, EventID: events.NewID(), OccurredAt: time.Now(),
					OrderID: events.NewOrderID(c.ID), CampaignID: c.ID, UserID: fmt.Sprintf("bench-buyer-%d", i%10000), Quantity: 1}
			}
			for i := 0; i < len(evs); i += 500 {
				if _, err := s.ConfirmOrders(ctx, evs[i:min(i+500, len(evs))]); err != nil {
					b.Fatal(err)
				}
			}
			if sql == "reads" {
				store.UseReads(s)
			}
			b.ResetTimer()
			for i := 0; i < len(evs); i += 500 {
				if _, err := s.ConfirmOrders(ctx, evs[i:min(i+500, len(evs))]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "orders/s")
		})
	}
}
