//go:build compose

// Package compose drives a running docker-compose cluster (test/compose/run brings it up):
// traffic through both gateways while a worker and a NATS server are killed, then checks that
// nothing was lost or delivered twice.
package compose

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/profile"
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func docker(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		t.Fatalf("docker %v: %v\n%s", args, err, out)
	}
	t.Logf("docker %s", strings.Join(args, " "))
}

func TestCompose_NoLossNoDuplicateThroughWorkerAndNATSFaults(t *testing.T) {
	project := env("COMPOSE_PROJECT", "ximtest")
	token := env("XIM_AGENT_TOKEN", "change-me")
	gateways := []string{"127.0.0.1:8080", "127.0.0.1:8081"}
	const channels, perChannel = 8, 60

	var mu sync.Mutex
	finals := map[string]int{} // idempotency key -> final calls
	tg, err := testkit.NewTarget("compose-secret", testkit.TargetOptions{Addr: "0.0.0.0:0", Discard: true, OnCall: func(c testkit.Call) {
		if c.Final() {
			mu.Lock()
			finals[c.Key]++
			mu.Unlock()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	port := tg.URL[strings.LastIndex(tg.URL, ":")+1 : strings.LastIndex(tg.URL, "/")]
	cfg := tg.Config("none", "none")
	cfg["url"] = "http://host.docker.internal:" + port + "/hook"

	ctx := context.Background()
	var agents []*testkit.Agent
	for i, gw := range gateways {
		n := &testkit.Node{Token: token, Addr: gw}
		if i == 0 {
			for c := 0; c < channels; c++ {
				if err := n.OpenChannel(fmt.Sprintf("compose_%d", c), cfg); err != nil {
					t.Fatal(err)
				}
			}
		}
		a, err := testkit.Dial(ctx, gw, token)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		agents = append(agents, a)
	}

	// Each message is sent until it is acked accepted or duplicate, as the profile's sender does.
	type pendingMsg struct {
		channel, id string
		agent       *testkit.Agent
	}
	var msgs []pendingMsg
	for c := 0; c < channels; c++ {
		for i := 0; i < perChannel; i++ {
			msgs = append(msgs, pendingMsg{fmt.Sprintf("compose_%d", c), fmt.Sprintf("m%04d", i), agents[c%len(agents)]})
		}
	}
	faults := 0
	start := time.Now()
	done := map[string]bool{}
	terminal := map[string]int{} // code -> finals answered rejected, retryable=false
	for round := 0; len(done) < len(msgs) && time.Since(start) < 4*time.Minute; round++ {
		byAgent := map[*testkit.Agent]map[string]pendingMsg{}
		for _, m := range msgs {
			if done[m.channel+":"+m.id] {
				continue
			}
			pid, err := m.agent.Send(ctx, m.channel, profile.TypeMessage, map[string]any{"message_id": m.id, "text": m.channel + " " + m.id})
			if err != nil {
				t.Fatal(err)
			}
			if byAgent[m.agent] == nil {
				byAgent[m.agent] = map[string]pendingMsg{}
			}
			byAgent[m.agent][pid] = m
			if round == 0 && len(byAgent[m.agent]) == perChannel { // mid-load faults
				switch faults {
				case 0:
					docker(t, "kill", project+"_worker_1")
				case 1:
					docker(t, "kill", project+"_nats2_1")
				}
				faults++
			}
		}
		for a, sent := range byAgent {
			deadline := time.Now().Add(20 * time.Second)
			for len(sent) > 0 && time.Now().Before(deadline) {
				env, err := a.Next(time.Until(deadline))
				if err != nil {
					break
				}
				m, ok := sent[env.ReplyTo]
				if !ok {
					continue
				}
				delete(sent, env.ReplyTo)
				ack, err := testkit.AckOf(env)
				switch {
				case err != nil:
				case ack.Status == profile.AckAccepted || ack.Status == profile.AckDuplicate:
					done[m.channel+":"+m.id] = true
				case ack.Retryable != nil && !*ack.Retryable: // terminal: the sender stops (P-STATE-3)
					done[m.channel+":"+m.id] = true
					terminal[ack.Code]++
				}
			}
		}
		if round == 0 {
			docker(t, "start", project+"_worker_1")
			docker(t, "start", project+"_nats2_1")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	dups := 0
	for _, n := range finals {
		if n > 1 {
			dups++
		}
	}
	lost := len(msgs) - len(done)
	t.Logf("summary: messages %d, faults %d, answered %d (terminal rejections %v), delivered to the target %d, lost %d, duplicates %d, in %s",
		len(msgs), faults, len(done), terminal, len(finals), lost, dups, time.Since(start).Round(time.Second))
	if lost != 0 || dups != 0 {
		t.Fatalf("lost %d, duplicates %d", lost, dups)
	}
}
