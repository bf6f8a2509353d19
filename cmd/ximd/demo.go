package main

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/ximd/ximd/cmd/internal/demo"
	"github.com/ximd/ximd/pipeline/node"
)

// runDemo runs the all-in-one node n and, once it serves, the demo (cmd/internal/demo): the
// webchat channel "demo" opened through the HTTP API, its page URL on stdout, and the demo
// agent on the real WebSocket edge. It returns the exit code.
func runDemo(ctx context.Context, n *node.Node, publicURL string, logger *slog.Logger) int {
	nctx, stopNode := context.WithCancel(ctx)
	defer stopNode()
	done := make(chan error, 1)
	go func() { done <- n.Run(nctx) }()
	select {
	case <-n.Ready():
	case err := <-done:
		logger.Error("ximd_failed", "err", err)
		return 1
	}
	dctx, stopDemo := context.WithCancel(ctx)
	defer stopDemo()
	demoDone := make(chan error, 1)
	go func() {
		// The agent prints each packet it sends and receives only at debug level.
		var packets io.Writer = io.Discard
		if logger.Enabled(ctx, slog.LevelDebug) {
			packets = os.Stderr
		}
		demoDone <- demo.Run(dctx, n.HTTPAddr(), n.Token(), publicURL, os.Stdout, packets, os.Stderr)
	}()
	code := 0
	var nodeErr error
	select {
	case err := <-demoDone: // ctx ended, or the demo could not start
		if err != nil {
			logger.Error("ximd_demo_failed", "err", err)
			code = 1
		}
		stopNode()
		nodeErr = <-done
	case nodeErr = <-done:
		stopDemo()
		<-demoDone
	}
	if nodeErr != nil {
		logger.Error("ximd_failed", "err", nodeErr)
		return 1
	}
	if code == 0 {
		logger.Info("ximd_stopped")
	}
	return code
}
