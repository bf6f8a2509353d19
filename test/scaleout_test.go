package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/test/faultkit"
)

// workerGauge reads a gauge from a worker process's /metrics.
func workerGauge(addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// orderedBurst sends finals to its channels, pipelined (a whole round in flight at once), until
// stop, and records every packet id for its ack.
type orderedBurst struct {
	agent    *testkit.Agent
	channels []string
	mu       sync.Mutex
	sent     map[string][]string // channel -> packet ids in send order
	n        int                 // rounds sent
}

func (o *orderedBurst) run(ctx context.Context, stop <-chan struct{}) error {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		for _, ch := range o.channels {
			pid, err := o.agent.Send(ctx, ch, profile.TypeMessage, msg(fmt.Sprintf("o%05d", i), fmt.Sprintf("%s %05d", ch, i)))
			if err != nil {
				return err
			}
			o.mu.Lock()
			o.sent[ch] = append(o.sent[ch], pid)
			o.mu.Unlock()
		}
		o.mu.Lock()
		o.n = i + 1
		o.mu.Unlock()
		time.Sleep(20 * time.Millisecond) // pacing of the burst, not a wait for a condition
	}
}

// Edge-api §1, §5.1, §5.2, P-STATE-8, with the workers as separate processes: a gateway and three
// `ximd worker`s share the partitions; under load one worker is killed (-9), a fourth joins, one
// leaves (SIGTERM) and the killed one comes back. Throughout, each channel's finals reach the
// target in the order xAgent sent them, no final is shown twice, none is lost, streamed text
// only grows, no typing indicator stays, and at the end the live workers share the partitions.
func TestScaleOut_WorkersDieJoinAndLeaveUnderLoad(t *testing.T) {
	skipFaults(t)
	w := newFaultWorld(t, "ScaleOut", faultkit.Env(t, "XIMD_FAULT_CHANNELS", 12))
	srv, err := pipeline.StartServer(pipeline.ServerConfig{DataDir: filepath.Join(w.logDir, "nats"), Port: -1}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown) // after the processes' own cleanups (LIFO)
	bin, err := faultkit.BuildOnce("ximd", "github.com/ximd/ximd/cmd/ximd")
	if err != nil {
		t.Fatal(err)
	}
	token := "scale-token-" + testkit.NewID("t")
	env := append(ximdEnv(token), "XIM_NATS_URL="+srv.ClientURL())
	start := func(role, name string) *faultkit.Ximd {
		addr, err := faultkit.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		x, err := faultkit.StartXimd(w.ctx, name, bin, role, addr, filepath.Join(w.logDir, name+".log"),
			append(env, "XIM_DATA_DIR="+filepath.Join(w.logDir, "data-"+name), "XIM_INSTANCE="+name))
		if x != nil {
			t.Cleanup(x.Close)
			w.procs = append(w.procs, x)
		}
		if err != nil {
			w.fail(err.Error())
		}
		return x
	}
	gw := start("gateway", "gateway")
	workers := map[string]*faultkit.Ximd{}
	for _, name := range []string{"worker1", "worker2", "worker3"} {
		workers[name] = start("worker", name)
	}
	shared := func(live ...string) func() bool {
		return func() bool {
			total := 0.0
			for _, name := range live {
				owned := workerGauge(workers[name].Addr, `ximd_partitions_owned{stage="deliver"}`)
				if workerGauge(workers[name].Addr, "ximd_workers_live") != float64(len(live)) || owned < 1 {
					return false
				}
				total += owned
			}
			return total == 8
		}
	}
	if !faultkit.Poll(20*time.Second, shared("worker1", "worker2", "worker3")) {
		w.fail("three workers do not share the 8 partitions")
	}

	node := &testkit.Node{Token: token, Addr: gw.Addr}
	if err := faultkit.OpenChannels(node, w.target, w.channels); err != nil {
		t.Fatal(err)
	}
	orderTarget, err := testkit.NewTarget(faultSecret, testkit.TargetOptions{}) // apart from the checked target
	if err != nil {
		t.Fatal(err)
	}
	defer orderTarget.Close()
	ordered := &orderedBurst{sent: map[string][]string{}}
	for i := 0; i < 6; i++ {
		ch := fmt.Sprintf("scaleorder_%d", i)
		cfg := orderTarget.Config("none", "none")
		cfg["chat_id"] = ch
		if err := node.OpenChannel(ch, cfg); err != nil {
			t.Fatal(err)
		}
		ordered.channels = append(ordered.channels, ch)
	}
	ordered.agent, err = testkit.Dial(w.ctx, gw.Addr, token)
	if err != nil {
		t.Fatal(err)
	}
	defer ordered.agent.Close()
	stopBurst := make(chan struct{})
	burstErr := make(chan error, 1)
	go func() { burstErr <- ordered.run(w.ctx, stopBurst) }()

	w.load([]string{gw.Addr}, token)
	w.waitLoad(0)
	// The faults come 0.5s apart, so one lands while the workers still disagree on who is live (a
	// dead worker drops out of the others' views 3.5s after its last heartbeat, and a newcomer
	// never hears it): two may then both pull a partition, and the pinned group alone keeps order.
	step := func(what string, do func()) {
		time.Sleep(500 * time.Millisecond) // let the load run a little between faults
		t0 := time.Now()
		do()
		w.result.Faults++
		w.result.Cycles++
		w.waitLoad(-1)
		t.Logf("%s; load going again after %s", what, time.Since(t0).Round(time.Millisecond))
	}
	step("worker1 killed (-9)", func() {
		if err := workers["worker1"].Kill(); err != nil {
			w.fail(err.Error())
		}
	})
	step("worker4 joined", func() { workers["worker4"] = start("worker", "worker4") })
	step("worker2 left (SIGTERM)", func() {
		if code, took, err := workers["worker2"].Term(30 * time.Second); err != nil || code != 0 {
			w.fail(fmt.Sprintf("worker2: exit %d after %s: %v", code, took, err))
		}
	})
	step("worker1 restarted", func() {
		if err := workers["worker1"].Restart(w.ctx); err != nil {
			w.fail(err.Error())
		}
	})
	if !faultkit.Poll(20*time.Second, shared("worker1", "worker3", "worker4")) {
		w.fail("after the faults the three live workers do not share the 8 partitions")
	}
	close(stopBurst)
	if err := <-burstErr; err != nil {
		t.Fatal(err)
	}

	// Every pipelined final is answered; those delivered reach the target once each, in order.
	ordered.mu.Lock()
	defer ordered.mu.Unlock()
	unknown := map[string]bool{}
	for _, ch := range ordered.channels {
		for i, pid := range ordered.sent[ch] {
			env, err := ordered.agent.Reply(pid, 60*time.Second)
			if err != nil {
				t.Fatalf("%s final %d: %v", ch, i, err)
			}
			a, err := testkit.AckOf(env)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case a.Status == profile.AckAccepted || a.Status == profile.AckDuplicate:
			case a.Code == profile.CodeDeliveryOutcomeUnknown: // a worker killed between intent and outcome
				unknown[fmt.Sprintf("%s %05d", ch, i)] = true
			default:
				t.Fatalf("%s final %d: %s/%s", ch, i, a.Status, a.Code)
			}
		}
	}
	byChannel := map[string][]int{}
	for _, c := range orderTarget.MessageCalls() {
		var ch string
		var n int
		if !strings.HasPrefix(c.Text(), "scaleorder_") {
			continue
		}
		if _, err := fmt.Sscanf(c.Text(), "%s %d", &ch, &n); err != nil {
			t.Fatalf("text %q", c.Text())
		}
		byChannel[ch] = append(byChannel[ch], n)
	}
	// Twice or out of order is always a failure (the subscriber keeps each channel's order
	// across lost deliveries and hand-overs: pipeline/bus/order.go).
	finals := 0
	for _, ch := range ordered.channels {
		got := byChannel[ch]
		seen := map[int]bool{}
		for i, n := range got {
			if seen[n] {
				t.Fatalf("%s: final %05d reached the target twice: %v", ch, n, got)
			}
			seen[n] = true
			if i > 0 && n < got[i-1] {
				t.Fatalf("%s: final %05d reached the target after %05d (out of order): %v", ch, n, got[i-1], got)
			}
		}
		if missing := len(ordered.sent[ch]) - len(got); missing > 0 {
			for i := 0; i < len(ordered.sent[ch]); i++ {
				if !containsInt(got, i) && !unknown[fmt.Sprintf("%s %05d", ch, i)] {
					t.Fatalf("%s: final %05d acked but never reached the target", ch, i)
				}
			}
		}
		finals += len(got)
	}
	t.Logf("ordered finals: %d rounds over %d channels, %d delivered in order, %d delivery_outcome_unknown", ordered.n, len(ordered.channels), finals, len(unknown))
	w.settle()
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
