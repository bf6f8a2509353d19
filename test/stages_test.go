package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

// The stages as independent consumers (docs/design.md "Cross-stage rules"): a gateway, a worker
// running only the deliver stage and one running the others (XIM_STAGES). Streamed messages with
// statuses on an edit target: each message is created once, its final is its last call (no delta
// shown after it), no status of a message is shown after its final, every final is accepted once.
func TestStages_SplitAcrossWorkersKeepCrossStageRules(t *testing.T) {
	t.Parallel()
	srv, err := pipeline.StartServer(pipeline.ServerConfig{DataDir: t.TempDir(), Port: -1}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown) // after the nodes' own cleanups (LIFO)
	start := func(role node.Role, stages ...string) *testkit.Node {
		n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir(), Mutate: func(c *node.Config) {
			c.Role, c.NATSURL = role, srv.ClientURL()
			c.EditInterval = 10 * time.Millisecond
			if len(stages) > 0 {
				c.Stages = stages
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Stop() })
		return n
	}
	deliver := start(node.RoleWorker, "deliver")
	rest := start(node.RoleWorker, "assemble", "activity", "acks")
	gw := start(node.RoleGateway)
	poll(t, "each stage's partitions are served", func() bool {
		return gauge(t, deliver.Metrics(), "ximd_partitions_owned") == 8 && gauge(t, rest.Metrics(), "ximd_partitions_owned") == 3*8
	})

	const nChannels, nMessages, nDeltas = 4, 12, 6
	var channels []string
	targets := map[string]*testkit.Target{}
	for i := 0; i < nChannels; i++ {
		ch := fmt.Sprintf("cch_split_%d", i)
		tg, err := testkit.NewTarget("s3cr3t", testkit.TargetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tg.Close)
		tg.SetAnswer(func(testkit.Call) int { time.Sleep(5 * time.Millisecond); return 200 }) // display calls overlap the finals
		if err := gw.OpenChannel(ch, tg.Config("edit", "status")); err != nil {
			t.Fatal(err)
		}
		channels = append(channels, ch)
		targets[ch] = tg
	}
	ctx := context.Background()
	agent := dial(t, gw)
	var pids []string
	for m := 0; m < nMessages; m++ {
		for _, ch := range channels {
			id := fmt.Sprintf("m_%02d", m)
			send := func(typ string, payload any) string {
				pid, err := agent.Send(ctx, ch, typ, payload)
				if err != nil {
					t.Fatal(err)
				}
				return pid
			}
			send(profile.TypeActivity, map[string]any{"status": "tool", "tool_name": id})
			text := ""
			for d := 1; d <= nDeltas; d++ {
				part := fmt.Sprintf("%s.%d ", id, d)
				text += part
				send(profile.TypeDelta, delta(id, d, part))
			}
			pids = append(pids, send(profile.TypeMessage, msg(id, text)))
		}
	}
	for _, pid := range pids {
		env, err := agent.Reply(pid, 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if a, err := testkit.AckOf(env); err != nil || a.Status != profile.AckAccepted {
			t.Fatalf("ack %+v %v", a, err)
		}
	}
	if n := gauge(t, deliver.Metrics(), "ximd_worker_packets_total"); n != nChannels*nMessages {
		t.Fatalf("the deliver-only worker processed %v packets, want the %d finals", n, nChannels*nMessages)
	}

	// Let display calls still in flight land, then read each target's calls in the order it got them.
	time.Sleep(200 * time.Millisecond)
	displayed, statuses := 0, 0
	for _, ch := range channels {
		calls := targets[ch].Calls()
		finalAt := map[string]int{} // idempotency key -> index of its final call
		shownAt := map[string]int{} // idempotency key -> index of the call that created it
		posts := map[string]int{}
		for i, c := range calls {
			if c.Method == "POST" && c.Path == "/messages" {
				posts[c.Key]++
				shownAt[c.Key] = i
			}
			if c.Key != "" && c.Final() {
				if _, dup := finalAt[c.Key]; dup {
					t.Fatalf("%s: a second final call", c.Key)
				}
				finalAt[c.Key] = i
			}
		}
		if len(finalAt) != nMessages {
			t.Fatalf("%s: %d finals reached the target, want %d", ch, len(finalAt), nMessages)
		}
		for key, n := range posts {
			if n != 1 {
				t.Fatalf("%s: created %d times", key, n)
			}
		}
		for i, c := range calls {
			switch {
			case c.Key != "" && i > finalAt[c.Key]:
				t.Fatalf("%s: %s %s after its final: %s", c.Key, c.Method, c.Path, c.Raw)
			case c.Key != "" && !c.Final():
				displayed++
			case c.Path == "/activity" && c.Body["status"] != "idle":
				statuses++
				tool, _ := c.Body["tool_name"].(string)
				if at, ok := finalAt[ch+":"+tool]; ok && i > at {
					t.Fatalf("%s: status of %s shown after its final (call %d after %d)", ch, tool, i, at)
				}
				if at, ok := shownAt[ch+":"+tool]; ok && i > at { // P-ACT-5
					t.Fatalf("%s: status of %s shown after its message appeared (call %d after %d)", ch, tool, i, at)
				}
			}
		}
	}
	t.Logf("stages split: %d finals, %d display calls, %d statuses shown, each in order", nChannels*nMessages, displayed, statuses)
}
