package page

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter/webchat"
)

func TestShowBoundsTheReplay(t *testing.T) {
	t.Parallel()
	h := &Handler{cfg: Config{HistoryLimit: 3, StatusMaxAge: time.Minute}}
	const msg, status = webchat.KindMessage, webchat.KindStatus
	tests := []struct {
		name    string
		kind    string
		pending uint64
		age     time.Duration
		replay  bool
		resumed bool
		want    bool
	}{
		{name: "live item", kind: msg, pending: 10, replay: false, want: true},
		{name: "replay within the last items", kind: msg, pending: 2, replay: true, want: true},
		{name: "replay older than the last items", kind: msg, pending: 3, replay: true, want: false},
		{name: "recent status replayed", kind: status, pending: 0, age: time.Second, replay: true, want: true},
		{name: "stale status not replayed", kind: status, pending: 0, age: 2 * time.Minute, replay: true, want: false},
		{name: "resumed stream sends everything", kind: msg, pending: 50, replay: true, resumed: true, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := &jetstream.MsgMetadata{NumPending: tt.pending, Timestamp: time.Now().Add(-tt.age)}
			if got := h.show(tt.kind, md, tt.replay, tt.resumed); got != tt.want {
				t.Fatalf("show = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSecretsCompare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		got     string
		want    string
		wantErr bool
	}{
		{name: "equal", got: "abcdefgh", want: "abcdefgh"},
		{name: "different", got: "abcdefgh", want: "abcdefgi", wantErr: true},
		{name: "prefix", got: "abcdefg", want: "abcdefgh", wantErr: true},
		{name: "both empty never match", got: "", want: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if equal(tt.got, tt.want) == tt.wantErr {
				t.Fatalf("equal(%q, %q) = %v", tt.got, tt.want, !tt.wantErr)
			}
		})
	}
}
