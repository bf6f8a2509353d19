package handlers

import (
	"context"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
)

type capsOnly struct{ caps adapter.Capabilities }

func (c capsOnly) Send(context.Context, adapter.Message) (string, error) { return "", nil }
func (c capsOnly) Capabilities() adapter.Capabilities                    { return c.caps }

// A dedupe rule settles by sending again only inside the platform's window: past it the
// platform may have forgotten the key, and a resend could show a second copy.
func TestDedupes_OnlyInsideThePlatformWindow(t *testing.T) {
	at := func(ago time.Duration) Record { return Record{At: time.Now().Add(-ago).UnixMilli()} }
	tests := []struct {
		name string
		caps adapter.Capabilities
		rec  Record
		want bool
	}{
		{"dedupe without window", adapter.Capabilities{InDoubt: adapter.InDoubtDedupe}, at(48 * time.Hour), true},
		{"dedupe inside window", adapter.Capabilities{InDoubt: adapter.InDoubtDedupe, InDoubtWindow: time.Hour}, at(time.Minute), true},
		{"dedupe past window", adapter.Capabilities{InDoubt: adapter.InDoubtDedupe, InDoubtWindow: time.Hour}, at(2 * time.Hour), false},
		{"lookup", adapter.Capabilities{InDoubt: adapter.InDoubtLookup}, at(0), false},
		{"edit by default", adapter.Capabilities{Streaming: adapter.StreamingEdit}, at(0), false},
	}
	for _, tt := range tests {
		if got := dedupes(capsOnly{tt.caps}, tt.rec); got != tt.want {
			t.Errorf("%s: dedupes = %v, want %v", tt.name, got, tt.want)
		}
	}
}
