package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// servePprof serves the Go profiler (net/http/pprof, under /debug/pprof/) on XIM_PPROF_ADDR, on a
// listener of its own so the edge never exposes it, until the returned function shuts it down.
// An empty address serves nothing; an address without a host binds loopback.
func (n *Node) servePprof(log *slog.Logger) (func(context.Context), error) {
	if n.cfg.PprofAddr == "" {
		return func(context.Context) {}, nil
	}
	ln, err := net.Listen("tcp", n.cfg.PprofAddr)
	if err != nil {
		return nil, fmt.Errorf("XIM_PPROF_ADDR: listen %s: %w", n.cfg.PprofAddr, err)
	}
	n.pprofAddr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("pprof_failed", "err", err) // the node goes on without its profiler
		}
	}()
	log.Info("pprof_serving", "addr", n.pprofAddr, "profile", "go tool pprof http://"+n.pprofAddr+"/debug/pprof/profile?seconds=30")
	return func(ctx context.Context) { _ = srv.Shutdown(ctx) }, nil
}

// PprofAddr is the address the profiler listens on ("" when XIM_PPROF_ADDR is empty).
func (n *Node) PprofAddr() string { return n.pprofAddr }
