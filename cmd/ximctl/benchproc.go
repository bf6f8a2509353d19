package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ximd/ximd/internal/load"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
)

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on every
// architecture Go supports).
const clockTicks = 100

// benchProcess is the ximd under test run as a separate all-in-one process, so its CPU is its
// own (the load client and the webhook target stay in this process).
type benchProcess struct {
	cmd     *exec.Cmd
	dir     string
	metrics string // URL of its GET /metrics
}

// startBenchProcess starts bin as an all-in-one node (embedded NATS) on a free loopback port with
// dir as its data dir, and returns the load environment driving it, with its CPU meter.
func startBenchProcess(ctx context.Context, bin, dir string, partitions int, editInterval time.Duration) (load.Env, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return load.Env{}, nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := "bench_" + hex.EncodeToString(b)
	logf, err := os.Create(filepath.Join(dir, "ximd.log"))
	if err != nil {
		return load.Env{}, nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "XIM_DATA_DIR="+dir, "XIM_HTTP_ADDR="+addr, "XIM_AGENT_TOKEN="+token,
		"XIM_NATS_PORT=-1", "XIM_NATS_MONITOR_PORT=-1", "XIM_LOG_LEVEL=warn",
		"XIM_PARTITIONS="+strconv.Itoa(partitions), "XIM_EDIT_INTERVAL="+editInterval.String())
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return load.Env{}, nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &benchProcess{cmd: cmd, dir: dir, metrics: "http://" + addr + "/metrics"}
	stop := func() { p.stop(); logf.Close() }
	if err := waitReady(ctx, "http://"+addr+"/readyz", 60*time.Second); err != nil {
		stop()
		return load.Env{}, nil, fmt.Errorf("%s not ready (log in %s): %w", bin, logf.Name(), err)
	}
	url, err := os.ReadFile(filepath.Join(dir, node.NATSURLFile))
	if err != nil {
		stop()
		return load.Env{}, nil, err
	}
	auth, err := nats.NkeyOptionFromSeed(filepath.Join(dir, node.NATSSeedFile))
	if err != nil {
		stop()
		return load.Env{}, nil, err
	}
	env := load.Env{Node: &testkit.Node{Addr: addr, Token: token}, NATSURL: strings.TrimSpace(string(url)),
		NATSOptions: []nats.Option{auth}, Usage: p.usage, RSS: p.rss}
	return env, stop, nil
}

// usage is what the process has spent so far: its CPU time and its Go runtime's heap
// allocations (go_memstats_mallocs_total and go_memstats_alloc_bytes_total of its /metrics).
func (p *benchProcess) usage() (load.Usage, error) {
	cpu, err := p.cpu()
	if err != nil {
		return load.Usage{}, err
	}
	u := load.Usage{CPU: cpu}
	resp, err := metricsClient.Get(p.metrics)
	if err != nil {
		return u, fmt.Errorf("the node's allocations: %w", err)
	}
	defer resp.Body.Close()
	want := map[string]*uint64{"go_memstats_mallocs_total": &u.Allocs, "go_memstats_alloc_bytes_total": &u.Bytes}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if v := want[name]; v != nil && ok {
			f, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return u, fmt.Errorf("the node's allocations: %s: %w", name, err)
			}
			*v = uint64(f)
			delete(want, name)
		}
	}
	if err := sc.Err(); err != nil {
		return u, fmt.Errorf("the node's allocations: %w", err)
	}
	if len(want) > 0 {
		return u, fmt.Errorf("the node's allocations: %s has no %v", p.metrics, slices.Collect(maps.Keys(want)))
	}
	return u, nil
}

// metricsClient reads the node's /metrics.
var metricsClient = &http.Client{Timeout: 10 * time.Second}

// cpu is the process's CPU time so far (user and system, all threads), from /proc/<pid>/stat.
func (p *benchProcess) cpu() (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("the node's CPU (Linux /proc only): %w", err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces: state is
	// field 3, utime 14 and stime 15.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, errors.New("the node's CPU: unreadable /proc stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("the node's CPU: %w", err)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// rss is the process's resident set size now (VmRSS of /proc/<pid>/status), in bytes.
func (p *benchProcess) rss() (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("the node's RSS (Linux /proc only): %w", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("the node's RSS: %w", err)
			}
			return kib << 10, nil
		}
	}
	return 0, errors.New("the node's RSS: no VmRSS in /proc status")
}

// stop ends the process as an operator would (SIGTERM, then kill after 20 s).
func (p *benchProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

func waitReady(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("GET %s: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
