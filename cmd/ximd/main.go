// Command ximd is the connector daemon: `ximd` (or `ximd all`) runs one complete node with an
// embedded NATS server; `ximd gateway` and `ximd worker` run one role against XIM_NATS_URL.
// Configuration is by XIM_* environment variables (see README).
package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lmittmann/tint"

	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/pipeline/tracing"
)

const usage = `usage: ximd [all|gateway|worker] [--stages deliver,assemble,...]
       ximd --demo

  all      one complete node: embedded NATS (unless XIM_NATS_URL is set), HTTP edge, workers (default)
  gateway  the HTTP/WebSocket edge only, against XIM_NATS_URL
  worker   the pipeline consumers only, against XIM_NATS_URL
  --stages the worker stages to run (XIM_STAGES; default all): deliver (finals, tool
           invocations), assemble (deltas), activity, acks (xAgent's acks of user messages)
  healthcheck [live]
           exit 0 if the ximd on XIM_HTTP_ADDR is ready (GET /readyz; "live": /healthz);
           the container healthcheck
  demo-agent
           the demo against a running ximd: opens webchat channel "demo" on XIM_DEMO_GATEWAY
           (default 127.0.0.1:8080) and answers it over that gateway's /v1/ws
  --demo   one complete node plus a webchat channel "demo" answered by a built-in demo agent
           over the real /v1/ws edge; prints the page URL to open (docs/webchat.md)

Configuration is by XIM_* environment variables; see README.md.
`

func main() { os.Exit(run(os.Args[1:], os.Getenv, os.Stderr)) }

func run(args []string, getenv func(string) string, stderr io.Writer) int {
	role := node.RoleAll
	demo := len(args) > 0 && (args[0] == "--demo" || args[0] == "-demo")
	if demo {
		args = args[1:]
	}
	if len(args) > 0 {
		switch args[0] {
		case "all", "gateway", "worker":
			role = node.Role(args[0])
			stages, err := stagesFlag(args[1:])
			if err != nil {
				fmt.Fprintf(stderr, "ximd: %v\n\n%s", err, usage)
				return 2
			}
			if stages != "" {
				env := getenv
				getenv = func(k string) string {
					if k == "XIM_STAGES" {
						return stages
					}
					return env(k)
				}
			}
		case "healthcheck":
			return runHealthcheck(args[1:], getenv, stderr)
		case "demo-agent":
			return runDemoAgent(getenv, os.Stdout, stderr)
		case "-h", "--help", "help":
			fmt.Fprint(stderr, usage)
			return 0
		default:
			fmt.Fprintf(stderr, "ximd: unknown command %q\n\n%s", args[0], usage)
			return 2
		}
	}
	if demo && role != node.RoleAll {
		fmt.Fprintf(stderr, "ximd: --demo runs one complete node; it takes no role\n\n%s", usage)
		return 2
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
	stopTracing, traced, err := tracing.Setup(ctx, string(cfg.Role))
	if err != nil {
		logger.Error("ximd_tracing", "err", err)
		return 2
	}
	if traced {
		logger.Info("tracing_on", "sampler", cmp.Or(getenv("OTEL_TRACES_SAMPLER"), "parentbased_always_on"))
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			logger.Warn("tracing_flush_failed", "err", err)
		}
	}()
	if demo {
		return runDemo(ctx, n, getenv("XIM_PUBLIC_URL"), logger)
	}
	if err := n.Run(ctx); err != nil {
		logger.Error("ximd_failed", "err", err)
		return 1
	}
	logger.Info("ximd_stopped")
	return 0
}

// stagesFlag reads "--stages a,b" (or "--stages=a,b"), the flag form of XIM_STAGES; anything
// else after the role is an error.
func stagesFlag(args []string) (string, error) {
	switch {
	case len(args) == 0:
		return "", nil
	case len(args) == 1 && strings.HasPrefix(args[0], "--stages="):
		return strings.TrimPrefix(args[0], "--stages="), nil
	case len(args) == 2 && args[0] == "--stages":
		return args[1], nil
	}
	return "", fmt.Errorf("unexpected arguments %q (a role takes only --stages)", strings.Join(args, " "))
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
