package members_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/pipeline/members"
	"github.com/ximd/ximd/pipeline/natstest"
)

func startServer(t *testing.T) string {
	t.Helper()
	return natstest.Server(t).ClientURL()
}

type worker struct {
	m    *members.Members
	nc   *nats.Conn
	stop context.CancelFunc
	done chan struct{}
}

var allStages = []string{"deliver", "assemble"}

func start(t *testing.T, url, instance string) *worker {
	t.Helper()
	return startStages(t, url, instance, allStages...)
}

func startStages(t *testing.T, url, instance string, stages ...string) *worker {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	m, err := members.New(nc, members.Config{Instance: instance, Partitions: 8, Stages: stages, Interval: 100 * time.Millisecond},
		prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker{m: m, nc: nc, stop: cancel, done: make(chan struct{})}
	go func() { defer close(w.done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// owners returns, per partition of stage, the workers that believe they own it.
func owners(ws []*worker, stage string) [][]int {
	out := make([][]int, 8)
	for p := range out {
		for i, w := range ws {
			if w.m.Owns(stage, p) {
				out[p] = append(out[p], i)
			}
		}
	}
	return out
}

// settled waits until every partition of every stage has exactly one owner among ws, and each
// worker owns its share (n partitions spread as evenly as possible).
func settled(t *testing.T, ws []*worker) {
	t.Helper()
	for _, stage := range allStages {
		settledStage(t, ws, stage)
	}
}

func settledStage(t *testing.T, ws []*worker, stage string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok := true
		count := make([]int, len(ws))
		for _, o := range owners(ws, stage) {
			ok = ok && len(o) == 1
			if len(o) == 1 {
				count[o[0]]++
			}
		}
		ok = ok && slices.Max(count)-slices.Min(count) <= 1
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stage %s not settled: owners %v", stage, owners(ws, stage))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Workers share the partitions evenly, take a leaving worker's share over at once, a silent
// (dead) one's after the timeout, and give a share to a newcomer.
func TestMembersShareThePartitions(t *testing.T) {
	url := startServer(t)
	a, b, c := start(t, url, "w-a"), start(t, url, "w-b"), start(t, url, "w-c")
	settled(t, []*worker{a, b, c})
	if got := fmt.Sprint(a.m.Live()); got != "[w-a w-b w-c]" {
		t.Fatalf("live %s", got)
	}

	t0 := time.Now()
	c.stop() // leaves: says so
	<-c.done
	settled(t, []*worker{a, b})
	if d := time.Since(t0); d > 300*time.Millisecond {
		t.Fatalf("a leaving worker's share moved after %s, want at once", d)
	}

	d := start(t, url, "w-d")
	settled(t, []*worker{a, b, d})

	t0 = time.Now()
	d.nc.Close() // dies: falls silent
	settled(t, []*worker{a, b})
	if d := time.Since(t0); d < 300*time.Millisecond {
		t.Fatalf("a silent worker was dropped after %s, before its timeout", d)
	}
}

// A stage's partitions are shared only among the workers that run it: a worker that runs only
// delivery takes half of the delivery partitions and none of the assembly ones.
func TestMembersShareEachStageAmongItsWorkers(t *testing.T) {
	url := startServer(t)
	a, b := start(t, url, "w-a"), startStages(t, url, "w-b", "deliver")
	settledStage(t, []*worker{a, b}, "deliver")
	settledStage(t, []*worker{a}, "assemble")
	for p := 0; p < 8; p++ {
		if b.m.Owns("assemble", p) {
			t.Fatalf("a worker without the assemble stage owns its partition %d", p)
		}
		if o := a.m.Owner("assemble", p); o != "w-a" {
			t.Fatalf("Owner(assemble, %d) = %q, want w-a", p, o)
		}
		want := "w-a"
		if b.m.Owns("deliver", p) {
			want = "w-b"
		}
		if o := a.m.Owner("deliver", p); o != want {
			t.Fatalf("Owner(deliver, %d) = %q, want %q", p, o, want)
		}
	}
	if o := a.m.Owner("acks", 0); o != "" {
		t.Fatalf("Owner of a stage nobody runs = %q", o)
	}
	// Once the delivering worker leaves, every delivery partition is the other's.
	b.stop()
	<-b.done
	settledStage(t, []*worker{a}, "deliver")
	for p := 0; p < 8; p++ {
		if o := a.m.Owner("deliver", p); o != "w-a" {
			t.Fatalf("after w-b left: Owner(deliver, %d) = %q, want w-a", p, o)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     members.Config
		wantErr bool
	}{
		{"ok", members.Config{Instance: "w1", Partitions: 8, Stages: allStages}, false},
		{"no instance", members.Config{Partitions: 8, Stages: allStages}, true},
		{"no stages", members.Config{Instance: "w1", Partitions: 8}, true},
		{"unsafe instance", members.Config{Instance: "w.1", Partitions: 8}, true},
		{"no partitions", members.Config{Instance: "w1"}, true},
		{"timeout below interval", members.Config{Instance: "w1", Partitions: 8, Interval: time.Second, Timeout: time.Second}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v, wantErr %v", err, tt.wantErr)
			}
		})
	}
}

// A worker that just started is not settled (it hears only itself); once settled, its live set
// names every worker that was running.
func TestSettled_OnceTheOthersAreHeard(t *testing.T) {
	url := startServer(t)
	a := start(t, url, "a")
	deadline := time.Now().Add(5 * time.Second)
	for !a.m.Settled() {
		if time.Now().After(deadline) {
			t.Fatal("a worker alone never settled")
		}
		time.Sleep(5 * time.Millisecond)
	}
	b := start(t, url, "b")
	if b.m.Settled() {
		t.Fatal("settled at once, before an interval")
	}
	for !b.m.Settled() {
		if time.Now().After(deadline) {
			t.Fatal("the newcomer never settled")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if live := b.m.Live(); !slices.Equal(live, []string{"a", "b"}) {
		t.Fatalf("settled with live set %v, want [a b]", live)
	}
}
