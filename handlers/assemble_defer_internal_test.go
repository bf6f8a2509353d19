package handlers

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/handlers/target"
	"github.com/ximd/ximd/pipeline/natstest"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// keyedDrafts records each draft with its message's idempotency key.
type keyedDrafts struct {
	mu   sync.Mutex
	seen map[string][]string
}

func (t *keyedDrafts) Send(context.Context, target.Message) (string, error) { return "m", nil }
func (t *keyedDrafts) Capabilities() target.Capabilities {
	return target.Capabilities{Streaming: target.StreamingDraft}
}
func (t *keyedDrafts) Draft(_ context.Context, key, text string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen[key] = append(t.seen[key], text)
	return nil
}

func (t *keyedDrafts) of(channel, messageID string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.seen[idempotencyKey(channel, messageID)])
}

// Under load a channel's deltas queue up in its lane: a delta with more of the channel's deltas
// already held behind it (Place.Behind) is displayed together with them, by one call once they
// are handled, never later than that, however many more arrive meanwhile; a display whose
// followers never reach the stage is shown after deferLimit.
func TestAssemble_HeldDeltasShownByOneCall(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := context.Background()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subjects.BucketMessages}); err != nil {
		t.Fatal(err)
	}
	rec, err := OpenRecords(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	asm := NewAssembler(AssembleConfig{Worker: "w"}, rec, noClear{}, NewPacer(), NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	defer asm.Close(context.Background())
	tg := &keyedDrafts{seen: map[string][]string{}}
	seq := map[string]int64{}
	apply := func(channel, messageID, text string, behind int) {
		t.Helper()
		b := Bound{Channel: channel, Adapter: "fake", Target: tg}
		seq[channel+messageID]++
		perr, err := asm.Apply(ctx, b, profile.Delta{MessageID: messageID, Sequence: seq[channel+messageID], Text: text}, Place{Behind: behind}, false)
		if perr != nil || err != nil {
			t.Fatalf("%s/%s: %v %v", channel, messageID, perr, err)
		}
		asm.Handled(channel, behind)
	}

	// Channel c1: three deltas of m1 and one of m2 held at once; the last one handled shows both
	// messages, m1 by one call with all its text.
	apply("c1", "m1", "a", 3)
	apply("c1", "m1", "b", 2)
	apply("c1", "m2", "x", 1)
	if d := tg.of("c1", "m1"); len(d) != 0 {
		t.Fatalf("m1 shown before the deltas held behind it: %q", d)
	}
	apply("c1", "m1", "c", 0)
	waitFor(t, "m1 and m2 shown", func() bool { return len(tg.of("c1", "m1")) > 0 && len(tg.of("c1", "m2")) > 0 })
	if d := tg.of("c1", "m1"); !slices.Equal(d, []string{"abc"}) {
		t.Fatalf("m1 drafts %q, want one call with \"abc\"", d)
	}

	// Channel c2: m3's first delta had two behind it; more keep arriving, but once those two are
	// handled m3 is shown (with the text it has then), while the lane is still busy.
	apply("c2", "m3", "p", 2)
	apply("c2", "m3", "q", 5)
	if d := tg.of("c2", "m3"); len(d) != 0 {
		t.Fatalf("m3 shown too early: %q", d)
	}
	apply("c2", "m4", "z", 4)
	waitFor(t, "m3 shown while its lane is busy", func() bool { return len(tg.of("c2", "m3")) > 0 })
	if d := tg.of("c2", "m3"); !slices.Equal(d, []string{"pq"}) {
		t.Fatalf("m3 drafts %q, want [\"pq\"]", d)
	}
	if d := tg.of("c2", "m4"); len(d) != 0 {
		t.Fatalf("m4 shown before the deltas held behind it: %q", d)
	}

	// The deltas behind m4 never reach the stage (given back at a hand-over): it is shown anyway.
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = asm.Run(rctx) }()
	waitFor(t, "m4 shown after deferLimit", func() bool { return slices.Equal(tg.of("c2", "m4"), []string{"z"}) })
}
