package main

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/ximd/ximd/cmd/internal/demo"
)

// runDemoAgent runs the demo against a running ximd (a gateway of a cluster): it opens the
// webchat channel "demo" through the HTTP API of XIM_DEMO_GATEWAY (host:port, default
// 127.0.0.1:8080) with XIM_AGENT_TOKEN, prints the page URL under XIM_PUBLIC_URL, and answers
// on that gateway's /v1/ws until SIGTERM. docker-compose's optional "demo" service runs it.
func runDemoAgent(getenv func(string) string, stdout, stderr io.Writer) int {
	addr := getenv("XIM_DEMO_GATEWAY")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	token := getenv("XIM_AGENT_TOKEN")
	if token == "" {
		fmt.Fprintln(stderr, "ximd demo-agent: XIM_AGENT_TOKEN is required (the gateways' token)")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := demo.Run(ctx, addr, token, getenv("XIM_PUBLIC_URL"), stdout, io.Discard, stderr); err != nil {
		fmt.Fprintf(stderr, "ximd demo-agent: %v\n", err)
		return 1
	}
	return 0
}
