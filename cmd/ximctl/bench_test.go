package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/internal/load"
)

// ximctl bench with stderr not a terminal: plain progress lines, one per phase at its end with
// every item done, in the order of the run (and periodic ones for a long phase); no terminal
// control characters; the report on stdout.
func TestBench_ProgressLinesWhenNotATerminal(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCommand(t, "bench", "-channels", "2", "-messages", "2", "-deltas", "10",
		"-finals", "200", "-delta-bytes", "8", "-window", "32", "-paced", "200ms", "-raw", "2000")
	if code != 0 {
		t.Fatalf("bench exited %d: %s", code, errOut)
	}
	t.Logf("stderr:\n%s", errOut)
	if strings.ContainsAny(errOut, "\r\033") {
		t.Fatalf("terminal control characters in non-terminal progress: %q", errOut)
	}
	var ends []string
	for _, l := range strings.Split(strings.TrimSpace(errOut), "\n") {
		var done, total int
		if !strings.HasPrefix(l, "bench: ") {
			t.Fatalf("progress line %q", l)
		}
		phase, rest, ok := strings.Cut(strings.TrimPrefix(l, "bench: "), " done: ")
		if !ok {
			continue // a periodic line
		}
		if _, err := fmt.Sscanf(rest, "%d/%d in", &done, &total); err != nil || done != total || total == 0 {
			t.Fatalf("phase end line %q: done %d of %d", l, done, total)
		}
		ends = append(ends, phase)
	}
	want := []string{load.PhaseRaw, load.PhaseDeltasMax, load.PhaseFinalsMax, load.PhaseFinalsHalf, load.PhaseDeltasHalf}
	if strings.Join(ends, "|") != strings.Join(want, "|") {
		t.Fatalf("phase end lines %q, want %q", ends, want)
	}
	if !strings.Contains(out, "raw JetStream async publish") || !strings.Contains(out, "finals end to end") {
		t.Fatalf("no report on stdout:\n%s", out)
	}
}

// On a terminal the bar is redrawn in place as the phase advances and cleared before a result
// line is written.
func TestProgressView_TerminalBar(t *testing.T) {
	var w bytes.Buffer // written under v.mu
	v := &progressView{w: writerFunc(func(b []byte) (int, error) { return w.Write(b) }), tty: true, interval: time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); v.run(ctx) }()
	v.update(load.Progress{Phase: load.PhaseFinalsMax, Done: 0, Total: 200})
	pollUntil(t, "the bar redrawn at 25%", func() bool {
		v.update(load.Progress{Phase: load.PhaseFinalsMax, Done: 50, Total: 200}) // drawn once the throttle allows
		v.mu.Lock()
		defer v.mu.Unlock()
		return strings.Contains(w.String(), "(50/200)")
	})
	var result bytes.Buffer
	fmt.Fprintln(v.lines(&result), "finals: 200 in 1s")
	cancel()
	<-done
	got := w.String()
	if !strings.Contains(got, "\r"+load.PhaseFinalsMax) || !strings.Contains(got, " 25% |") {
		t.Fatalf("bar %q", got)
	}
	if !strings.HasSuffix(got, "\x1b[2K\r") || result.String() != "finals: 200 in 1s\n" {
		t.Fatalf("bar not cleared for the result line: %q / %q", got, result.String())
	}
}

// ximctl bench -bin runs the ximd under test as a separate process and reports its CPU per raw
// publish, per delta and per final (the figures issue 18's table asks for), read from /proc,
// and its heap allocations per delta and per final, read from its /metrics.
func TestBench_BinReportsTheNodesCPUPerPacket(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the node's CPU is read from /proc")
	}
	bin := filepath.Join(t.TempDir(), "ximd")
	if out, err := exec.Command("go", "build", "-o", bin, "../ximd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	code, out, errOut := runCommand(t, "bench", "-bin", bin, "-no-progress", "-channels", "2", "-messages", "2", "-deltas", "10",
		"-finals", "200", "-delta-bytes", "8", "-window", "32", "-paced", "200ms", "-raw", "2000")
	if code != 0 {
		t.Fatalf("bench exited %d: %s", code, errOut)
	}
	for _, line := range []string{"node: all-in-one process", "node CPU per raw publish", "node CPU per delta", "node CPU per final"} {
		if !strings.Contains(out, line) {
			t.Fatalf("no %q in the report:\n%s", line, out)
		}
	}
	var perFinal, allocs, bytes float64
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "node CPU per final"); ok {
			_, _ = fmt.Sscanf(strings.TrimSpace(rest), "%f µs %f allocations %f bytes", &perFinal, &allocs, &bytes)
		}
	}
	if perFinal <= 0 {
		t.Fatalf("CPU per final %v µs: the process's CPU was not read\n%s", perFinal, out)
	}
	// A final is at least its decoded packet, a stored message and a webhook call.
	if allocs < 10 || bytes < 1000 {
		t.Fatalf("%v allocations, %v bytes per final: the node's /metrics were not read\n%s", allocs, bytes, out)
	}
}
