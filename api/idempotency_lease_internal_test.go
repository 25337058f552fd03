package api

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/lua"
)

// TestIdempotencyAnswerOfTheLeaseHolder: a first request that outlives its lease (a stalled
// process, a Redis that answers slowly) sees a retry take its key over. Whichever finished last
// used to write its answer: a late 202 of the first could replace the 503 "cancelled" the retry
// remembered, or its abort drop the retry's record. Only the lease's holder finishes or aborts.
func TestIdempotencyAnswerOfTheLeaseHolder(t *testing.T) {
	mr := miniredis.RunT(t)
	r := lua.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}))
	t.Cleanup(func() { r.Close() })
	s := New(Config{IdempotencyLease: time.Second, OrderIDSecret: []byte("order-id-secret-of-at-least-32-bytes"),
		Logger: slog.New(slog.DiscardHandler)}, nil, r, nil)
	t.Cleanup(s.Close)
	ctx := t.Context()
	fp := purchaseFingerprint("c", 1)
	record := func() *idemRecord { return s.idemRecord("c", "ann", "k", fp) }
	begin := func(rec *idemRecord, want string) {
		t.Helper()
		if st, err := rec.begin(ctx, false); err != nil || st.outcome != want {
			t.Fatalf("begin = %+v, %v; want %s", st, err, want)
		}
	}

	first := record()
	begin(first, "new")
	mr.SetTime(time.Now().Add(2 * time.Second)) // the first request outlives its lease
	retry := record()
	begin(retry, "retry")
	if err := retry.finish(ctx, 503, "application/json", []byte(`{"cancelled":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := first.finish(ctx, 202, "application/json", []byte(`{"pending":true}`)); !errors.Is(err, errLeaseLost) {
		t.Errorf("the first request's late finish = %v, want errLeaseLost", err)
	}
	if err := first.abort(ctx); !errors.Is(err, errLeaseLost) {
		t.Errorf("the first request's late abort = %v, want errLeaseLost", err)
	}
	st, err := record().begin(ctx, false)
	if err != nil || st.outcome != "done" || st.status != 503 || string(st.body) != `{"cancelled":true}` {
		t.Errorf("the key answers %+v, %v; want the retry's 503", st, err)
	}
}
