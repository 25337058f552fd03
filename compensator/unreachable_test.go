package compensator_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/compensator"
)

// TestSaysWhileKafkaIsUnreachable: a compensator whose brokers do not answer says so, as the
// consumer does, rather than looking idle: it consumed no dead letter and wrote no log line
// while it waited.
func TestSaysWhileKafkaIsUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens there now
	// A file: the client's goroutines write it while the test reads, with no buffer to share.
	out, err := os.Create(filepath.Join(t.TempDir(), "compensator.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	c, err := compensator.New(compensator.Config{Brokers: []string{addr}, Logger: slog.New(slog.NewTextHandler(out, nil))}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if err := c.Ping(ctx); err == nil {
		t.Fatal("a ping of a closed port succeeded")
	}
	logged, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	if got := string(logged); !strings.Contains(got, "cannot reach a Kafka broker") || !strings.Contains(got, addr) {
		t.Errorf("logged %q, want a warning naming %s", got, addr)
	}
}
