package feishu_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/feishu"
	"github.com/ximd/ximd/handlers/adapter/feishu/feishutest"
	"github.com/ximd/ximd/profile"
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

// The universal suite's bot cases (edge-api §4.1) against the open-platform fake: each bot is an
// app of its own whose event subscription points at a local route serving its ReceiveBot; its
// conversations are p2p chats of new people and a group of two with another app's bot in it.
func TestFeishu_BotSuite(t *testing.T) {
	fake := feishutest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	files := adaptertest.NewFiles()
	a := feishu.New(feishu.Options{Common: adapter.Common{Files: files}})
	other := fake.AddApp("cli_other_bot", "other-secret", "another bot")
	n := 0
	adaptertest.RunBots(t, adaptertest.Setup{Adapter: a, Files: files}, func(t *testing.T) adaptertest.BotSetup {
		n++
		app := fake.AddApp(fmt.Sprintf("cli_bot%d", n), "bot-secret", "ximd bot")
		t.Cleanup(func() { fake.SetEventURL(app.ID, "", "", "") })
		const token, key = "suite-verification-token", "suite-encrypt-key"
		cfg, _ := json.Marshal(map[string]any{"app_id": app.ID, "app_secret": app.Secret, "base_url": fake.URL(),
			"verification_token": token, "encrypt_key": key})
		post := func(chat string, from feishutest.User) func(t *testing.T, text string, mention bool) string {
			return func(t *testing.T, text string, mention bool) string {
				if mention {
					id, _ := fake.PostMentioning(chat, from, "@_user_1 "+text, app.BotOpenID)
					return id
				}
				id, _ := fake.Post(chat, from, text)
				return id
			}
		}
		return adaptertest.BotSetup{
			Config: cfg,
			Direct: func(t *testing.T) adaptertest.BotChat {
				person := fake.AddUser("Dana")
				chat := fake.AddChat("p2p", "", person)
				return adaptertest.BotChat{Kind: adapter.Direct, Author: person.OpenID, Post: post(chat, person),
					Messages: func(t *testing.T) []adaptertest.Seen { return seenOf(fake, chat, app.ID) }}
			},
			Group: func(t *testing.T) adaptertest.BotChat {
				ann, bob := fake.AddUser("Ann"), fake.AddUser("Bob")
				chat := fake.AddChat("group", "Team", ann, bob)
				return adaptertest.BotChat{Kind: adapter.Group, Author: ann.OpenID, Post: post(chat, ann),
					PostAsBot: func(t *testing.T, text string) { fake.PostAsBot(chat, other.ID, text) },
					Messages:  func(t *testing.T) []adaptertest.Seen { return seenOf(fake, chat, app.ID) }}
			},
			Listen: func(t *testing.T, bot adapter.Bot, feed *adaptertest.Feed) {
				fake.SetEventURL(app.ID, listenBot(t, a, bot, feed), token, key)
			},
		}
	})
}

// seenOf is what a chat shows of one app's bot, oldest first.
func seenOf(fake *feishutest.Server, chat, appID string) []adaptertest.Seen {
	var out []adaptertest.Seen
	for _, s := range seen(fake, chat) {
		for _, m := range fake.Messages(chat) {
			if m.ID == s.ID && m.Sender == appID {
				out = append(out, s)
			}
		}
	}
	return out
}

// listenBot serves a's ReceiveBot for bot with feed at a local route, as the gateway does
// (a refusal answered with its code's HTTP status), and returns the route's URL: the app's
// request URL.
func listenBot(t *testing.T, a *feishu.Adapter, bot adapter.Bot, feed adapter.Inboxes) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /bots/{bot}/{path}", func(w http.ResponseWriter, r *http.Request) {
		if _, err := a.ReceiveBot(w, r, bot, feed); err != nil {
			pe, status := profile.AsError(err), http.StatusInternalServerError
			if info, ok := profile.Lookup(pe.Code); ok && info.HTTPStatus != 0 {
				status = info.HTTPStatus
			}
			http.Error(w, pe.Code, status)
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/bots/" + bot.ID + "/events"
}
