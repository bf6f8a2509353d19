// Command ximd is the connector daemon: `ximd` (or `ximd all`) runs one complete node with an
// embedded NATS server; `ximd gateway` and `ximd worker` run one role against XIM_NATS_URL.
// Configuration is by XIM_* environment variables (see README).
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/lmittmann/tint"

	"github.com/ximd/ximd/pipeline/node"
)

const usage = `usage: ximd [all|gateway|worker]

  all      one complete node: embedded NATS (unless XIM_NATS_URL is set), HTTP edge, workers (default)
  gateway  the HTTP/WebSocket edge only, against XIM_NATS_URL
  worker   the pipeline consumers only, against XIM_NATS_URL

Configuration is by XIM_* environment variables; see README.md.
`

func main() { os.Exit(run(os.Args[1:], os.Getenv, os.Stderr)) }

func run(args []string, getenv func(string) string, stderr io.Writer) int {
	role := node.RoleAll
	if len(args) > 0 {
		switch args[0] {
		case "all", "gateway", "worker":
			role = node.Role(args[0])
		case "-h", "--help", "help":
			fmt.Fprint(stderr, usage)
			return 0
		default:
			fmt.Fprintf(stderr, "ximd: unknown command %q\n\n%s", args[0], usage)
			return 2
		}
	}
	cfg, err := node.FromEnv(role, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "ximd: configuration:\n%v\n", err)
		return 2
	}
	logger := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	n, err := node.New(cfg, logger)
	if err != nil {
		logger.Error("ximd_config", "err", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := n.Run(ctx); err != nil {
		logger.Error("ximd_failed", "err", err)
		return 1
	}
	logger.Info("ximd_stopped")
	return 0
}

// newLogger: tint-coloured text on a terminal, JSON otherwise (XIM_LOG_FORMAT overrides).
func newLogger(w io.Writer, level, format string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "text"
			}
		}
	}
	if format == "text" {
		return slog.New(tint.NewHandler(w, &tint.Options{Level: lv, TimeFormat: time.TimeOnly}))
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv}))
}
