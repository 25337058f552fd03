package validate

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// problems collects everything wrong with a file, so that one run reports all of it.
type problems []string

func (p *problems) addf(format string, args ...any) {
	*p = append(*p, fmt.Sprintf(format, args...))
}

// report fails tb once per problem.
func (p problems) report(tb testing.TB) {
	tb.Helper()
	for _, msg := range p {
		tb.Error(msg)
	}
}

// deployDir is the absolute path of deploy/, the parent of this module.
func deployDir(tb testing.TB) string {
	tb.Helper()
	dir, err := filepath.Abs("..")
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

// readDeployFile reads a file under deploy/.
func readDeployFile(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir(tb), filepath.FromSlash(name)))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// mustReplace returns s with old replaced once, and fails if old is not in s,
// so that a rejection test never passes because its mutation missed.
func mustReplace(tb testing.TB, s, old, new string) string {
	tb.Helper()
	if !strings.Contains(s, old) {
		tb.Fatalf("mutation target %q not found", old)
	}
	return strings.Replace(s, old, new, 1)
}

// expectProblem fails unless one of got contains want.
func expectProblem(tb testing.TB, got problems, want string) {
	tb.Helper()
	for _, msg := range got {
		if strings.Contains(msg, want) {
			return
		}
	}
	tb.Errorf("no problem mentions %q; got %d:\n%s", want, len(got), strings.Join(got, "\n"))
}

// listenPort returns the port of a listen address such as ":8080".
func listenPort(addr string) (string, bool) {
	i := strings.LastIndex(addr, ":")
	if i < 0 || i == len(addr)-1 {
		return "", false
	}
	return addr[i+1:], true
}
