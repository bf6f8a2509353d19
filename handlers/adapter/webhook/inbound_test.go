package webhook_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/webhook"
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
			v1 := func(secret string) http.Header {
				return http.Header{webhook.SignatureHeader: {webhook.Sign([]byte(secret), body)}}
			}
			if !in.Verify(body, v1("s"), time.Now()) || in.Verify(body, v1("t"), time.Now()) {
				t.Fatal("Verify does not use the channel's secret")
			}
		})
	}
}

// edge-api §7.1: a V2 signature (X-Xim-Timestamp, X-Xim-Signature-V2 over "<timestamp>.<body>")
// is checked when present, and refused outside 5 minutes of ximd's clock, whatever V1 says; a
// channel configured "signature": "v2" refuses V1 alone, so an old body cannot be replayed.
func TestWebhook_InboundSignatureV2(t *testing.T) {
	a := webhook.New(webhook.Options{})
	body := []byte(`{"target_message_id":"1","text":"hi"}`)
	now := time.Now()
	signed := func(secret string, at time.Time, v1 bool) http.Header {
		h := http.Header{}
		ts, sig := webhook.SignV2([]byte(secret), body, at)
		h.Set(webhook.TimestampHeader, ts)
		h.Set(webhook.SignatureV2Header, sig)
		if v1 {
			h.Set(webhook.SignatureHeader, webhook.Sign([]byte(secret), body))
		}
		return h
	}
	v1only := http.Header{webhook.SignatureHeader: {webhook.Sign([]byte("s"), body)}}
	for _, tc := range []struct {
		name, signature string
		h               http.Header
		want            bool
	}{
		{"v2 now", "", signed("s", now, false), true},
		{"v2 four minutes old", "", signed("s", now.Add(-4*time.Minute), false), true},
		{"v2 replayed after six minutes, v1 still valid", "", signed("s", now.Add(-6*time.Minute), true), false},
		{"v2 from the future", "", signed("s", now.Add(6*time.Minute), false), false},
		{"v2 wrong secret", "", signed("t", now, false), false},
		{"v1 alone on a v1 channel", "", v1only, true},
		{"v1 alone on a v2 channel", "v2", v1only, false},
		{"v2 on a v2 channel", "v2", signed("s", now, false), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := `{"url":"http://x/h","chat_id":"c","secret":"s"}`
			if tc.signature != "" {
				cfg = `{"url":"http://x/h","chat_id":"c","secret":"s","signature":"` + tc.signature + `"}`
			}
			in, err := a.InboundOf(json.RawMessage(cfg))
			if err != nil {
				t.Fatal(err)
			}
			if got := in.Verify(body, tc.h, now); got != tc.want {
				t.Fatalf("Verify = %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := a.InboundOf(json.RawMessage(`{"url":"http://x/h","chat_id":"c","secret":"s","signature":"v3"}`)); profile.CodeOf(err) != profile.CodeInvalidDescriptor {
		t.Fatalf("signature v3: %v, want invalid_descriptor", err)
	}
}
