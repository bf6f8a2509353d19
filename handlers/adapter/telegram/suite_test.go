package telegram_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/telegram"
	"github.com/ximd/ximd/handlers/adapter/telegram/telegramtest"
)

// unlimited turns the fake's rate limits off, for tests that are not about them.
var unlimited = telegramtest.Limits{PerChatPerSecond: 1000, GroupPerMinute: 100000, EditsPerMinute: 100000, EphemeralPerSecond: 1000}

// The universal adapter suite against the Bot API fake: each chat is a private chat of one bot
// with a person of its own.
func TestTelegram_UniversalAdapterSuite(t *testing.T) {
	fake := telegramtest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	bot := fake.AddBot("7001:suite-secret", "suite_bot")
	files := adaptertest.NewFiles()
	limited := telegramtest.New() // default limits
	t.Cleanup(limited.Close)
	limitedBot := limited.AddBot("7002:limited-secret", "limited_bot")
	adaptertest.Run(t, adaptertest.Setup{
		Adapter: telegram.New(telegram.Options{Common: adapter.Common{Files: files}, PollTimeout: time.Second}),
		Files:   files,
		// getUpdates: an update is forgotten once the updates after it are asked for.
		ForgetsConfirmed: true,
		RateLimited: func(t *testing.T) func(context.Context) error {
			// Chat actions have no budget of the adapter's own: the platform's 429 answers.
			person := limited.AddUser("Lim")
			chat := limited.AddChat("private", "", person.ID)
			tg, err := telegram.New(telegram.Options{}).Open(config(t, limited.URL(), limitedBot, chat, nil))
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context) error {
				return tg.(adapter.ActivityShower).ShowActivity(ctx, adapter.Activity{Status: adapter.StatusTyping})
			}
		},
		NewChat: func(t *testing.T, streaming adapter.Streaming, activity adapter.ActivityMode) adaptertest.Chat {
			person := fake.AddUser("Alice")
			chat := fake.AddChat("private", "", person.ID)
			return adaptertest.Chat{
				Config:   config(t, fake.URL(), bot, chat, map[string]any{"streaming": streaming, "activity": activity, "edits_per_minute": 600}),
				Messages: func(t *testing.T) []adaptertest.Seen { return seen(fake, chat) },
				Previews: func(t *testing.T) []string {
					var out []string
					for _, d := range fake.Drafts(chat) {
						out = append(out, d.Text)
					}
					return out
				},
				Activity: func(t *testing.T) bool { return fake.Typing(chat) },
				Post: func(t *testing.T, text string, f *adaptertest.SeenFile) string {
					if f != nil {
						return strconv.Itoa(fake.PostFile(chat, person, "document", text, f.Name, f.Data))
					}
					return strconv.Itoa(fake.Post(chat, person, text))
				},
			}
		},
	})
}

// config is a channel config binding a chat of bot on the server at url.
func config(t *testing.T, url string, bot telegramtest.Bot, chat int64, extra map[string]any) json.RawMessage {
	t.Helper()
	c := map[string]any{"token": bot.Token, "chat_id": chat, "api_url": url}
	for k, v := range extra {
		c[k] = v
	}
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// seen is the chat as its person sees it: the bots' messages, oldest first.
func seen(fake *telegramtest.Server, chat int64) []adaptertest.Seen {
	var out []adaptertest.Seen
	for _, m := range fake.Messages(chat) {
		s := adaptertest.Seen{ID: strconv.Itoa(m.ID), Text: m.Text}
		if m.ReplyTo != 0 {
			s.ReplyTo = strconv.Itoa(m.ReplyTo)
		}
		if m.File != nil {
			s.Text = m.Caption
			s.Files = []adaptertest.SeenFile{{Name: m.File.Name, Data: m.File.Data}}
		}
		out = append(out, s)
	}
	return out
}

// The universal suite's bot cases (edge-api §4.1) against the Bot API fake: each case has a bot
// of its own (its own token, so its own getUpdates queue), and another bot in its groups whose
// messages it sees by Bot-to-Bot Communication.
func TestTelegram_BotSuite(t *testing.T) {
	fake := telegramtest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	files := adaptertest.NewFiles()
	var n atomic.Int64
	adaptertest.RunBots(t, adaptertest.Setup{
		Adapter: telegram.New(telegram.Options{Common: adapter.Common{Files: files}, PollTimeout: time.Second}),
		Files:   files,
	}, func(t *testing.T) adaptertest.BotSetup {
		id := 7100 + n.Add(1)
		username := fmt.Sprintf("suite%d_bot", id)
		b := fake.AddBot(fmt.Sprintf("%d:bot-suite-secret", id), username)
		fake.SetBotToBot(b.ID, true) // it sees the other bot's messages
		other := fake.AddBot(fmt.Sprintf("%d:other-secret", id+1000), fmt.Sprintf("other%d_bot", id))
		chat := func(kind string, k adapter.ConversationKind) adaptertest.BotChat {
			person := fake.AddUser("Dana")
			chat := fake.AddChat(kind, "team", person.ID)
			c := adaptertest.BotChat{Kind: k, Author: strconv.FormatInt(person.ID, 10),
				Post: func(t *testing.T, text string, mention bool) string {
					if mention {
						text = "@" + username + " " + text
					}
					return strconv.Itoa(fake.Post(chat, person, text))
				},
				Messages: func(t *testing.T) []adaptertest.Seen { return seen(fake, chat) },
			}
			if kind != "private" {
				c.PostAsBot = func(t *testing.T, text string) { fake.PostAsBot(chat, other, text) }
			}
			return c
		}
		raw, _ := json.Marshal(map[string]any{"token": b.Token, "api_url": fake.URL()})
		return adaptertest.BotSetup{
			Config: raw,
			Direct: func(t *testing.T) adaptertest.BotChat { return chat("private", adapter.Direct) },
			Group:  func(t *testing.T) adaptertest.BotChat { return chat("supergroup", adapter.Group) },
		}
	})
}
