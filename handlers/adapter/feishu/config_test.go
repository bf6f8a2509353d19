package feishu_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/feishu"
	"github.com/ximd/ximd/handlers/adapter/feishu/feishutest"
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
	if c.Streaming != adapter.StreamingEdit || c.Activity != adapter.ActivityNone || c.InDoubtRule() != adapter.InDoubtDedupe ||
		c.InDoubtWindow != feishu.UUIDWindow || !c.ResendSafe() || c.MaxTextLength != feishu.MaxTextLength {
		t.Fatalf("capabilities %+v", c)
	}
	if _, ok := adapter.ShowerOf(tg); ok {
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

// The tenant access token is fetched once and again before it expires; a token Feishu refuses
// (expired early, revoked) is fetched again and the call repeated once.
func TestToken_RefreshedBeforeExpiryAndWhenRefused(t *testing.T) {
	fake := feishutest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	app := fake.AddApp("cli_tok", "tok-secret", "bot")
	chat := fake.AddChat("p2p", "c", fake.AddUser("Tom"))
	tg, err := feishu.New(feishu.Options{}).Open(config(t, fake.URL(), app, chat, map[string]any{"streaming": "none"}))
	if err != nil {
		t.Fatal(err)
	}
	send := func(i int) {
		t.Helper()
		if _, err := tg.Send(context.Background(), adapter.Message{Text: fmt.Sprint("message ", i), Final: true, IdempotencyKey: fmt.Sprint("c:", i)}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	tokens := func() int {
		n := 0
		for _, c := range fake.Calls() {
			if c.Route == feishutest.RouteToken {
				n++
			}
		}
		return n
	}
	fake.SetTokenTTL(2 * time.Second)
	send(1)
	send(2)
	if n := tokens(); n != 1 {
		t.Fatalf("%d token calls for two sends, want 1", n)
	}
	time.Sleep(1600 * time.Millisecond) // within the last quarter of its life
	send(3)
	if n := tokens(); n != 2 {
		t.Fatalf("%d token calls near expiry, want 2", n)
	}
	fake.FailNext(feishutest.RouteMessages, 1, 400, 99991663, "Invalid access token for authorization", 0)
	send(4) // refused: fetched again, the call repeated
	if n := tokens(); n != 3 {
		t.Fatalf("%d token calls after a refused token, want 3", n)
	}
	if got := len(fake.Messages(chat)); got != 4 {
		t.Fatalf("%d messages, want 4", got)
	}
}
