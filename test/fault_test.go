package test

// The fault suites ("never twice, never lost"; docs/faults.md). They run the real ximd binary as a
// separate process, under load from an xAgent player and a target platform, and inject faults:
//
//   TestFault_KillNineNeverTwiceNeverLost   kill -9 of `ximd` (embedded NATS) at random moments,
//                                           restart on the same data dir, address and token
//   TestFault_SIGTERMDrains                 SIGTERM under load: exit 0 within a bound, then restart
//   TestCluster_NATSNodeRestarts...         (cluster_test.go) a 3-node JetStream cluster whose
//                                           nodes, stream leaders included, are stopped in turn
//
// then check: no final shown twice at the target, no final lost (every one acked accepted or
// duplicate; delivery_outcome_unknown counted apart), every user message answered 202 reached the
// agent, no channel left with a typing/status indicator, streamed text only grows. Each test
// prints one line "fault summary: test=… duplicates=… losses=…" (t.Log; visible with -v).
//
// `go test ./test/` runs a bounded form (about 70s for the three on 2 cores when every check
// holds; a failing test waits up to 45s for things to settle, so up to ~3 minutes). The long form is
// chosen by environment variables (test/faults runs it and prints only the summary lines):
//
//   XIMD_FAULT_CYCLES=100         kill -9 / restart cycles                      (default 8)
//   XIMD_FAULT_SIGTERM_CYCLES=10  SIGTERM / restart cycles                      (default 2)
//   XIMD_FAULT_NATS_RESTARTS=6    NATS node stops/restarts, in turns of 3 nodes (default 3)
//   XIMD_FAULT_CHANNELS=20        channels (half `streaming: edit`, half `none`) (default 20)
//   XIMD_FAULT_LOOKUP=0           webhook channels without "lookup" (default 1: a final a crash
//                                 left in doubt is settled by asking the target)
//   XIMD_FAULT_SKIP=1             skip the fault suites (e.g. a quick local `go test ./...`)
//
// XIMTEST_LOG=1 shows the processes' logs on stderr. They are written to /tmp/ximd-fault-<test>-…
// with the data dirs, kept (and the tail of each log printed) when a test fails.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/test/faultkit"
)

func skipFaults(t *testing.T) {
	t.Helper()
	if os.Getenv("XIMD_FAULT_SKIP") != "" {
		t.Skip("XIMD_FAULT_SKIP is set")
	}
	if testing.Short() {
		t.Skip("-short")
	}
}

// faultWorld is one fault run: a webhook target, channels, the xAgent player and the platform.
type faultWorld struct {
	t        *testing.T
	ctx      context.Context
	target   *testkit.Target
	channels []faultkit.Channel
	driver   *faultkit.Driver
	platform *faultkit.Platform
	result   faultkit.Result
	start    time.Time
	procs    []*faultkit.Ximd
	logDir   string           // the processes' logs and data; kept when the test fails
	others   []*faultkit.Proc // whose logs are shown on failure too (NATS nodes)
}

const faultSecret = "fault-webhook-secret"

// ximdEnv is the environment every ximd of the fault suites runs with: fast re-sends and
// clears so that "settled" comes within seconds, and JSON logs.
func ximdEnv(token string) []string {
	return []string{
		"XIM_AGENT_TOKEN=" + token,
		"XIM_LOG_FORMAT=json",
		"XIM_LOG_LEVEL=info",
		"XIM_EDIT_INTERVAL=20ms",
		"XIM_ACK_TIMEOUT=1s",
		"XIM_OUTBOUND_BACKOFF_MAX=2s",
		"XIM_TARGET_RETRY_BUDGET=2s",
		"XIM_ACTIVITY_TIMEOUT=5s",
	}
}

func newFaultWorld(t *testing.T, name string, nChannels int) *faultWorld {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tg, err := testkit.NewTarget(faultSecret, testkit.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	w := &faultWorld{t: t, ctx: ctx, target: tg, channels: faultkit.Channels(strings.ToLower(name), nChannels), start: time.Now()}
	lookup := faultkit.Env(t, "XIMD_FAULT_LOOKUP", 1) != 0
	for i := range w.channels {
		w.channels[i].Lookup = lookup
	}
	w.result.Test = name
	w.logDir, err = os.MkdirTemp("", "ximd-fault-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs and data kept in %s", w.logDir)
			return
		}
		_ = os.RemoveAll(w.logDir)
	})
	return w
}

// load starts the player and the platform against the gateways.
func (w *faultWorld) load(addrs []string, token string) {
	var ids []string
	for _, ch := range w.channels {
		ids = append(ids, ch.ID)
	}
	w.driver = faultkit.NewDriver(faultkit.DriverConfig{Addrs: addrs, Token: token, Channels: w.channels, ResendDeltas: true})
	w.driver.Run(w.ctx)
	w.t.Cleanup(w.driver.Close) // after cancel (LIFO): the connection loop ends
	w.platform = &faultkit.Platform{Addrs: addrs, Secret: faultSecret, Channels: ids}
	w.platform.Run(w.ctx)
}

// waitLoad polls until the player is connected on a connection newer than epoch (-1: any) and
// has made progress (a new terminal final) since then.
func (w *faultWorld) waitLoad(epoch int) {
	w.t.Helper()
	base := w.terminalFinals()
	if !faultkit.Poll(60*time.Second, func() bool { return w.driver.Epoch() > epoch && w.terminalFinals() > base }) {
		w.fail("the player made no progress within 60s of a fault")
	}
}

func (w *faultWorld) terminalFinals() int {
	n := 0
	for _, f := range w.driver.Finals() {
		if t, _, _ := f.Outcome(); t != nil {
			n++
		}
	}
	return n
}

// settle stops the load, waits for every final to be terminal and every user message to reach
// the agent and every indicator to be cleared (bounded), then runs the checks and prints the
// summary line.
func (w *faultWorld) settle() {
	w.t.Helper()
	w.driver.Stop()
	w.platform.Stop()
	if err := w.platform.Wait(60 * time.Second); err != nil {
		w.t.Error(err)
	}
	if err := w.driver.WaitIdle(90 * time.Second); err != nil {
		w.t.Error(err)
	}
	// Pending user messages are re-sent with back-off (at most 30s without a connection, 2s
	// here with one); a status with nothing to clear it times out after XIM_ACTIVITY_TIMEOUT.
	faultkit.Poll(45*time.Second, func() bool { return faultkit.Settled(w.target.Calls(), w.driver, w.platform) })
	for _, x := range w.procs {
		w.result.RSSPeakKiB = max(w.result.RSSPeakKiB, x.SampleRSS())
	}
	w.result.Elapsed = time.Since(w.start)
	w.result.Lookups = w.target.Lookups()
	faultkit.Check(&w.result, w.target.Calls(), w.driver, w.platform, w.channels)
	posts, failed := w.platform.Posts()
	w.t.Logf("finals by outcome %v; error packets %v; user posts %d (%d re-posted); user messages received %d distinct",
		w.driver.Summary(), w.driver.Errors(), posts, failed, len(w.driver.UserMessages()))
	if s := w.driver.Stray(); len(s) > 0 {
		w.t.Logf("unexpected packets (%d): %s", len(s), strings.Join(s[:min(len(s), 10)], "\n"))
	}
	for _, p := range w.result.Problems {
		w.t.Log(p)
	}
	w.t.Log(w.result.Summary())
	fmt.Println(w.result.Summary()) // for test/faults, which greps the -v output
	if w.result.Failed() {
		w.fail("fault checks failed (see above)")
	}
}

func (w *faultWorld) fail(msg string) {
	w.t.Helper()
	for _, x := range w.procs {
		w.t.Logf("--- last log lines of %s (%s):\n%s", x.Name, x.LogPath, x.LogTail(30))
	}
	for _, p := range w.others {
		w.t.Logf("--- last log lines of %s (%s):\n%s", p.Name, p.LogPath, p.LogTail(15))
	}
	w.t.Fatal(msg)
}

// startXimdAll starts an all-in-one ximd (embedded NATS) on a persistent data dir.
func (w *faultWorld) startXimdAll(token string) *faultkit.Ximd {
	w.t.Helper()
	bin, err := faultkit.BuildOnce("ximd", "github.com/ximd/ximd/cmd/ximd")
	if err != nil {
		w.t.Fatal(err)
	}
	addr, err := faultkit.FreeAddr()
	if err != nil {
		w.t.Fatal(err)
	}
	dir := w.logDir
	env := append(ximdEnv(token), "XIM_DATA_DIR="+filepath.Join(dir, "data"), "XIM_NATS_PORT=-1", "XIM_NATS_MONITOR_PORT=0")
	x, err := faultkit.StartXimd(w.ctx, "ximd", bin, "all", addr, filepath.Join(dir, "ximd.log"), env)
	if x != nil {
		w.t.Cleanup(x.Close)
		w.procs = append(w.procs, x)
	}
	if err != nil {
		w.t.Fatal(err)
	}
	if err := faultkit.OpenChannels(&testkit.Node{Token: token, Addr: x.Addr}, w.target, w.channels); err != nil {
		w.t.Fatal(err)
	}
	return x
}

// Edge-api §5.1, §5.4, §7.1, P-ACK-3/4, P-STATE-1/8, P-ACT-5/6: a kill -9 at any moment loses
// nothing and repeats nothing. ximd (embedded NATS, persistent data dir) is killed 200ms–2s into
// the load, again and again, and restarted on the same data dir, address and token while the
// player retransmits every unacked final and the platform re-posts every user message not
// answered 202.
func TestFault_KillNineNeverTwiceNeverLost(t *testing.T) {
	skipFaults(t)
	cycles := faultkit.Env(t, "XIMD_FAULT_CYCLES", 8)
	w := newFaultWorld(t, "KillNine", faultkit.Env(t, "XIMD_FAULT_CHANNELS", 20))
	token := "fault-token-" + testkit.NewID("t")
	x := w.startXimdAll(token)
	w.load([]string{x.Addr}, token)
	w.waitLoad(0)
	for c := 0; c < cycles; c++ {
		epoch := w.driver.Epoch()
		time.Sleep(time.Duration(200+rand.IntN(1800)) * time.Millisecond) // the fault's random moment
		x.SampleRSS()
		if err := x.Kill(); err != nil {
			w.fail(err.Error())
		}
		w.result.Faults++
		w.result.Cycles++
		if err := x.Restart(w.ctx); err != nil {
			w.fail(err.Error())
		}
		if c < cycles-1 {
			w.waitLoad(epoch)
		}
	}
	w.settle()
}

// Edge-api §1 "SIGTERM drains": under load, SIGTERM makes ximd exit 0 within a bound; after a
// restart nothing was lost: every final is acked, every pending user message delivered.
func TestFault_SIGTERMDrains(t *testing.T) {
	skipFaults(t)
	cycles := faultkit.Env(t, "XIMD_FAULT_SIGTERM_CYCLES", 2)
	w := newFaultWorld(t, "SIGTERM", faultkit.Env(t, "XIMD_FAULT_CHANNELS", 20))
	token := "fault-token-" + testkit.NewID("t")
	x := w.startXimdAll(token)
	w.load([]string{x.Addr}, token)
	w.waitLoad(0)
	const bound = 30 * time.Second
	for c := 0; c < cycles; c++ {
		epoch := w.driver.Epoch()
		time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond) // the fault's random moment
		x.SampleRSS()
		code, took, err := x.Term(bound)
		w.result.Faults++
		w.result.Cycles++
		if err != nil || code != 0 {
			w.fail(fmt.Sprintf("SIGTERM: exit code %d after %s: %v", code, took, err))
		}
		t.Logf("SIGTERM %d: exit 0 in %s", c+1, took.Round(time.Millisecond))
		if err := x.Restart(w.ctx); err != nil {
			w.fail(err.Error())
		}
		if c < cycles-1 {
			w.waitLoad(epoch)
		}
	}
	w.settle()
}
