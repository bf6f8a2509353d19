package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// `ximd healthcheck` (the container healthcheck) asks GET /readyz, or /healthz with "live", on
// XIM_HTTP_ADDR, over loopback when that address listens on every interface.
func TestHealthcheck(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz", r.URL.Path == "/readyz" && ready.Load():
			w.WriteHeader(http.StatusOK)
		default:
			http.Error(w, `{"code":"unavailable"}`, http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	tests := []struct {
		name     string
		addr     string
		args     []string
		ready    bool
		wantCode int
	}{
		{name: "ready", addr: "127.0.0.1:" + port, ready: true, wantCode: 0},
		{name: "not ready", addr: "127.0.0.1:" + port, ready: false, wantCode: 1},
		{name: "live while not ready", addr: "127.0.0.1:" + port, args: []string{"live"}, ready: false, wantCode: 0},
		{name: "every interface is asked over loopback", addr: "0.0.0.0:" + port, ready: true, wantCode: 0},
		{name: "nothing listening", addr: "127.0.0.1:1", ready: true, wantCode: 1},
		{name: "bad address", addr: "no-port", wantCode: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready.Store(tt.ready)
			var stderr bytes.Buffer
			env := map[string]string{"XIM_HTTP_ADDR": tt.addr}
			code := run(append([]string{"healthcheck"}, tt.args...), func(k string) string { return env[k] }, &stderr)
			if code != tt.wantCode {
				t.Fatalf("healthcheck = %d (%s), want %d", code, stderr.String(), tt.wantCode)
			}
		})
	}
}
