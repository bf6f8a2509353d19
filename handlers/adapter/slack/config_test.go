package slack_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/slack"
	"github.com/ximd/ximd/profile"
)

func TestConfig_DefaultsCapabilitiesAndPublicViewWithoutSecrets(t *testing.T) {
	a := slack.New(slack.Options{})
	for _, tt := range []struct {
		cfg               string
		inbound, activity string
	}{
		{`{"bot_token":"xoxb-SECRET","channel_id":"D1","app_token":"xapp-SECRET"}`, "socket_mode", "none"},
		{`{"bot_token":"xoxb-SECRET","channel_id":"C1","thread_ts":"1.2","signing_secret":"SECRET"}`, "events_api", "status"},
	} {
		raw, err := a.Public(json.RawMessage(tt.cfg))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(raw, []byte("SECRET")) {
			t.Fatalf("public view %s shows a secret", raw)
		}
		var p struct{ Inbound, Activity, Streaming string }
		_ = json.Unmarshal(raw, &p)
		if p.Inbound != tt.inbound || p.Activity != tt.activity || p.Streaming != "stream" {
			t.Fatalf("%s: public %s", tt.cfg, raw)
		}
		tg, err := a.Open(json.RawMessage(tt.cfg))
		if err != nil {
			t.Fatal(err)
		}
		if c := tg.Capabilities(); c.Streaming != adapter.StreamingEdit || c.InDoubtRule() != adapter.InDoubtLookup || c.Reply != adapter.ReplyNative {
			t.Fatalf("capabilities %+v", c)
		}
	}
}

func TestConfig_RefusalsNameTheFieldNeverTheSecret(t *testing.T) {
	a := slack.New(slack.Options{})
	for cfg, field := range map[string]string{
		`{}`: "bot_token",
		`{"bot_token":"xoxp-SECRET","channel_id":"C1"}`:                      "bot_token",
		`{"bot_token":"xoxb-SECRET"}`:                                        "channel_id",
		`{"bot_token":"xoxb-SECRET","channel_id":"C1","app_token":"SECRET"}`: "app_token",
		`{"bot_token":"xoxb-SECRET","channel_id":"C1","streaming":"draft"}`:  "streaming",
		`{"bot_token":"xoxb-SECRET","channel_id":"C1","activity":"status"}`:  "activity",
		`{"bot_token":"xoxb-SECRET","channel_id":"C1","api_url":"ftp://x"}`:  "api_url",
		`{"bot_token":"xoxb-SECRET","channel_id":"C1","colour":"red"}`:       "colour",
	} {
		_, err := a.Open(json.RawMessage(cfg))
		var pe *profile.Error
		if !errors.As(err, &pe) || pe.Code != profile.CodeInvalidDescriptor || !strings.Contains(pe.Message, "target.config."+field) || strings.Contains(pe.Message, "SECRET") {
			t.Fatalf("%s: %v, want invalid_descriptor naming target.config.%s without the secret", cfg, err, field)
		}
	}
}
