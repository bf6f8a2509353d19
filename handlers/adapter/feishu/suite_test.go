package feishu_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/feishu"
	"github.com/ximd/ximd/handlers/adapter/feishu/feishutest"
)

// unlimited turns the fake's rate limits off, for tests that are not about them.
var unlimited = feishutest.Limits{PerChatPerSecond: 100000, CardPerSecond: 100000, AppPerMinute: 1000000, AppPerSecond: 100000}

// The universal adapter suite against the open-platform fake: each chat is a p2p chat of one app
// with a person of its own.
func TestFeishu_UniversalAdapterSuite(t *testing.T) {
	fake := feishutest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	app := fake.AddApp("cli_suite", "suite-secret", "suite bot")
	files := adaptertest.NewFiles()
	limited := feishutest.New()
	t.Cleanup(limited.Close)
	limitedApp := limited.AddApp("cli_limited", "limited-secret", "limited bot")
	adaptertest.Run(t, adaptertest.Setup{
		Adapter: feishu.New(feishu.Options{Common: adapter.Common{Files: files}}),
		Files:   files,
		SeenID:  func(id string) string { m, _, _ := strings.Cut(id, ":"); return m },
		RateLimited: func(t *testing.T) func(context.Context) error {
			// The adapter paces its own calls within Feishu's limits, so the platform's
			// frequency limit is made to answer: 429 99991400 with a 2 s reset.
			chat := limited.AddChat("p2p", "limited", limited.AddUser("Lim"))
			tg, err := feishu.New(feishu.Options{}).Open(config(t, limited.URL(), limitedApp, chat, map[string]any{"streaming": "none"}))
			if err != nil {
				t.Fatal(err)
			}
			limited.FailNext(feishutest.RouteMessages, 1, http.StatusTooManyRequests, 99991400, "request trigger frequency limit", 2)
			return func(ctx context.Context) error {
				_, err := tg.Send(ctx, adapter.Message{Text: "limited", Final: true, IdempotencyKey: "suite:limited"})
				return err
			}
		},
		NewChat: func(t *testing.T, streaming adapter.Streaming, activity adapter.ActivityMode) adaptertest.Chat {
			chat := fake.AddChat("p2p", "suite", fake.AddUser("Alice"))
			if streaming == adapter.StreamingEdit {
				streaming = feishu.StreamingCard
			}
			return adaptertest.Chat{
				Config:   config(t, fake.URL(), app, chat, map[string]any{"streaming": streaming}),
				Messages: func(t *testing.T) []adaptertest.Seen { return seen(fake, chat) },
			}
		},
	})
}

// config is a channel config binding a chat of app on the server at url.
func config(t *testing.T, url string, app feishutest.App, chat string, extra map[string]any) json.RawMessage {
	t.Helper()
	c := map[string]any{"app_id": app.ID, "app_secret": app.Secret, "chat_id": chat, "base_url": url}
	for k, v := range extra {
		c[k] = v
	}
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// seen is the chat as its person sees it: the apps' messages, oldest first.
func seen(fake *feishutest.Server, chat string) []adaptertest.Seen {
	var out []adaptertest.Seen
	for _, m := range fake.Messages(chat) {
		s := adaptertest.Seen{ID: m.ID, Text: m.Text, ReplyTo: m.ParentID}
		if m.File != nil {
			s.Text = ""
			s.Files = []adaptertest.SeenFile{{Name: m.File.Name, Data: m.File.Data}}
		}
		out = append(out, s)
	}
	return out
}
