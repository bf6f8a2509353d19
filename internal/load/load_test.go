package load_test

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/internal/load"
	"github.com/ximd/ximd/internal/testkit"
)

func startNode(tb testing.TB) *testkit.Node {
	tb.Helper()
	n, err := testkit.StartNode(testkit.NodeOptions{DataDir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = n.Stop() })
	return n
}

// The load tool runs every phase end to end and reports non-zero figures.
func TestRun_SmallLoadReportsEveryFigure(t *testing.T) {
	n := startNode(t)
	cfg := load.Config{Channels: 2, Messages: 2, Deltas: 10, Finals: 200, DeltaBytes: 8, Window: 32, PacedDuration: 200 * time.Millisecond, RawMessages: 2000, Buffers: 40}
	measured := 0
	rss := func() (int64, error) { measured++; return 12345, nil } // the test process's RSS means nothing here
	rep, err := load.Run(context.Background(), cfg, load.Env{Node: n, RSS: rss})
	if err != nil {
		t.Fatal(err)
	}
	if measured != 1 || rep.RSS != 12345 || rep.Buffers != 40 {
		t.Fatalf("RSS measured %d times, report %d bytes with %d buffers", measured, rep.RSS, rep.Buffers)
	}
	if rep.RawPublishPerSec <= 0 || rep.DeltasPerSec <= 0 || rep.FinalsPerSec <= 0 || rep.AckP99 <= 0 || rep.DisplayP99 <= 0 || rep.FirstP99 <= 0 || rep.DeltaRatio <= 0 || rep.FinalRatio <= 0 {
		t.Fatalf("report has a zero figure:\n%s", rep)
	}
	if rep.AckP50 > rep.AckP99 || rep.DisplayP50 > rep.DisplayP99 || rep.FirstP50 > rep.FirstP99 {
		t.Fatalf("percentiles out of order:\n%s", rep)
	}
}

// A sweep offers each load in turn and reports what it achieved; Plot draws it as a well-formed
// SVG with the achieved rate and the p99 of finals and of deltas, one point per load.
func TestRun_SweepAndPlot(t *testing.T) {
	n := startNode(t)
	cfg := load.Config{Channels: 2, Messages: 2, Deltas: 10, Finals: 200, DeltaBytes: 8, Window: 32, PacedDuration: 200 * time.Millisecond, RawMessages: 2000,
		Sweep: []float64{0.25, 1}}
	rep, err := load.Run(context.Background(), cfg, load.Env{Node: n})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Sweep) != 2 {
		t.Fatalf("%d sweep points, want 2", len(rep.Sweep))
	}
	for _, p := range rep.Sweep {
		if p.FinalsPerSec <= 0 || p.DeltasPerSec <= 0 || p.AckP99 <= 0 || p.DisplayP99 <= 0 || p.FinalsOffered <= 0 || p.DeltasOffered <= 0 {
			t.Fatalf("sweep point with a zero figure: %+v", p)
		}
	}
	if rep.Sweep[0].FinalsOffered >= rep.Sweep[1].FinalsOffered {
		t.Fatalf("offered loads out of order: %+v", rep.Sweep)
	}
	var svg bytes.Buffer
	if err := load.Plot(&svg, rep, "test <run>"); err != nil {
		t.Fatal(err)
	}
	polylines, points := 0, 0
	dec := xml.NewDecoder(&svg)
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("plot is not well-formed XML: %v", err)
		}
		if el, ok := tok.(xml.StartElement); ok && el.Name.Local == "polyline" {
			polylines++
			for _, a := range el.Attr {
				if a.Name.Local == "points" {
					points += len(strings.Fields(a.Value))
				}
			}
		}
	}
	if polylines != 4 || points != 8 {
		t.Fatalf("plot has %d lines with %d points, want 4 lines (rate and p99 of finals and deltas) of 2", polylines, points)
	}
	if err := load.Plot(io.Discard, load.Report{}, "x"); err == nil {
		t.Fatal("a report without a sweep was plotted")
	}
}

// BenchmarkEndToEnd runs the load tool once per iteration and reports its figures and ratios
// against the raw JetStream baseline of the same run: go test -bench EndToEnd -benchtime 1x ./internal/load
func BenchmarkEndToEnd(b *testing.B) {
	n := startNode(b)
	cfg := load.DefaultConfig()
	for i := 0; i < b.N; i++ {
		rep, err := load.Run(context.Background(), cfg, load.Env{Node: n})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(rep.RawPublishPerSec, "raw_pub/s")
		b.ReportMetric(rep.DeltasPerSec, "deltas/s")
		b.ReportMetric(rep.FinalsPerSec, "finals/s")
		b.ReportMetric(rep.DeltaRatio, "delta_ratio")
		b.ReportMetric(rep.FinalRatio, "final_ratio")
		b.ReportMetric(float64(rep.AckP99.Microseconds()), "ack_p99_us")
		b.ReportMetric(float64(rep.DisplayP99.Microseconds()), "display_p99_us")
	}
}
