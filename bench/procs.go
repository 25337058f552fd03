package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Build compiles the seckill binary of the module at dir into outDir and returns its path: the
// bench measures an ordinary build, not the binary that happens to run it.
func Build(ctx context.Context, dir, outDir string) (string, error) {
	bin := filepath.Join(outDir, "seckill")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
}

// Commit names the git commit of dir, with "+dirty" when tracked files differ from it, or "".
func Commit(dir string) string {
	out, err := exec.Command("git", "-C", dir, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += "+dirty"
	}
	return c
}

// ModuleDir returns the directory of the seckill module that holds the working directory, or
// "" when there is none (the bench then runs its own executable).
func ModuleDir() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/seckill/seckill\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// Proc is a process the bench or a test started: a role, or a baseline server.
type Proc struct {
	Name string
	Log  string    // its stdout and stderr
	Born time.Time // when it was started
	// logAt is the size of Log when it was started: what this process wrote lies past it.
	logAt int64
	cmd   *exec.Cmd
	done  chan struct{}
	err   error
}

// Start starts bin with args and env added to this process's environment, its output appended
// to logDir/<name>.log (a restarted role goes on in the same file). The kernel kills it when the
// process that started it dies, also when `go test -timeout` ends that one with a panic that
// runs no cleanup: a role must never outlive its test or its bench.
func Start(bin, name, logDir string, env []string, args ...string) (*Proc, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	logAt, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Log: logPath, Born: time.Now(), logAt: logAt, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended, and how.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Killed reports whether the process ended by SIGKILL: kill -9, a failpoint, or Kill.
func (p *Proc) Killed() bool {
	if exited, _ := p.Exited(); !exited {
		return false
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Kill sends SIGKILL, as kill -9 would, and waits for the end.
func (p *Proc) Kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM, waits up to grace for the drain, then kills. A process that had to be
// killed, or exited with an error, is reported with the end of its log.
func (p *Proc) Stop(grace time.Duration) error {
	if exited, err := p.Exited(); exited {
		if err != nil {
			return fmt.Errorf("%s had exited: %w\n%s", p.Name, err, p.Tail(20))
		}
		return nil
	}
	// A process started a moment ago may not have reached main, where the role catches SIGTERM:
	// the signal's default action would end it, which says nothing of the role. The wait makes
	// that rare; a loaded machine took over 200 ms to reach main, so such a death is told apart
	// below as well.
	time.Sleep(time.Until(p.Born.Add(200 * time.Millisecond)))
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil && !p.diedBeforeItStarted() {
			return fmt.Errorf("%s exited after SIGTERM: %w\n%s", p.Name, p.err, p.Tail(20))
		}
		return nil
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s of SIGTERM; killed\n%s", p.Name, grace, p.Tail(20))
	}
}

// diedBeforeItStarted reports whether SIGTERM ended the process before it wrote a line of its
// log. A role catches SIGTERM from the start of main, before its first line: one the signal
// ended had not got that far, and had done nothing to drain.
func (p *Proc) diedBeforeItStarted() bool {
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		return false
	}
	fi, err := os.Stat(p.Log)
	return err == nil && fi.Size() == p.logAt
}

// Tail returns the last n lines of the process's log.
func (p *Proc) Tail(n int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// LogProblems counts the WARN and ERROR lines of the process's JSON log and returns the first
// one's message and error: a run whose roles were failing quietly is not a measurement of the
// roles working.
func (p *Proc) LogProblems() (warns, errs int, first string) {
	f, err := os.Open(p.Log)
	if err != nil {
		return 0, 0, ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var rec struct{ Level, Msg, Err string }
		if !bytes.Contains(line, []byte(`"level":"WARN"`)) && !bytes.Contains(line, []byte(`"level":"ERROR"`)) {
			continue
		}
		if json.Unmarshal(line, &rec) != nil {
			continue
		}
		if rec.Level == "WARN" {
			warns++
		} else {
			errs++
		}
		if first == "" {
			first = rec.Msg
			if rec.Err != "" {
				first += ": " + rec.Err
			}
		}
	}
	return warns, errs, first
}

// RSS returns the process's resident set size and its peak (VmRSS and VmHWM), in bytes.
func RSS(pid int) (rss, peak int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		fields := strings.Fields(v) // "123456 kB"
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, 0, fmt.Errorf("/proc/%d/status: %s: %q", pid, k, v)
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, 0, err
		}
		if k == "VmRSS" {
			rss = n << 10
		} else {
			peak = n << 10
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
	}
	return rss, peak, sc.Err()
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// CPUTime returns the user plus system CPU time the process has used.
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14 of the whole line
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// FreeAddr returns a loopback address with a port nobody listens on right now, for a process
// to listen on, and not one it returned before. The port is below the kernel's ephemeral range:
// a port ":0" gives is one the kernel also gives to outgoing connections, and the connection of
// some process to Kafka or Redis took it before the process meant for it could listen, failing
// two bench runs in thirty.
func FreeAddr() (string, error) {
	given.Lock()
	defer given.Unlock()
	lo, ok := ephemeralLow()
	for range 1000 {
		addr := "127.0.0.1:0" // the kernel's pick, when no port is below its range
		if ok {
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(minPort+rand.IntN(lo-minPort)))
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken
		}
		ln.Close()
		if a := ln.Addr().String(); !given.addrs[a] {
			given.addrs[a] = true
			return a, nil
		}
	}
	return "", errors.New("no free loopback port in 1000 tries")
}

// minPort is the lowest port FreeAddr gives: above the test services' (deploy/local/services.sh).
const minPort = 20000

// given holds the addresses FreeAddr returned: the process given one may not listen on it yet.
var given = struct {
	sync.Mutex
	addrs map[string]bool
}{addrs: map[string]bool{}}

// ephemeralLow returns the lowest port of the kernel's ephemeral range, and whether a thousand
// ports or more lie between minPort and it.
func ephemeralLow() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	lo, err := strconv.Atoi(f[0])
	return lo, err == nil && lo >= minPort+1000
}

// WaitHTTP waits until GET url answers 200, the process exits, or timeout passes.
func WaitHTTP(ctx context.Context, url string, p *Proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	var last string
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if p != nil {
			if exited, err := p.Exited(); exited {
				return fmt.Errorf("%s exited before it was ready (%v):\n%s", p.Name, err, p.Tail(30))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %s", url, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// FlagsOf returns the flag names a seckill command lists in its --help (without dashes), so
// the bench can adapt to the roles' flags as they evolve.
func FlagsOf(bin, command string) map[string]bool {
	out, _ := exec.Command(bin, command, "--help").CombinedOutput()
	flags := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		t := strings.TrimSpace(line)
		if !strings.HasPrefix(t, "-") {
			continue
		}
		// "--ip-rate=2000": a flag with a default is listed with it.
		name, _, _ := strings.Cut(strings.TrimLeft(strings.Fields(t)[0], "-"), "=")
		if name != "" {
			flags[name] = true
		}
	}
	return flags
}

// HasCommand reports whether the binary knows a command.
func HasCommand(bin, command string) bool {
	return exec.Command(bin, command, "--help").Run() == nil
}

// serviceNames names the test services' processes by their command: what the bench's CPU
// accounting calls them. A java process counts as kafka only when its command line says so.
var serviceNames = map[string]string{"redis-server": "redis", "postgres": "postgres", "java": "kafka"}

// ServiceCPU returns the CPU time each local service (Redis, PostgreSQL with all its backends,
// the Kafka broker) has used, per process: the services a scenario leans on are on the same
// cores, so their share of each request belongs in the account. Services on other hosts are
// not seen.
func ServiceCPU() map[int]ProcCPU {
	dirs, _ := os.ReadDir("/proc")
	out := map[int]ProcCPU{}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			continue
		}
		name, ok := serviceNames[strings.TrimSpace(string(b))]
		if !ok {
			continue
		}
		if name == "kafka" {
			if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err != nil || !bytes.Contains(cmd, []byte("kafka")) {
				continue
			}
		}
		if t, err := CPUTime(pid); err == nil {
			out[pid] = ProcCPU{Name: name, CPU: t}
		}
	}
	return out
}

// ProcCPU is one process's CPU time, under the name the bench gives it.
type ProcCPU struct {
	Name string
	CPU  time.Duration
}

// ServiceCPUSince sums, per service, the CPU time used since before: a process that started
// since counts whole, one that ended is missed (PostgreSQL backends of the bench's pools live
// through a scenario).
func ServiceCPUSince(before map[int]ProcCPU) map[string]time.Duration {
	out := map[string]time.Duration{}
	for pid, now := range ServiceCPU() {
		out[now.Name] += now.CPU - before[pid].CPU
	}
	return out
}
