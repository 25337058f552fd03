package main

import (
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seckill/seckill/events/kafkatest"
	"github.com/seckill/seckill/lua/luatest"
	"github.com/seckill/seckill/store/storetest"
)

// TestAPIReadinessOnBothPorts: an api's operators' port (--metrics-addr) answers /readyz as its
// public port does, so a load balancer pointed at either sees one readiness. The operators'
// port had a readiness of its own that required the store (a PostgreSQL failover would take
// every api out) and knew nothing of draining: through a stopping api's drain delay it still
// answered 200, and the load balancer kept sending buyers to a process about to go.
func TestAPIReadinessOnBothPorts(t *testing.T) {
	luatest.MustRedis(t)
	brokers := kafkatest.Real(t)
	topics := kafkatest.Topics(t, brokers)
	pg := storetest.PostgresURL(t)
	bin := seckillBinary(t, false)
	conn := []string{"--redis-url", os.Getenv(luatest.RedisEnv), "--postgres-url", pg,
		"--kafka-brokers", strings.Join(brokers, ","), "--topic-prefix", topics.Prefix}
	if out, err := exec.Command(bin, append([]string{"migrate"}, connFor([]string{"migrate"}, conn)...)...).CombinedOutput(); err != nil {
		t.Fatalf("seckill migrate: %v\n%s", err, out)
	}
	public, ops := "http://"+freeAddr(t), "http://"+freeAddr(t)
	logPath := filepath.Join(t.TempDir(), "api.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, append([]string{"api", "--addr", strings.TrimPrefix(public, "http://"),
		"--metrics-addr", strings.TrimPrefix(ops, "http://"), "--insecure-user-header",
		"--partitions", "1", "--replication", "1", "--drain-delay", "1h"}, conn...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("api log ends:\n%s", tail(logPath, 20))
		}
	}()
	readyz := func(base string) (int, string) {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	eventually(t, 60*time.Second, "the api is ready on its public port", func() bool { code, _ := readyz(public); return code == http.StatusOK })
	if code, body := readyz(ops); code != http.StatusOK {
		t.Fatalf("ready on the public port, on the operators' port: %d %s", code, body)
	}
	// Stopping: an hour's drain delay, through which both ports must say draining.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the public port says draining", func() bool { code, _ := readyz(public); return code == http.StatusServiceUnavailable })
	if code, body := readyz(ops); code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
		t.Errorf("a draining api's operators' port answers /readyz %d %q; want 503 draining, as its public port", code, body)
	}
	// A second signal is a person (or a supervisor) who will not wait for the drain: the
	// process ends at once, by the signal, as any program does at a second Ctrl-C.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		var ee *exec.ExitError
		if !errors.As(waitErr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGINT {
			t.Errorf("a draining api given a second signal ended with %v; want killed by that SIGINT", waitErr)
		}
	case <-time.After(30 * time.Second): // of an hour's drain
		t.Errorf("a draining api given a second signal still drains 30s on; want it ended at once")
	}
}
