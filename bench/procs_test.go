package bench

import (
	"net"
	"strconv"
	"testing"
	"time"
)

// TestFreeAddr checks what a process started on FreeAddr's address relies on: a port that can be
// listened on, never the same one twice, and outside the range the kernel gives outgoing
// connections (which took such ports before the process could listen).
func TestFreeAddr(t *testing.T) {
	lo, below := ephemeralLow()
	seen := map[string]bool{}
	for range 200 {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("FreeAddr returned %s twice", addr)
		}
		seen[addr] = true
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if below && (port < minPort || port >= lo) {
			t.Fatalf("FreeAddr returned port %d: want %d to %d, below the ephemeral range", port, minPort, lo-1)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("FreeAddr's %s cannot be listened on: %v", addr, err)
		}
		ln.Close()
	}
	if !below {
		t.Logf("no ports below the ephemeral range (it starts at %d): FreeAddr used the kernel's picks", lo)
	}
}

// TestStopBeforeTheProcessCatchesSIGTERM: a process that SIGTERM reaches before it catches the
// signal (a Go role before main, which took over 200 ms on a loaded machine) dies of it having
// done nothing, and its stop says nothing of it. Stop reported it as a role that failed to
// drain. One that wrote its log first, or caught the signal, is still judged by how it ended.
func TestStopBeforeTheProcessCatchesSIGTERM(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		clean        bool
	}{
		// sh dies of a SIGTERM that reaches it during the sleep, before its trap.
		{"before it catches it, having written nothing", `sleep 2; trap 'exit 0' TERM; while :; do sleep 0.05; done`, true},
		{"before it catches it, having written its log", `echo '{"level":"INFO","msg":"starting"}'; sleep 2; trap 'exit 0' TERM; while :; do sleep 0.05; done`, false},
		{"caught, and drained", `trap 'exit 0' TERM; echo '{"level":"INFO","msg":"starting"}'; while :; do sleep 0.05; done`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			// The log goes on across restarts: what an earlier process wrote is not this one's.
			earlier, err := Start("/bin/sh", "role", dir, nil, "-c", `echo '{"level":"INFO","msg":"an earlier start"}'`)
			if err != nil {
				t.Fatal(err)
			}
			<-earlier.Done()
			p, err := Start("/bin/sh", "role", dir, nil, "-c", tc.script)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Stop(10 * time.Second); (err == nil) != tc.clean {
				t.Errorf("Stop = %v, want clean %v", err, tc.clean)
			}
		})
	}
}
