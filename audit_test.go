package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/store/storetest"
)

// TestAuditWithoutKafka: `seckill audit` with Kafka unreachable fails as an error, not as a
// violation (exit 1 is read as one), and still prints and keeps the campaigns' verdicts, which
// do not read Kafka: the console and seckill_audit_violations stay current through the outage.
func TestAuditWithoutKafka(t *testing.T) {
	ctx := context.Background()
	redisURL, storeURL, st := onSale(t, "nokafka")
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"audit", "--redis-url", redisURL, "--postgres-url", storeURL,
		"--kafka-brokers", "127.0.0.1:1"}, &stdout, &stderr)
	if code != 1 || !strings.HasPrefix(stderr.String(), "seckill audit: cannot reach kafka: ") ||
		strings.Contains(stderr.String(), errViolation.Error()) || strings.Contains(stderr.String(), "<nil>") {
		t.Errorf("audit without kafka exited %d, stderr:\n%s\nwant 1 and seckill audit: cannot reach kafka: …, no violation", code, stderr.String())
	}
	if out := stdout.String(); !strings.Contains(out, "campaign nokafka") || strings.Contains(out, "FAIL") {
		t.Errorf("audit without kafka printed, want the campaign's checks, none failed:\n%s", out)
	}
	vs, err := st.AuditVerdicts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := vs["nokafka"]; !ok || !v.OK {
		t.Errorf("verdict kept for the console: %+v (kept: %v), want an ok one", v, ok)
	}
}

// TestAuditShowsProgress: audit of every campaign, which reads each one's orders from the store
// and its keys from Redis, shows how many campaigns it has checked, of how many, on stderr as
// the other long commands do. It printed nothing until the end: on a big store an operator
// could not tell an audit at work from one that hung.
func TestAuditShowsProgress(t *testing.T) {
	redisURL, storeURL, _ := onSale(t, "one", "two", "three")
	progress := captureStderr(t)
	var out bytes.Buffer
	run(context.Background(), []string{"audit", "--redis-url", redisURL, "--postgres-url", storeURL,
		"--kafka-brokers", "127.0.0.1:1"}, &out, &out)
	shown := progress()
	if !strings.Contains(shown, "audit") || !strings.Contains(shown, "3/3") {
		t.Errorf("audit of 3 campaigns showed %q on stderr; want its progress, to 3/3", shown)
	}
}

// TestAuditOfTopicsKafkaLacks: an audit whose --topic-prefix names topics Kafka does not have (a
// typo, another deployment's prefix) says so and names the flag. It said "cannot reach kafka",
// of a Kafka that answered, and the operator looked for an outage.
func TestAuditOfTopicsKafkaLacks(t *testing.T) {
	mr := miniredis.RunT(t)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"audit", "--redis-url", "redis://" + mr.Addr() + "/0", "--postgres-url", migratedSQLite(t),
		"--kafka-brokers", strings.Join(kafkatest.Fake(t), ","), "--topic-prefix", "nosuch"}, &stdout, &stderr)
	if code != 1 || strings.Contains(stdout.String()+stderr.String(), "cannot reach kafka") || !strings.Contains(stderr.String(), "--topic-prefix") {
		t.Errorf("audit of a prefix Kafka has no topics of: exit %d, stdout %q, stderr %q; want exit 1 naming --topic-prefix, not cannot reach kafka",
			code, stdout.String(), stderr.String())
	}
}

// onSale puts campaigns of the ids on sale (stock 5, limit 1) in a new SQLite store and a new
// miniredis, and returns their URLs and the store.
func onSale(t *testing.T, ids ...string) (redisURL, storeURL string, st *store.Store) {
	t.Helper()
	ctx := context.Background()
	mr := miniredis.RunT(t)
	r := lua.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}))
	t.Cleanup(func() { r.Close() })
	storeURL = storetest.SQLiteURL(t)
	st = storetest.MustOpen(t, storeURL)
	now := time.Now()
	for _, id := range ids {
		if err := st.CreateCampaign(ctx, store.Campaign{ID: id, Name: id, Stock: 5, PerUserLimit: 1,
			StartsAtMs: now.Add(-time.Hour).UnixMilli(), CreatedAtMs: now.UnixMilli()}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.LoadCampaign(ctx, lua.Campaign{ID: id, Remaining: 5, Limit: 1, StartsAt: now.Add(-time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	return "redis://" + mr.Addr() + "/0", storeURL, st
}
