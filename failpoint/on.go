//go:build failpoints

package failpoint

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
)

var odds = parse(os.Getenv("SECKILL_FAILPOINTS"))

func parse(s string) map[string]float64 {
	m := map[string]float64{}
	for _, kv := range strings.Split(s, ",") {
		name, p, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(p, 64); err == nil {
			m[name] = f
		}
	}
	return m
}

// Inject kills the process with the probability configured for point name.
func Inject(name string) {
	if p, ok := odds[name]; ok && rand.Float64() < p {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way; never run past the point
	}
}
