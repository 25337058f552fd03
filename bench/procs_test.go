package bench

import (
	"net"
	"strconv"
	"testing"
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
