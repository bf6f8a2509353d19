package handlers

import (
	"context"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/pipeline/natstest"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

func newTestAssembler(t *testing.T) *Assembler {
	t.Helper()
	js := natstest.JetStream(t)
	ctx := context.Background()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subjects.BucketMessages}); err != nil {
		t.Fatal(err)
	}
	rec, err := OpenRecords(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	asm := NewAssembler(AssembleConfig{Worker: "w"}, AssemblerDeps{Records: rec, Clear: noClear{}, Pacer: NewPacer(),
		Metrics: NewMetrics(prometheus.NewRegistry()), Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = asm.Close(context.Background()) })
	return asm
}

func running(buf *buffer) bool {
	buf.mu.Lock()
	defer buf.mu.Unlock()
	return buf.running()
}

// A delta that found its message's buffer just before the final took it (the assemble and
// deliver stages run apart) starts no display after the final (P-STATE-5): a taken buffer is
// finished, and neither Apply nor kick shows it again.
func TestAssemble_NoDisplayAfterTheFinalTookTheBuffer(t *testing.T) {
	asm := newTestAssembler(t)
	tg := &draftTarget{caps: adapter.Capabilities{Streaming: adapter.StreamingDraft}}
	b := Bound{Channel: "c1", Adapter: "fake", Target: tg}
	if perr, err := asm.Apply(context.Background(), b, profile.Delta{MessageID: "m1", Sequence: 1, Text: "Hello"}, Place{Seq: 1}, false); perr != nil || err != nil {
		t.Fatalf("delta: %v %v", perr, err)
	}
	asm.mu.Lock()
	buf := asm.buffers[bufKey{"c1", "m1"}]
	asm.mu.Unlock()
	waitFor(t, "the delta shown", func() bool { return !running(buf) && len(tg.drafts()) == 1 })
	if _, held, err := asm.FinishHandle(context.Background(), "c1", "m1"); err != nil || !held {
		t.Fatalf("FinishHandle: held %v, %v", held, err)
	}
	// The rest of such a delta's Apply: its text added, its display kicked.
	buf.mu.Lock()
	buf.text = append(buf.text, " there"...)
	asm.kick(buf)
	started, finished := buf.running(), buf.finished
	buf.mu.Unlock()
	if started || !finished {
		t.Fatalf("after the final took the buffer: display started %v, finished %v", started, finished)
	}
	if d := tg.drafts(); len(d) != 1 {
		t.Fatalf("drafts %q", d)
	}
}
