package lua_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/lua"
)

// ownRedis is a redis-server of the test's own (the shared test servers must not be
// restarted), with its data in a temporary directory and the ACL users of extraConf.
type ownRedis struct {
	t    *testing.T
	conf string
	addr string
	cmd  *exec.Cmd
}

func startOwnRedis(t *testing.T, extraConf string) *ownRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	conf := filepath.Join(dir, "redis.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsave \"\"\nappendonly no\n%s", port, dir, extraConf)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	o := &ownRedis{t: t, conf: conf, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	o.start()
	t.Cleanup(func() { o.cmd.Process.Kill(); o.cmd.Wait() })
	return o
}

func (o *ownRedis) start() {
	o.t.Helper()
	o.cmd = exec.Command("redis-server", o.conf)
	if err := o.cmd.Start(); err != nil {
		o.t.Fatalf("redis-server (installed by deploy/local/services.sh): %v", err)
	}
	admin := redis.NewClient(&redis.Options{Addr: o.addr})
	defer admin.Close()
	for deadline := time.Now().Add(5 * time.Second); admin.Ping(context.Background()).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			o.t.Fatal("own redis-server did not start")
		}
	}
}

// restart kills the server with -9 and starts it again on the same port and data.
func (o *ownRedis) restart() {
	o.t.Helper()
	o.cmd.Process.Kill()
	o.cmd.Wait()
	o.start()
}

// TestGuardNeedsTheRunID: the guard tells a restart or a failover from the run id INFO reports,
// and Redis's ACLs put INFO in @dangerous, which a least-privilege user often lacks. Read as "a
// server without run ids", a NOPERM made every campaign record "" and find "": a restart that
// lost an acknowledged purchase was never rebuilt, and nothing said so. Such a user now stops at
// start with what it lacks; a user with INFO sees the loss.
func TestGuardNeedsTheRunID(t *testing.T) {
	srv := startOwnRedis(t, "user default on nopass ~* &* +@all\nuser seckill on >pw ~* &* +@all -@dangerous\n")
	ctx := t.Context()

	t.Run("a user without INFO stops at start", func(t *testing.T) {
		r := lua.New(redis.NewClient(&redis.Options{Addr: srv.addr, Username: "seckill", Password: "pw", MaxRetries: -1}))
		defer r.Close()
		err := r.Load(ctx)
		if err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "+info") {
			t.Fatalf("Load = %v; want NOPERM, naming the +info the user needs", err)
		}
		if _, err := r.Generations(ctx, []string{newCampaignID()}); err == nil {
			t.Errorf("Generations answered without a run id; want the NOPERM")
		}
	})

	t.Run("a user with INFO sees a restart that lost a purchase", func(t *testing.T) {
		r := lua.New(redis.NewClient(&redis.Options{Addr: srv.addr, MaxRetries: -1}))
		defer r.Close()
		if err := r.Load(ctx); err != nil {
			t.Fatal(err)
		}
		c := lua.Campaign{ID: newCampaignID(), Remaining: 10, Limit: 5, StartsAt: time.Now().Add(-time.Hour)}
		if _, err := r.LoadCampaign(ctx, c); err != nil {
			t.Fatal(err)
		}
		if err := r.Client().(*redis.Client).Save(ctx).Err(); err != nil { // the last snapshot before the crash
			t.Fatal(err)
		}
		reserve(t, r, c.ID, "alice", 2, time.Minute) // acknowledged, then lost in the crash
		srv.restart()
		gens, err := r.Generations(ctx, []string{c.ID})
		if err != nil {
			t.Fatal(err)
		}
		if g := gens[c.ID]; !g.Lost() {
			t.Errorf("a restart that lost an acknowledged purchase is not seen as a loss: %+v", g)
		}
	})
}
