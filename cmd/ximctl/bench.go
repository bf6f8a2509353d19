package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/test/load"
	"github.com/ximd/ximd/test/testkit"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ximctl bench", flag.ContinueOnError)
	cfg := load.DefaultConfig()
	fs.IntVar(&cfg.Channels, "channels", cfg.Channels, "channels, each bound to the loopback webhook target")
	fs.IntVar(&cfg.Messages, "messages", cfg.Messages, "streamed messages per channel in the delta phase")
	fs.IntVar(&cfg.Deltas, "deltas", cfg.Deltas, "deltas per streamed message")
	fs.IntVar(&cfg.Finals, "finals", cfg.Finals, "direct finals in the finals phase")
	fs.IntVar(&cfg.DeltaBytes, "delta-bytes", cfg.DeltaBytes, "text bytes per delta and per final")
	fs.IntVar(&cfg.Window, "window", cfg.Window, "finals in flight (sent, not yet acked)")
	fs.DurationVar(&cfg.PacedDuration, "paced", cfg.PacedDuration, "length of each half-load phase")
	fs.IntVar(&cfg.RawMessages, "raw", cfg.RawMessages, "messages of the raw JetStream baseline")
	partitions := fs.Int("partitions", node.Defaults().Store.Partitions, "XIM_PARTITIONS of the node under test")
	editInterval := fs.Duration("edit-interval", 0, "XIM_EDIT_INTERVAL of the node under test")
	dataDir := fs.String("data", "", "data dir of the node under test (default: a fresh temporary dir)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (node, target and client) to this file")
	noProgress := fs.Bool("no-progress", false, "no progress on stderr")
	setUsage(fs, stderr, "[flags]", "Load tool: drives deltas and finals through an in-process ximd; progress on stderr, figures on stdout.")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	cfg.Progress = stdout
	stopProgress := func() {}
	if !*noProgress {
		v := newProgressView(stderr)
		stdout = v.lines(stdout)
		cfg.Progress, cfg.OnProgress = stdout, v.update
		pctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); v.run(pctx) }()
		stopProgress = func() { stop(); <-done }
		defer stopProgress() // on an early return; a second call returns at once
	}
	dir := *dataDir
	if dir == "" {
		d, err := os.MkdirTemp("", "ximd-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	n, err := testkit.StartNode(testkit.NodeOptions{DataDir: dir, Mutate: func(c *node.Config) {
		c.Store.Partitions = *partitions
		c.EditInterval = *editInterval
	}})
	if err != nil {
		return err
	}
	defer n.Stop()
	fmt.Fprintf(stdout, "node: %d partitions, edit interval %s, data %s\n", *partitions, *editInterval, dir)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	rep, err := load.Run(ctx, cfg, load.Env{Node: n, NATSURL: n.NATSURL()})
	stopProgress()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n%s(%d deltas, %d finals in %s)\n", rep, rep.Deltas, rep.Finals, time.Since(start).Round(time.Second))
	return nil
}
