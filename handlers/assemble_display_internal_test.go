package handlers

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// editTarget is a streaming edit target whose Send waits for gate (when set) and records the
// calls made.
type editTarget struct {
	gate chan struct{}
	mu   sync.Mutex
	sent []string
	edit []string // "<id>:<text>"
}

func (t *editTarget) Capabilities() adapter.Capabilities {
	return adapter.Capabilities{Streaming: adapter.StreamingEdit}
}

func (t *editTarget) Send(ctx context.Context, m adapter.Message) (string, error) {
	t.mu.Lock()
	t.sent = append(t.sent, m.Text)
	t.mu.Unlock()
	if t.gate != nil {
		select {
		case <-t.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return "t1", nil
}

func (t *editTarget) Edit(_ context.Context, id string, m adapter.Message) error {
	t.mu.Lock()
	t.edit = append(t.edit, id+":"+m.Text)
	t.mu.Unlock()
	return nil
}

func (t *editTarget) calls() (sent, edits []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.sent...), append([]string(nil), t.edit...)
}

// A streamed message's display goes on where it stopped: a delta arriving after the target
// showed everything edits the message its first display created, it never creates another.
func TestAssemble_LaterDisplayEditsTheMessageTheFirstCreated(t *testing.T) {
	ctx := context.Background()
	asm := newTestAssembler(t)
	tg := &editTarget{}
	b := Bound{Channel: "c1", Adapter: "fake", Target: tg}
	for i, part := range []string{"Hello", " there", " again"} {
		if perr, err := asm.Apply(ctx, b, profile.Delta{MessageID: "m1", Sequence: int64(i + 1), Text: part}, Place{Seq: uint64(i + 1)}, false); perr != nil || err != nil {
			t.Fatalf("delta %d: %v %v", i+1, perr, err)
		}
		waitFor(t, "the delta shown", func() bool {
			sent, edits := tg.calls()
			return len(sent)+len(edits) == i+1
		})
	}
	sent, edits := tg.calls()
	if len(sent) != 1 || sent[0] != "Hello" {
		t.Fatalf("created %q, want one message", sent)
	}
	if len(edits) != 2 || edits[0] != "t1:Hello there" || edits[1] != "t1:Hello there again" {
		t.Fatalf("edits %q", edits)
	}
	if id, held, err := asm.FinishHandle(ctx, "c1", "m1"); err != nil || !held || id != "t1" {
		t.Fatalf("FinishHandle: %q held %v, %v", id, held, err)
	}
}

// The final waits for a display call in flight and is handed the target message it created
// (P-STATE-5), also when the buffer was evicted during the call (it drains until then); Close
// ends a display call in flight.
func TestAssemble_FinalWaitsForTheDisplayCallInFlight(t *testing.T) {
	for _, tc := range []struct {
		name  string
		evict bool
	}{
		{name: "live buffer"},
		{name: "evicted during the call", evict: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			asm := newTestAssembler(t)
			tg := &editTarget{gate: make(chan struct{})}
			b := Bound{Channel: "c1", Adapter: "fake", Target: tg}
			if perr, err := asm.Apply(ctx, b, profile.Delta{MessageID: "m1", Sequence: 1, Text: "Hello"}, Place{Seq: 1}, false); perr != nil || err != nil {
				t.Fatalf("delta: %v %v", perr, err)
			}
			waitFor(t, "the create call made", func() bool { sent, _ := tg.calls(); return len(sent) == 1 })
			if tc.evict {
				asm.DropChannel("c1")
			}
			type result struct {
				id   string
				held bool
				err  error
			}
			got := make(chan result, 1)
			go func() {
				id, held, err := asm.FinishHandle(ctx, "c1", "m1")
				got <- result{id, held, err}
			}()
			select {
			case r := <-got:
				t.Fatalf("FinishHandle returned %+v during the display call", r)
			case <-time.After(300 * time.Millisecond):
			}
			close(tg.gate)
			select {
			case r := <-got:
				if r.err != nil || !r.held || r.id != "t1" {
					t.Fatalf("FinishHandle: %+v, want the created message t1", r)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("FinishHandle still waiting after the call ended")
			}
		})
	}
	t.Run("close", func(t *testing.T) {
		asm := newTestAssembler(t)
		tg := &editTarget{gate: make(chan struct{})}
		b := Bound{Channel: "c1", Adapter: "fake", Target: tg}
		if perr, err := asm.Apply(context.Background(), b, profile.Delta{MessageID: "m1", Sequence: 1, Text: "Hello"}, Place{Seq: 1}, false); perr != nil || err != nil {
			t.Fatalf("delta: %v %v", perr, err)
		}
		waitFor(t, "the create call made", func() bool { sent, _ := tg.calls(); return len(sent) == 1 })
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := asm.Close(cctx); err != nil {
			t.Fatalf("Close with a display call in flight: %v", err)
		}
	})
}
