package faultkit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
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

// Build compiles pkg (a package path of this module or a dependency, e.g.
// "github.com/ximd/ximd/cmd/ximd") into dir/name and returns the binary's path. The build is
// written to a temporary name and renamed, so concurrent test binaries never see half a file.
func Build(dir, name, pkg string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	tmp, err := os.CreateTemp(dir, name+".build-*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	out, err := exec.Command("go", "build", "-o", tmp.Name(), pkg).CombinedOutput()
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, os.Rename(tmp.Name(), bin)
}

var (
	buildMu    sync.Mutex
	buildCache = map[string]string{}
)

// BuildOnce is Build into a directory of this process under os.TempDir(), once per package:
// the fault tests of one `go test` run share their ximd and nats-server builds.
func BuildOnce(name, pkg string) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := buildCache[pkg]; ok {
		return bin, nil
	}
	// One directory per test process (a later build must not replace the binary a running
	// test restarts); directories of processes that are gone are removed.
	root := filepath.Join(os.TempDir(), fmt.Sprintf("ximd-faultkit-%d", os.Getuid()))
	if len(buildCache) == 0 {
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			if pid, err := strconv.Atoi(e.Name()); err == nil && pid != os.Getpid() {
				if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
					_ = os.RemoveAll(filepath.Join(root, e.Name()))
				}
			}
		}
	}
	bin, err := Build(filepath.Join(root, strconv.Itoa(os.Getpid())), name, pkg)
	if err != nil {
		return "", err
	}
	buildCache[pkg] = bin
	return bin, nil
}

// FreeAddr returns a loopback address with a port free at the time of the call.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// FreePort returns a loopback port free at the time of the call.
func FreePort() (int, error) {
	a, err := FreeAddr()
	if err != nil {
		return 0, err
	}
	_, p, _ := net.SplitHostPort(a)
	return strconv.Atoi(p)
}

// Proc is a process that is started, killed and restarted with the same binary, arguments and
// environment. Its output (every run, separated by a marker line) goes to LogPath, and to
// stderr too when XIMTEST_LOG is set.
type Proc struct {
	Name    string
	Bin     string
	Args    []string
	Env     []string // added to os.Environ()
	LogPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	runs    int
	log     *os.File
	hwmKiB  int64 // highest VmHWM seen over every run
}

// Start starts a new run; the previous one must have ended.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !Closed(p.done) {
		return fmt.Errorf("%s: still running", p.Name)
	}
	if p.log == nil {
		f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		p.log = f
	}
	p.runs++
	fmt.Fprintf(p.log, "=== %s run %d at %s\n", p.Name, p.runs, time.Now().Format(time.RFC3339Nano))
	var w io.Writer = p.log
	if os.Getenv("XIMTEST_LOG") != "" {
		w = io.MultiWriter(p.log, prefixWriter{p.Name, os.Stderr})
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	done := p.done
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

type prefixWriter struct {
	name string
	w    io.Writer
}

func (p prefixWriter) Write(b []byte) (int, error) {
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fmt.Fprintf(p.w, "[%s] %s\n", p.name, sc.Text())
	}
	return len(b), nil
}

// PID is the current run's process id (0 when none).
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Running reports whether the current run has not ended.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !Closed(p.done)
}

// Runs counts the runs started.
func (p *Proc) Runs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs
}

// SampleRSS reads VmHWM (peak resident set) of the running process and keeps the highest value
// seen; it returns that peak in KiB.
func (p *Proc) SampleRSS() int64 {
	pid := p.PID()
	if pid != 0 && p.Running() {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
					p.mu.Lock()
					p.hwmKiB = max(p.hwmKiB, n)
					p.mu.Unlock()
				}
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hwmKiB
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() error {
	return p.signalAndWait(syscall.SIGKILL, 10*time.Second)
}

// Term sends SIGTERM and waits up to timeout; it returns the exit code (-1 when killed by a
// signal) and how long the process took. Past the timeout the process is killed and an error
// returned.
func (p *Proc) Term(timeout time.Duration) (code int, took time.Duration, err error) {
	start := time.Now()
	if err := p.signalAndWait(syscall.SIGTERM, timeout); err != nil {
		_ = p.Kill()
		return -1, time.Since(start), err
	}
	took = time.Since(start)
	p.mu.Lock()
	werr := p.waitErr
	p.mu.Unlock()
	var ee *exec.ExitError
	switch {
	case werr == nil:
		return 0, took, nil
	case errors.As(werr, &ee):
		return ee.ExitCode(), took, nil
	default:
		return -1, took, werr
	}
}

func (p *Proc) signalAndWait(sig syscall.Signal, timeout time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || Closed(done) {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s: still running %s after %v", p.Name, timeout, sig)
	}
}

// Close kills the process (if running) and closes its log.
func (p *Proc) Close() {
	_ = p.Kill()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.log != nil {
		p.log.Close()
		p.log = nil
	}
}

// LogTail returns the last n lines of the process's log file.
func (p *Proc) LogTail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// LogCount counts the log lines (all runs) that contain s.
func (p *Proc) LogCount(s string) int {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), s)
}

// WaitHTTP200 polls url until it answers 200, the process ends, or the timeout passes.
func WaitHTTP200(ctx context.Context, url string, timeout time.Duration, alive func() bool) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if alive != nil && !alive() {
			return fmt.Errorf("%s: the process ended", url)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not 200 within %s (last: %v)", url, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// Closed reports whether c is closed.
func Closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
