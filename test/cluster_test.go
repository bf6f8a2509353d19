package test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/subjects"
	"github.com/ximd/ximd/test/faultkit"
)

// Edge-api §1, §5 step 4, §5.1, §5.4; README "Durability": on a 3-node JetStream cluster with
// every stream and bucket R3 (XIM_REPLICAS=3), stopping any one NATS server — kill -9 or SIGTERM,
// the leaders of XIM_IN and KV_xim_messages included — loses nothing and repeats nothing. Each
// node is stopped in turn under load and restarted, and the next fault waits until the quorum is
// back (every node healthy, every stream's replicas current). ximd runs as one `ximd gateway` and
// one `ximd worker` process with XIM_NATS_URL naming all three servers. See fault_test.go for the
// long form (XIMD_FAULT_NATS_RESTARTS).
func TestCluster_NATSNodeRestartsNeverTwiceNeverLost(t *testing.T) {
	skipFaults(t)
	restarts := faultkit.Env(t, "XIMD_FAULT_NATS_RESTARTS", 3)
	w := newFaultWorld(t, "Cluster", faultkit.Env(t, "XIMD_FAULT_CHANNELS", 20))
	natsBin, ximdBin := clusterBinaries(t)
	dir := w.logDir
	cluster, err := faultkit.StartNATSCluster(w.ctx, natsBin, filepath.Join(dir, "nats"), 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close) // after the ximd processes' own cleanups (LIFO)
	for _, n := range cluster.Nodes {
		w.others = append(w.others, n.Proc)
	}

	token := "fault-token-" + testkit.NewID("t")
	env := append(ximdEnv(token), "XIM_NATS_URL="+cluster.URL(), "XIM_REPLICAS=3")
	start := func(role string) *faultkit.Ximd {
		addr, err := faultkit.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		x, err := faultkit.StartXimd(w.ctx, "ximd-"+role, ximdBin, role, addr, filepath.Join(dir, "ximd-"+role+".log"),
			append(env, "XIM_DATA_DIR="+filepath.Join(dir, "data-"+role), "XIM_INSTANCE=fault-"+role))
		if x != nil {
			t.Cleanup(x.Close)
			w.procs = append(w.procs, x)
		}
		if err != nil {
			w.fail(err.Error())
		}
		return x
	}
	gw := start("gateway")
	start("worker")
	if err := faultkit.OpenChannels(&testkit.Node{Token: token, Addr: gw.Addr}, w.target, w.channels); err != nil {
		t.Fatal(err)
	}
	w.load([]string{gw.Addr}, token)
	w.waitLoad(0)

	streams := []string{subjects.StreamIn, "KV_" + subjects.BucketMessages, subjects.StreamOut, "KV_" + subjects.BucketOutbox}
	done := map[string]bool{} // nodes stopped in this turn of len(cluster.Nodes)
	for r := 0; r < restarts; r++ {
		time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond) // the fault's random moment
		if len(done) == len(cluster.Nodes) {
			done = map[string]bool{}
		}
		inLeader, kvLeader := cluster.Leader(w.ctx, subjects.StreamIn), cluster.Leader(w.ctx, "KV_"+subjects.BucketMessages)
		var victim *faultkit.NATSNode
		for _, name := range []string{inLeader, kvLeader} { // the stream leaders first
			if n := cluster.Node(name); n != nil && !done[name] && victim == nil {
				victim = n
			}
		}
		for _, n := range cluster.Nodes {
			if victim == nil && !done[n.Name] {
				victim = n
			}
		}
		done[victim.Name] = true
		how := "kill -9"
		t0 := time.Now()
		if r%2 == 0 {
			err = victim.Kill()
		} else {
			how = "SIGTERM"
			var code int
			code, _, err = victim.Term(30 * time.Second)
			if err == nil && code != 0 {
				t.Logf("nats %s exited %d after SIGTERM", victim.Name, code)
			}
		}
		if err != nil {
			w.fail(err.Error())
		}
		w.result.Faults++
		w.result.Cycles++
		time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond) // how long the node stays down
		if err := victim.Start(); err != nil {
			w.fail(err.Error())
		}
		if err := cluster.WaitHealthy(w.ctx, 90*time.Second, streams); err != nil {
			w.fail(fmt.Sprintf("after restarting %s: %v", victim.Name, err))
		}
		t.Logf("fault %d: %s of %s (leaders before: %s %s, %s %s); quorum back after %s; leaders now %s %s",
			r+1, how, victim.Name, subjects.StreamIn, inLeader, "KV_"+subjects.BucketMessages, kvLeader, time.Since(t0).Round(time.Millisecond),
			cluster.Leader(w.ctx, subjects.StreamIn), cluster.Leader(w.ctx, "KV_"+subjects.BucketMessages))
		for _, x := range w.procs {
			x.SampleRSS()
			if !x.Running() {
				w.fail(x.Name + " exited")
			}
		}
		w.waitLoad(-1)
	}
	w.settle()
}
