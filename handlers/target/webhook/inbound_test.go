package webhook_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/ximd/ximd/handlers/target/webhook"
	"github.com/ximd/ximd/profile"
)

// The inbound route's view of a channel config: the secret verifies X-Xim-Signature, and files
// may come from url's host (with its port) and the file_hosts entries.
func TestWebhook_InboundOf(t *testing.T) {
	a := webhook.New(webhook.Options{})
	tests := []struct {
		name      string
		config    string
		wantHosts []string
		wantErr   bool
	}{
		{name: "url host with port", config: `{"url":"http://127.0.0.1:9999/hook","chat_id":"c","secret":"s"}`, wantHosts: []string{"127.0.0.1:9999"}},
		{name: "file_hosts added", config: `{"url":"https://chat.example.com/hook","chat_id":"c","secret":"s","file_hosts":["files.example.com","*.cdn.example.com"]}`,
			wantHosts: []string{"chat.example.com", "files.example.com", "*.cdn.example.com"}},
		{name: "file_hosts not an array", config: `{"url":"http://x/h","chat_id":"c","secret":"s","file_hosts":"x"}`, wantErr: true},
		{name: "file_hosts with a path", config: `{"url":"http://x/h","chat_id":"c","secret":"s","file_hosts":["x/y"]}`, wantErr: true},
		{name: "file_hosts wildcard too wide", config: `{"url":"http://x/h","chat_id":"c","secret":"s","file_hosts":["*.com"]}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := a.InboundOf(json.RawMessage(tt.config))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				if profile.CodeOf(err) != profile.CodeInvalidDescriptor {
					t.Fatalf("code %s", profile.CodeOf(err))
				}
				return
			}
			if !slices.Equal(in.FileHosts, tt.wantHosts) {
				t.Fatalf("hosts %v, want %v", in.FileHosts, tt.wantHosts)
			}
			body := []byte(`{"target_message_id":"1"}`)
			if !in.Verify(body, webhook.Sign([]byte("s"), body)) || in.Verify(body, webhook.Sign([]byte("t"), body)) {
				t.Fatal("Verify does not use the channel's secret")
			}
		})
	}
}
