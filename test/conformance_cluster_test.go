package test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ximd/ximd/internal/conformance"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/subjects"
	"github.com/ximd/ximd/test/faultkit"
)

// TestConformance_ClusterWithSplitStages runs the profile's checklist (`ximctl conformance`)
// against a deployment as operators run it: a gateway, a worker of every stage but delivery and
// a delivery-only worker, as separate processes, on a 3-node NATS cluster with XIM_REPLICAS=3.
// Every check must pass there as on one node: a file uploaded through the gateway is found by
// the worker at once (the file store's reads go to the stream leader, not to a replica behind
// it), and a message's delta buffer, held by the assembling worker, is cleared by its final
// delivered on the other worker (P-STATE-5).
func TestConformance_ClusterWithSplitStages(t *testing.T) {
	skipFaults(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	natsBin, ximdBin := clusterBinaries(t)
	dir := t.TempDir()
	cluster, err := faultkit.StartNATSCluster(ctx, natsBin, filepath.Join(dir, "nats"), 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	token := "conformance-token-" + testkit.NewID("t")
	env := append(ximdEnv(token), "XIM_NATS_URL="+cluster.URL(), "XIM_REPLICAS=3")
	start := func(name, role string, extra ...string) *faultkit.Ximd {
		addr, err := faultkit.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		x, err := faultkit.StartXimd(ctx, name, ximdBin, role, addr, filepath.Join(dir, name+".log"),
			append(append(env, "XIM_DATA_DIR="+filepath.Join(dir, "data-"+name), "XIM_INSTANCE="+name), extra...))
		if x != nil {
			t.Cleanup(x.Close)
		}
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	gw := start("gateway", "gateway")
	start("worker", "worker", "XIM_STAGES=acks,activity,assemble")
	start("deliverer", "worker", "XIM_STAGES=deliver")
	files, err := cluster.StreamInfo(ctx, subjects.ObjectStream(subjects.BucketFiles))
	if err != nil {
		t.Fatal(err)
	}
	if files.Config.AllowDirect || files.Config.Replicas != 3 {
		t.Fatalf("file store stream: allow_direct %t, replicas %d; want reads from the leader of 3 replicas", files.Config.AllowDirect, files.Config.Replicas)
	}

	rctx, rcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer rcancel()
	rep, err := conformance.Run(rctx, conformance.Config{HTTPAddr: gw.Addr, Token: token, Wait: 20 * time.Second, Settle: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Checks {
		if r.Status == conformance.Fail {
			t.Errorf("%s (%s): %s", r.ID, r.Rule, r.Detail)
		}
	}
	t.Logf("%d checks: %d pass, %d skip", len(rep.Checks), rep.Count(conformance.Pass), rep.Count(conformance.Skip))
}
