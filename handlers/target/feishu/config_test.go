package feishu_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/target"
	"github.com/ximd/ximd/handlers/target/feishu"
	"github.com/ximd/ximd/profile"
)

func TestConfig_DefaultsCapabilitiesAndPublicViewWithoutSecrets(t *testing.T) {
	a := feishu.New(feishu.Options{})
	cfg := json.RawMessage(`{"app_id":"cli_1","app_secret":"SECRET-1","chat_id":"oc_1","verification_token":"SECRET-2","encrypt_key":"SECRET-3"}`)
	raw, err := a.Public(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("SECRET")) {
		t.Fatalf("public view %s shows a secret", raw)
	}
	var p struct {
		Streaming string `json:"streaming"`
		BaseURL   string `json:"base_url"`
		Events    bool   `json:"events"`
	}
	_ = json.Unmarshal(raw, &p)
	if p.Streaming != "card" || p.BaseURL != feishu.DefaultBaseURL || !p.Events {
		t.Fatalf("public %s", raw)
	}
	tg, err := a.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := tg.Capabilities()
	if c.Streaming != target.StreamingEdit || c.Activity != target.ActivityNone || c.InDoubtRule() != target.InDoubtDedupe ||
		c.InDoubtWindow != feishu.UUIDWindow || !c.ResendSafe() || c.MaxTextLength != feishu.MaxTextLength {
		t.Fatalf("capabilities %+v", c)
	}
	if _, ok := target.ShowerOf(tg); ok {
		t.Fatal("a Feishu target claims to show activity")
	}
}

func TestConfig_RefusalsNameTheFieldNeverTheSecret(t *testing.T) {
	a := feishu.New(feishu.Options{})
	for cfg, field := range map[string]string{
		`{}`:                                  "app_id",
		`{"app_id":"cli_1","chat_id":"oc_1"}`: "app_secret",
		`{"app_id":"cli_1","app_secret":"SECRET"}`:                                           "chat_id",
		`{"app_id":"cli_1","app_secret":"SECRET","chat_id":"oc_1","streaming":"edit"}`:       "streaming",
		`{"app_id":"cli_1","app_secret":"SECRET","chat_id":"oc_1","activity":"typing"}`:      "activity",
		`{"app_id":"cli_1","app_secret":"SECRET","chat_id":"oc_1","base_url":"ftp://x"}`:     "base_url",
		`{"app_id":"cli_1","app_secret":"SECRET","chat_id":"oc_1","first_preview_words":-1}`: "first_preview_words",
		`{"app_id":"cli_1","app_secret":"SECRET","chat_id":"oc_1","colour":"red"}`:           "colour",
	} {
		_, err := a.Open(json.RawMessage(cfg))
		var pe *profile.Error
		if !errors.As(err, &pe) || pe.Code != profile.CodeInvalidDescriptor || !strings.Contains(pe.Message, "target.config."+field) || strings.Contains(pe.Message, "SECRET") {
			t.Fatalf("%s: %v, want invalid_descriptor naming target.config.%s without the secret", cfg, err, field)
		}
	}
}
