package test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/pipeline"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/test/testkit"
)

func processed(t *testing.T, g prometheus.Gatherer) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "ximd_worker_packets_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// edge-api §1, §5.1: a gateway and two worker processes on one NATS. Each partition is served by
// one worker at a time (a pinned consumer group), so a channel's finals reach the target in
// order and exactly once; when the serving worker leaves mid-stream, the other takes over.
func TestWorkers_TakeOverKeepsChannelOrderAndExactlyOnce(t *testing.T) {
	t.Parallel()
	srv, err := pipeline.StartServer(pipeline.ServerConfig{DataDir: t.TempDir(), Port: -1}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown) // after the nodes' own cleanups (LIFO)
	start := func(role node.Role) *testkit.Node {
		n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir(), Mutate: func(c *node.Config) {
			c.Role, c.NATSURL = role, srv.ClientURL()
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Stop() })
		return n
	}
	first := start(node.RoleWorker) // pulls first: every partition is pinned to it
	gw := start(node.RoleGateway)
	second := start(node.RoleWorker)
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} { // a worker serves the ops routes
		if status, _, err := first.DoAuth(http.MethodGet, path, nil, ""); err != nil || status != 200 {
			t.Fatalf("worker %s: %d %v", path, status, err)
		}
	}
	if status, _, _ := first.DoAuth(http.MethodGet, "/v1/card", nil, ""); status != 404 {
		t.Fatalf("a worker serves the API: %d", status)
	}

	tg, err := testkit.NewTarget("s3cr3t", testkit.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	var channels []string
	for i := 0; i < 6; i++ {
		ch := fmt.Sprintf("cch_mw_%d", i)
		if err := gw.OpenChannel(ch, tg.Config("none", "none")); err != nil {
			t.Fatal(err)
		}
		channels = append(channels, ch)
	}
	ctx := context.Background()
	agent, err := testkit.Dial(ctx, gw.Addr, gw.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	const perChannel = 30
	round := func(from, to int) {
		var pids []string
		for i := from; i < to; i++ {
			for _, ch := range channels {
				pid, err := agent.Send(ctx, ch, profile.TypeMessage, msg(fmt.Sprintf("m_%03d", i), fmt.Sprintf("%s %03d", ch, i)))
				if err != nil {
					t.Fatal(err)
				}
				pids = append(pids, pid)
			}
		}
		for _, pid := range pids {
			env, err := agent.Reply(pid, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if a, err := testkit.AckOf(env); err != nil || a.Status != profile.AckAccepted {
				t.Fatalf("ack %+v %v", a, err)
			}
		}
	}
	round(0, perChannel/2)
	if processed(t, first.Metrics()) == 0 || processed(t, second.Metrics()) != 0 {
		t.Fatalf("before the take-over: first worker %v packets, second %v", processed(t, first.Metrics()), processed(t, second.Metrics()))
	}
	t0 := time.Now()
	if err := first.Stop(); err != nil { // leaves mid-stream
		t.Fatal(err)
	}
	t.Logf("first worker stopped in %s", time.Since(t0))
	t0 = time.Now()
	round(perChannel/2, perChannel)
	t.Logf("second round in %s", time.Since(t0))
	if processed(t, second.Metrics()) == 0 {
		t.Fatal("the second worker took nothing over")
	}

	byChannel := map[string][]string{}
	for _, c := range tg.MessageCalls() {
		var ch string
		var n int
		if _, err := fmt.Sscanf(c.Text(), "%s %d", &ch, &n); err != nil {
			t.Fatalf("text %q", c.Text())
		}
		byChannel[ch] = append(byChannel[ch], c.Text())
	}
	for _, ch := range channels {
		got := byChannel[ch]
		if len(got) != perChannel {
			t.Fatalf("%s: %d finals delivered, want %d (no loss, no duplicate)", ch, len(got), perChannel)
		}
		for i, text := range got {
			if want := fmt.Sprintf("%s %03d", ch, i); text != want {
				t.Fatalf("%s: final %d is %q, want %q", ch, i, text, want)
			}
		}
	}
}
