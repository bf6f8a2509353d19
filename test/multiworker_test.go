package test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

func processed(t *testing.T, g prometheus.Gatherer) float64 {
	t.Helper()
	return gauge(t, g, "ximd_worker_packets_total")
}

// gauge sums every series of the metric called name.
func gauge(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return n
}

// edge-api §1, §5.1: a gateway and two worker processes on one NATS. The workers share the
// partitions; each partition is served by one worker at a time (a pinned consumer group), so a
// channel's finals reach the target in order and exactly once; when a worker leaves mid-stream,
// the other takes its partitions over.
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
	first := start(node.RoleWorker)
	gw := start(node.RoleGateway)
	second := start(node.RoleWorker)
	owned := func(n *testkit.Node) float64 { return gauge(t, n.Metrics(), "ximd_partitions_owned") }
	poll(t, "the workers share the partitions", func() bool {
		return owned(first) == 4*4 && owned(second) == 4*4 // 4 of 8 partitions of each of the 4 stages
	})
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
	// The first worker pulled every partition before the second joined; its pulls already under
	// way (up to 1s) may still deliver, then it hands the second's share over. One final per
	// channel at a time until both work.
	n, deadline := 0, time.Now().Add(10*time.Second)
	for processed(t, first.Metrics()) == 0 || processed(t, second.Metrics()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the workers do not share the work: first %v packets, second %v", processed(t, first.Metrics()), processed(t, second.Metrics()))
		}
		round(n, n+1)
		n++
	}
	t.Logf("both workers busy after %d finals per channel", n)
	round(n, n+15)
	n += 15
	before := processed(t, second.Metrics())
	t0 := time.Now()
	if err := first.Stop(); err != nil { // leaves mid-stream
		t.Fatal(err)
	}
	t.Logf("first worker stopped in %s", time.Since(t0))
	t0 = time.Now()
	round(n, n+15)
	t.Logf("second round in %s", time.Since(t0))
	if processed(t, second.Metrics()) < before+float64(len(channels)*15) {
		t.Fatalf("the second worker processed %v of the second round's %d finals", processed(t, second.Metrics())-before, len(channels)*15)
	}
	perChannel := n + 15

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
