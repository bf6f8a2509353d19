package handlers

import (
	"context"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/target"
)

type capsOnly struct{ caps target.Capabilities }

func (c capsOnly) Send(context.Context, target.Message) (string, error) { return "", nil }
func (c capsOnly) Capabilities() target.Capabilities                    { return c.caps }

// A dedupe rule settles by sending again only inside the platform's window: past it the
// platform may have forgotten the key, and a resend could show a second copy.
func TestDedupes_OnlyInsideThePlatformWindow(t *testing.T) {
	at := func(ago time.Duration) Record { return Record{At: time.Now().Add(-ago).UnixMilli()} }
	tests := []struct {
		name string
		caps target.Capabilities
		rec  Record
		want bool
	}{
		{"dedupe without window", target.Capabilities{InDoubt: target.InDoubtDedupe}, at(48 * time.Hour), true},
		{"dedupe inside window", target.Capabilities{InDoubt: target.InDoubtDedupe, InDoubtWindow: time.Hour}, at(time.Minute), true},
		{"dedupe past window", target.Capabilities{InDoubt: target.InDoubtDedupe, InDoubtWindow: time.Hour}, at(2 * time.Hour), false},
		{"lookup", target.Capabilities{InDoubt: target.InDoubtLookup}, at(0), false},
		{"edit by default", target.Capabilities{Streaming: target.StreamingEdit}, at(0), false},
	}
	for _, tt := range tests {
		if got := dedupes(capsOnly{tt.caps}, tt.rec); got != tt.want {
			t.Errorf("%s: dedupes = %v, want %v", tt.name, got, tt.want)
		}
	}
}
