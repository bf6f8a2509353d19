package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// runHealthcheck asks this machine's ximd for GET /readyz (or /healthz with "live") on
// XIM_HTTP_ADDR and exits 0 when it answers 200: the container healthcheck of a FROM-scratch
// image, which has no curl.
func runHealthcheck(args []string, getenv func(string) string, stderr io.Writer) int {
	path := "/readyz"
	if len(args) > 0 && args[0] == "live" {
		path = "/healthz"
	}
	addr := getenv("XIM_HTTP_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		fmt.Fprintf(stderr, "ximd healthcheck: XIM_HTTP_ADDR=%q: %v\n", addr, err)
		return 2
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1" // listening on every interface: ask over loopback
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+path, nil)
	if err != nil {
		fmt.Fprintf(stderr, "ximd healthcheck: %v\n", err)
		return 2
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "ximd healthcheck: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		fmt.Fprintf(stderr, "ximd healthcheck: %s %s: %s\n", path, resp.Status, body)
		return 1
	}
	return 0
}
