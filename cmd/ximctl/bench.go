package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/internal/load"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/subjects"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, bf, err := parseBench(args, stderr)
	if err != nil {
		return err
	}
	if bf.plot != "" {
		cfg.Sweep = load.DefaultSweep
	}
	cfg.Progress = stdout
	stdout, stopProgress := startProgress(ctx, &cfg, stdout, stderr, bf.noProgress)
	defer stopProgress() // on an early return; a second call returns at once
	dir, removeDir, err := benchDataDir(bf.dataDir)
	if err != nil {
		return err
	}
	defer removeDir()
	env, stop, where, err := startBenchNode(ctx, bf, dir)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(stdout, "node: %s, %d partitions, edit interval %s, data %s\n", where, bf.partitions, bf.editInterval, dir)
	if bf.cpuProfile != "" {
		stopCPUProfile, err := startCPUProfile(bf.cpuProfile)
		if err != nil {
			return err
		}
		defer stopCPUProfile()
	}
	start := time.Now()
	rep, err := load.Run(ctx, cfg, env)
	stopProgress()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n%s(%d deltas, %d finals in %s)\n", rep, rep.Deltas, rep.Finals, time.Since(start).Round(time.Second))
	if bf.plot != "" {
		return writeBenchPlot(stdout, bf, rep)
	}
	return nil
}

// benchFlags are ximctl bench's flags about the node under test and the run's outputs (the
// load's own are in load.Config).
type benchFlags struct {
	partitions   int
	editInterval time.Duration
	dataDir      string
	workers      int
	cpuProfile   string
	bin          string
	noProgress   bool
	plot         string
}

// parseBench parses ximctl bench's arguments.
func parseBench(args []string, stderr io.Writer) (load.Config, benchFlags, error) {
	fs := flag.NewFlagSet("ximctl bench", flag.ContinueOnError)
	cfg := load.DefaultConfig()
	fs.IntVar(&cfg.Channels, "channels", cfg.Channels, "channels, each bound to the loopback webhook target")
	fs.IntVar(&cfg.Messages, "messages", cfg.Messages, "streamed messages per channel in the delta phase")
	fs.IntVar(&cfg.Streams, "streams", cfg.Streams, "messages of a channel streaming at once, their deltas interleaved (0: all -messages at once)")
	fs.IntVar(&cfg.Deltas, "deltas", cfg.Deltas, "deltas per streamed message")
	fs.IntVar(&cfg.Finals, "finals", cfg.Finals, "direct finals in the finals phase")
	fs.IntVar(&cfg.DeltaBytes, "delta-bytes", cfg.DeltaBytes, "text bytes per delta and per final")
	fs.IntVar(&cfg.Window, "window", cfg.Window, "finals in flight (sent, not yet acked)")
	fs.DurationVar(&cfg.PacedDuration, "paced", cfg.PacedDuration, "length of each half-load phase")
	fs.IntVar(&cfg.RawMessages, "raw", cfg.RawMessages, "messages of the raw JetStream baseline")
	fs.IntVar(&cfg.Buffers, "buffers", cfg.Buffers, "delta buffers held open at once for the node's RSS (with -bin; 0: skip)")
	var bf benchFlags
	fs.IntVar(&bf.partitions, "partitions", node.Defaults().Store.Partitions, "XIM_PARTITIONS of the node under test")
	fs.DurationVar(&bf.editInterval, "edit-interval", 0, "XIM_EDIT_INTERVAL of the node under test")
	fs.StringVar(&bf.dataDir, "data", "", "data dir of the node under test (default: a fresh temporary dir)")
	fs.IntVar(&bf.workers, "workers", 0, "0: one all-in-one node; N: a NATS server, a gateway and N workers (in this process), sharing the partitions")
	fs.StringVar(&bf.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (node, target and client) to this file")
	fs.StringVar(&bf.bin, "bin", "", "run this ximd binary as the node under test, a separate all-in-one process, and report its CPU per packet (Linux); default: the node runs in this process")
	fs.BoolVar(&bf.noProgress, "no-progress", false, "no progress on stderr")
	fs.StringVar(&bf.plot, "plot", "", "also offer "+sweepList()+" of the maximum rates (each -paced long) and draw achieved rate and p99 against offered load in this SVG file")
	setUsage(fs, stderr, "[flags]", "Load tool: drives deltas and finals through an in-process ximd; progress on stderr, figures on stdout.")
	if err := parse(fs, args, stderr); err != nil {
		return cfg, bf, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return cfg, bf, errUsage
	}
	return cfg, bf, nil
}

// startProgress shows the run's progress on stderr unless off. It returns where the figures
// go (stdout, kept clear of the progress line) and the function that stops the view; calling
// it again returns at once.
func startProgress(ctx context.Context, cfg *load.Config, stdout, stderr io.Writer, off bool) (io.Writer, func()) {
	if off {
		return stdout, func() {}
	}
	v := newProgressView(stderr)
	stdout = v.lines(stdout)
	cfg.Progress, cfg.OnProgress = stdout, v.update
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); v.run(pctx) }()
	return stdout, func() { stop(); <-done }
}

// benchDataDir is the data dir of the node under test: dir, or a fresh temporary one that the
// returned function removes.
func benchDataDir(dir string) (string, func(), error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	d, err := os.MkdirTemp("", "ximd-bench-")
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}

// startBenchNode starts the node under test in dir: a separate ximd process (-bin) or nodes in
// this process (-workers). It returns the load's environment, the function that stops the
// node, and a description of where it runs.
func startBenchNode(ctx context.Context, bf benchFlags, dir string) (load.Env, func(), string, error) {
	where := topology(bf.workers)
	switch {
	case bf.bin != "" && bf.workers > 0:
		return load.Env{}, nil, "", errors.New("-bin runs one all-in-one process; -workers runs in this process")
	case bf.bin != "":
		env, stop, err := startBenchProcess(ctx, bf.bin, dir, bf.partitions, bf.editInterval)
		return env, stop, "all-in-one process " + bf.bin, err
	}
	mutate := func(c *node.Config) {
		c.Store.Partitions = bf.partitions
		c.EditInterval = bf.editInterval
	}
	n, stop, err := startBenchNodes(ctx, dir, bf.workers, mutate)
	return load.Env{Node: n}, stop, where, err
}

// startCPUProfile writes a CPU profile to path until the returned function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeBenchPlot draws rep's sweep into the SVG file -plot names.
func writeBenchPlot(stdout io.Writer, bf benchFlags, rep load.Report) error {
	f, err := os.Create(bf.plot)
	if err != nil {
		return err
	}
	title := fmt.Sprintf("ximd %s, %d partitions, %d CPUs, %s", topology(bf.workers), bf.partitions, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02"))
	if err := errors.Join(load.Plot(f, rep, title), f.Close()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "plot: %s\n", bf.plot)
	return nil
}

// sweepList names the sweep's loads for the -plot help: "10%, 25%, ... and 100%".
func sweepList() string {
	var parts []string
	for _, f := range load.DefaultSweep {
		parts = append(parts, fmt.Sprintf("%.0f%%", 100*f))
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

func topology(workers int) string {
	if workers == 0 {
		return "all-in-one"
	}
	return fmt.Sprintf("gateway + %d workers", workers)
}

// startBenchNodes starts the ximd under test: one all-in-one node, or a NATS server, a gateway
// and the given number of workers, once the workers share the partitions. It returns the node
// whose edge the load drives and a function that stops everything.
func startBenchNodes(ctx context.Context, dir string, workers int, mutate func(*node.Config)) (*testkit.Node, func(), error) {
	if workers == 0 {
		n, err := testkit.StartNode(testkit.NodeOptions{DataDir: dir, Mutate: mutate})
		if err != nil {
			return nil, nil, err
		}
		return n, func() { _ = n.Stop() }, nil
	}
	srv, err := pipeline.StartServer(pipeline.ServerConfig{DataDir: filepath.Join(dir, "nats"), Port: -1}, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, nil, err
	}
	var nodes []*testkit.Node
	stop := func() {
		for i := len(nodes) - 1; i >= 0; i-- {
			_ = nodes[i].Stop()
		}
		srv.Shutdown()
	}
	start := func(role node.Role, i int) (*testkit.Node, error) {
		n, err := testkit.StartNode(testkit.NodeOptions{DataDir: filepath.Join(dir, fmt.Sprintf("%s-%d", role, i)), Mutate: func(c *node.Config) {
			mutate(c)
			c.Role, c.NATSURL = role, srv.ClientURL()
		}})
		if err == nil {
			nodes = append(nodes, n)
		}
		return n, err
	}
	gw, err := start(node.RoleGateway, 0)
	for i := 0; err == nil && i < workers; i++ {
		_, err = start(node.RoleWorker, i)
	}
	if err != nil {
		stop()
		return nil, nil, err
	}
	// Settled: every worker hears the others, and every partition has only its owner's pull
	// waiting (the pulls a worker made while it still served every partition have expired), so
	// no partition moves while the load runs.
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		stop()
		return nil, nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		stop()
		return nil, nil, err
	}
	settled := func() bool {
		for _, w := range nodes[1:] {
			if testkit.GaugeValue(w.Metrics(), "ximd_workers_live") != float64(workers) {
				return false
			}
		}
		st, err := js.Stream(ctx, subjects.StreamIn)
		if err != nil {
			return false
		}
		lister := st.ListConsumers(ctx)
		for ci := range lister.Info() {
			if ci.NumWaiting > 1 {
				return false
			}
		}
		return lister.Err() == nil
	}
	for deadline := time.Now().Add(15 * time.Second); !settled(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return nil, nil, fmt.Errorf("the %d workers did not share the partitions within 15s", workers)
		}
	}
	return gw, stop, nil
}
