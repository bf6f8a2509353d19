package test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ximd/ximd/pipeline/node"
)

// XIM_PPROF_ADDR serves the Go profiler on a listener of its own (never on the edge), so
// operators profile a running node with `go tool pprof`; it is off by default.
func TestPprof_OwnListenerOffByDefault(t *testing.T) {
	plain := newEnv(t, envOptions{})
	if plain.node.PprofAddr() != "" {
		t.Fatalf("the profiler listens on %s without XIM_PPROF_ADDR", plain.node.PprofAddr())
	}
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { c.PprofAddr = "127.0.0.1:0" }})
	addr := e.node.PprofAddr()
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "heap profile") {
		t.Fatalf("GET /debug/pprof/heap on %s: %d", addr, resp.StatusCode)
	}
	if status, _, _ := e.node.Do(http.MethodGet, "/debug/pprof/heap?debug=1", nil); status != http.StatusNotFound {
		t.Fatalf("the edge serves the profiler: %d", status)
	}
}
