package subjects_test

import (
	"errors"
	"testing"

	"github.com/ximd/ximd/subjects"
)

func TestWebchatSubjects(t *testing.T) {
	tests := []struct {
		name, channel, item, want string
		wantErr                   bool
	}{
		{name: "message", channel: "demo", item: "a0123", want: "xim.webchat.demo.a0123"},
		{name: "dot in channel", channel: "a.b", item: "a1", wantErr: true},
		{name: "wildcard item", channel: "demo", item: "*", wantErr: true},
		{name: "gt channel", channel: ">", item: "a1", wantErr: true},
		{name: "empty item", channel: "demo", item: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := subjects.WebchatItem(tt.channel, tt.item)
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, subjects.ErrUnsafeToken)) {
				t.Fatalf("WebchatItem(%q,%q) err = %v, wantErr %v", tt.channel, tt.item, err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("WebchatItem = %q, want %q", got, tt.want)
			}
		})
	}
	if s, err := subjects.WebchatStatus("demo"); err != nil || s != "xim.webchat.demo.status" {
		t.Fatalf("WebchatStatus = %q, %v", s, err)
	}
	if s, err := subjects.WebchatChannel("demo"); err != nil || s != "xim.webchat.demo.*" {
		t.Fatalf("WebchatChannel = %q, %v", s, err)
	}
	if _, err := subjects.WebchatChannel("a b"); !errors.Is(err, subjects.ErrUnsafeToken) {
		t.Fatalf("WebchatChannel of an unsafe id: %v", err)
	}
}
