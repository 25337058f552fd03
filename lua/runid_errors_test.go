package lua_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/lua"
)

// TestRunIDErrorsAreErrors: only miniredis's "section (server) is not supported" means a server
// without run ids. Any other error reply to INFO was read the same way, as "": a server whose
// INFO is disabled (rename-command) recorded "" in every campaign and found "" after a restart
// that lost a purchase, so the guard never rebuilt it; and a primary busy with a long script was
// left out of Masters without a word, as if it served no slot.
func TestRunIDErrorsAreErrors(t *testing.T) {
	ctx := t.Context()

	t.Run("miniredis, which knows no INFO server, has no run ids and no error", func(t *testing.T) {
		mr := miniredis.RunT(t)
		r := lua.New(redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1}))
		defer r.Close()
		if err := r.Load(ctx); err != nil {
			t.Fatal(err)
		}
		c := lua.Campaign{ID: newCampaignID(), Remaining: 10, Limit: 5, StartsAt: time.Now().Add(-time.Hour)}
		if _, err := r.LoadCampaign(ctx, c); err != nil {
			t.Fatal(err)
		}
		gens, err := r.Generations(ctx, []string{c.ID})
		if g := gens[c.ID]; err != nil || !g.Exists || g.Lost() || g.Server != "" {
			t.Errorf("Generations = %+v, %v; want the campaign, not lost, without a run id", g, err)
		}
		if masters, err := r.Masters(ctx); err != nil || len(masters) != 0 {
			t.Errorf("Masters = %v, %v; want none, without an error", masters, err)
		}
	})

	t.Run("a server without INFO is an error, not a server without run ids", func(t *testing.T) {
		srv := startOwnRedis(t, "rename-command INFO \"\"\n")
		r := lua.New(redis.NewClient(&redis.Options{Addr: srv.addr, MaxRetries: -1}))
		defer r.Close()
		if err := r.Load(ctx); err == nil {
			t.Errorf("Load passed on a server whose INFO is disabled; want an error: the guard cannot tell a restart there")
		}
		c := lua.Campaign{ID: newCampaignID(), Remaining: 10, Limit: 5, StartsAt: time.Now().Add(-time.Hour)}
		if _, err := r.LoadCampaign(ctx, c); err == nil {
			t.Errorf("LoadCampaign recorded a run id on a server whose INFO is disabled; want an error")
		}
		if _, err := r.Generations(ctx, []string{c.ID}); err == nil {
			t.Errorf("Generations answered without a run id; want an error")
		}
		if _, err := r.Masters(ctx); err == nil {
			t.Errorf("Masters answered without a run id; want an error")
		}
	})

	t.Run("a busy primary is an error in Masters, not a primary without a run id", func(t *testing.T) {
		srv := startOwnRedis(t, "busy-reply-threshold 50\n")
		r := lua.New(redis.NewClient(&redis.Options{Addr: srv.addr, MaxRetries: -1}))
		defer r.Close()
		if err := r.Load(ctx); err != nil {
			t.Fatal(err)
		}
		before, err := r.Masters(ctx)
		if err != nil || len(before) != 1 {
			t.Fatalf("Masters = %v, %v; want the one primary", before, err)
		}
		busy := redis.NewClient(&redis.Options{Addr: srv.addr, MaxRetries: -1, ReadTimeout: -1})
		defer busy.Close()
		done := make(chan error, 1)
		go func() {
			// A read-only script that loops until SCRIPT KILL ends it.
			done <- busy.Eval(context.Background(), "while true do end", nil).Err()
		}()
		admin := redis.NewClient(&redis.Options{Addr: srv.addr, MaxRetries: -1})
		defer admin.Close()
		defer func() {
			for admin.ScriptKill(context.Background()).Err() != nil && len(done) == 0 {
				time.Sleep(10 * time.Millisecond)
			}
			<-done
		}()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			err := admin.Ping(ctx).Err()
			if err != nil && strings.HasPrefix(err.Error(), "BUSY") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server never answered BUSY: %v", err)
			}
		}
		masters, err := r.Masters(ctx)
		if err == nil || !strings.Contains(err.Error(), "BUSY") {
			t.Errorf("Masters of a busy primary = %v, %v; want its BUSY as the error", masters, err)
		}
	})
}
