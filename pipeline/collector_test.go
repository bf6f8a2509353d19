package pipeline_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/pipeline"
	"github.com/ximd/ximd/subjects"
)

// The collector reports each partition consumer's lag and the pending user messages, as
// JetStream counts them.
func TestStreamCollectorReportsLagAndPending(t *testing.T) {
	srv, err := pipeline.StartServer(pipeline.ServerConfig{DataDir: t.TempDir(), Port: -1}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := pipeline.DefaultStoreConfig()
	if err := pipeline.Provision(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	in, _ := subjects.In("cch_lag", "message")
	for i := 0; i < 3; i++ {
		if _, err := js.Publish(ctx, in, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	out, _ := subjects.Out("cch_lag")
	if _, err := js.Publish(ctx, out, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(pipeline.NewStreamCollector(js))
	gather := func() map[string]float64 {
		values := map[string]float64{}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				name := mf.GetName()
				for _, l := range m.GetLabel() {
					if l.GetName() == "stream" {
						name += "/" + l.GetValue()
					}
				}
				values[name] += m.GetGauge().GetValue()
			}
		}
		return values
	}
	want := map[string]float64{
		"ximd_stream_stats_up":                                                1,
		"ximd_outbound_pending_messages":                                      1,
		"ximd_stream_messages/XIM_IN":                                         3,
		"ximd_stream_messages/XIM_OUT":                                        1,
		"ximd_stream_messages/XIM_POISON":                                     0,
		"ximd_consumer_pending/XIM_IN":                                        3, // all in the one partition of cch_lag
		"ximd_consumer_pending/XIM_OUT":                                       1,
		"ximd_consumer_ack_pending/XIM_IN":                                    0,
		"ximd_stream_max_bytes/XIM_IN":                                        float64(cfg.InMaxBytes),
		"ximd_stream_max_bytes/" + subjects.KVStream(subjects.BucketMessages): float64(cfg.CompletedMaxBytes),
	}
	// The server counts a consumer's pending messages as it takes the publishes in: ask again
	// until it has (the collector reads JetStream again once its 5s cache is stale).
	var values map[string]float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		values = gather()
		same := true
		for name, w := range want {
			same = same && values[name] == w
		}
		if same || time.Now().After(deadline) {
			break
		}
	}
	for name, w := range want {
		if values[name] != w {
			t.Errorf("%s = %v, want %v", name, values[name], w)
		}
	}
}
