package handlers

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// draftTarget records the drafts shown.
type draftTarget struct {
	caps adapter.Capabilities
	mu   sync.Mutex
	seen []string
}

func (t *draftTarget) Send(context.Context, adapter.Message) (string, error) { return "m", nil }
func (t *draftTarget) Capabilities() adapter.Capabilities                    { return t.caps }
func (t *draftTarget) Draft(_ context.Context, _, text string) error {
	t.mu.Lock()
	t.seen = append(t.seen, text)
	t.mu.Unlock()
	return nil
}

func (t *draftTarget) drafts() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.seen...)
}

type noClear struct{}

func (noClear) ClearStatus(context.Context, string, Place) {}

// A draft preview expires by itself (Telegram's after 30 s): while its message waits for more
// deltas it is shown again every PreviewRenewal, with the same text, and no more once the final
// has finished the message.
func TestAssemble_DraftPreviewRenewedWhileTheMessageWaits(t *testing.T) {
	ctx := context.Background()
	asm := newTestAssembler(t)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = asm.Run(rctx) }()
	tg := &draftTarget{caps: adapter.Capabilities{Streaming: adapter.StreamingDraft, PreviewRenewal: 1200 * time.Millisecond}}
	b := Bound{Channel: "c1", Adapter: "fake", Target: tg}
	for i, part := range []string{"Hello ", "there"} {
		if perr, err := asm.Apply(ctx, b, profile.Delta{MessageID: "m1", Sequence: int64(i + 1), Text: part}, Place{Seq: uint64(i + 1)}, false); perr != nil || err != nil {
			t.Fatalf("delta %d: %v %v", i+1, perr, err)
		}
	}
	waitFor(t, "the text drafted", func() bool { d := tg.drafts(); return len(d) > 0 && d[len(d)-1] == "Hello there" })
	n := len(tg.drafts())
	waitFor(t, "the draft shown again", func() bool { return len(tg.drafts()) > n })
	if d := tg.drafts(); d[len(d)-1] != "Hello there" {
		t.Fatalf("renewed draft %q", d[len(d)-1])
	}
	if _, _, err := asm.FinishHandle(ctx, "c1", "m1"); err != nil {
		t.Fatal(err)
	}
	n = len(tg.drafts())
	time.Sleep(3 * time.Second) // two renewal periods: none may come
	if got := len(tg.drafts()); got != n {
		t.Fatalf("%d drafts after the final finished the message", got-n)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
