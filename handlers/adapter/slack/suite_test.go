package slack_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/slack"
	"github.com/ximd/ximd/handlers/adapter/slack/slacktest"
	"github.com/ximd/ximd/profile"
)

// unlimited turns the fake's rate limits off, for tests that are not about them.
var unlimited = slacktest.Limits{PostPerSecond: 1000, PostBurst: 1000, Tier1PerMinute: 100000, Tier2PerMinute: 100000, Tier3PerMinute: 100000, Tier4PerMinute: 100000}

// The universal adapter suite against the Slack fake: each chat is a DM of one bot with a person
// of its own (in a thread where activity is asked for: the assistant status shows in one), user
// messages by Socket Mode.
func TestSlack_UniversalAdapterSuite(t *testing.T) {
	fake := slacktest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	fake.SetSocketMode(true)
	bot := fake.AddBot("suite bot")
	files := adaptertest.NewFiles()
	limited := slacktest.New()
	t.Cleanup(limited.Close)
	limitedBot := limited.AddBot("limited bot")
	adaptertest.Run(t, adaptertest.Setup{
		Adapter: slack.New(slack.Options{Common: adapter.Common{Files: files}}),
		Files:   files,
		// Socket Mode: an acknowledged envelope is not sent again.
		ForgetsConfirmed: true,
		RateLimited: func(t *testing.T) func(context.Context) error {
			ch := limited.AddChannel("im", "limited", limited.AddUser("Lim"))
			tg, err := slack.New(slack.Options{}).Open(config(t, limited, limitedBot, ch, "", nil))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			return func(ctx context.Context) error {
				n++
				_, err := tg.Send(ctx, adapter.Message{Text: "limited " + strings.Repeat(".", n), Final: true, IdempotencyKey: "suite:limited:" + strings.Repeat(".", n)})
				return err
			}
		},
		NewChat: func(t *testing.T, streaming adapter.Streaming, activity adapter.ActivityMode) adaptertest.Chat {
			person := fake.AddUser("Alice")
			ch := fake.AddChannel("im", "alice", person)
			thread := "" // top-level, so replies are threads of their own
			extra := map[string]any{"streaming": streaming, "activity": adapter.ActivityNone}
			if activity != adapter.ActivityNone {
				// The assistant status shows in a thread.
				thread, _ = fake.Post(ch, person, "a question starts the thread", "")
				extra["activity"] = adapter.ActivityStatus
			}
			return adaptertest.Chat{
				Config:   config(t, fake, bot, ch, thread, extra),
				Messages: func(t *testing.T) []adaptertest.Seen { return seen(fake, ch, bot) },
				Activity: func(t *testing.T) bool {
					st := fake.Statuses(ch, thread)
					return len(st) > 0 && st[len(st)-1].Text != ""
				},
				Post: func(t *testing.T, text string, f *adaptertest.SeenFile) string {
					if f != nil {
						ts, _ := fake.PostFile(ch, person, f.Name, f.Data)
						return ts
					}
					ts, _ := fake.Post(ch, person, text, thread)
					return ts
				},
			}
		},
	})
}

// config is a channel config binding conversation ch (and thread, if not "") of bot.
func config(t *testing.T, fake *slacktest.Server, bot slacktest.Bot, ch, thread string, extra map[string]any) json.RawMessage {
	t.Helper()
	c := map[string]any{"bot_token": bot.Token, "app_token": bot.AppToken, "channel_id": ch, "api_url": fake.URL()}
	if thread != "" {
		c["thread_ts"] = thread
	}
	for k, v := range extra {
		c[k] = v
	}
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// seen is the conversation as its person sees it: the bot's messages, oldest first.
func seen(fake *slacktest.Server, ch string, bot slacktest.Bot) []adaptertest.Seen {
	var out []adaptertest.Seen
	for _, m := range fake.Messages(ch) {
		if m.BotID != bot.BotID && m.User != bot.UserID {
			continue
		}
		s := adaptertest.Seen{ID: m.TS, Text: m.Text}
		if m.Markdown != "" {
			s.Text = m.Markdown // what the person reads: the markdown block
		}
		if m.ThreadTS != "" && m.ThreadTS != m.TS {
			s.ReplyTo = m.ThreadTS
		}
		for _, f := range m.Files {
			s.Files = append(s.Files, adaptertest.SeenFile{Name: f.Name, Data: f.Data})
		}
		out = append(out, s)
	}
	return out
}

// The universal suite's bot cases (edge-api §4.1) against the Slack fake, messages in by Socket
// Mode: a bot's config is the app's tokens without channel_id; each case gets a workspace of its
// own with the bot, and another app whose bot writes in the group.
func TestSlack_BotSuiteSocketMode(t *testing.T) {
	files := adaptertest.NewFiles()
	adaptertest.RunBots(t, adaptertest.Setup{Adapter: slack.New(slack.Options{Common: adapter.Common{Files: files}}), Files: files},
		func(t *testing.T) adaptertest.BotSetup {
			fake := slacktest.New()
			t.Cleanup(fake.Close)
			fake.SetLimits(unlimited)
			fake.SetSocketMode(true)
			return botSetup(t, fake, fake.AddBot("suite bot"), map[string]any{"app_token": nil})
		})
}

// The same cases with messages in by the Events API at the bot's route (signed with the bot's
// signing_secret).
func TestSlack_BotSuiteEventsAPI(t *testing.T) {
	files := adaptertest.NewFiles()
	a := slack.New(slack.Options{Common: adapter.Common{Files: files}})
	adaptertest.RunBots(t, adaptertest.Setup{Adapter: a, Files: files},
		func(t *testing.T) adaptertest.BotSetup {
			fake := slacktest.New()
			t.Cleanup(fake.Close)
			fake.SetLimits(unlimited)
			bot := fake.AddBot("suite bot")
			bs := botSetup(t, fake, bot, map[string]any{"signing_secret": bot.SigningSecret})
			bs.Listen = func(t *testing.T, b adapter.Bot, feed *adaptertest.Feed) {
				fake.SetEventURL(botRoute(t, a, b, feed)+"/bots/"+b.ID+"/events", "")
			}
			return bs
		})
}

// botRoute serves a bot's route as the gateway does (POST /bots/{bot}/{path...} to ReceiveBot
// with feed) and returns its base URL.
func botRoute(t *testing.T, a *slack.Adapter, b adapter.Bot, feed *adaptertest.Feed) string {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /bots/{bot}/{path...}", func(w http.ResponseWriter, r *http.Request) {
		if _, err := a.ReceiveBot(w, r, b, feed); err != nil {
			http.Error(w, profile.AsError(err).Code, http.StatusServiceUnavailable)
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// botSetup is bot's config (its tokens with inbound, no conversation) and its conversations on
// fake: a direct message of a new person, a public channel of two.
func botSetup(t *testing.T, fake *slacktest.Server, bot slacktest.Bot, inbound map[string]any) adaptertest.BotSetup {
	cfg := map[string]any{"bot_token": bot.Token, "api_url": fake.URL()}
	for k, v := range inbound {
		if k == "app_token" {
			v = bot.AppToken
		}
		cfg[k] = v
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	other := fake.AddBot("another app")
	chat := func(kind adapter.ConversationKind, ch string, person slacktest.User) adaptertest.BotChat {
		return adaptertest.BotChat{
			Kind: kind, Author: person.ID,
			Post: func(t *testing.T, text string, mention bool) string {
				if mention {
					text = "<@" + bot.UserID + "> " + text
				}
				ts, _ := fake.Post(ch, person, text, "")
				return ts
			},
			PostAsBot: func(t *testing.T, text string) { fake.PostAsBot(ch, other, text, "") },
			Messages:  func(t *testing.T) []adaptertest.Seen { return seen(fake, ch, bot) },
		}
	}
	return adaptertest.BotSetup{
		Config: raw,
		Direct: func(t *testing.T) adaptertest.BotChat {
			person := fake.AddUser("Dana")
			return chat(adapter.Direct, fake.AddChannel("im", "", person), person)
		},
		Group: func(t *testing.T) adaptertest.BotChat {
			person := fake.AddUser("Gil")
			return chat(adapter.Group, fake.AddChannel("channel", "general", person, fake.AddUser("Hal")), person)
		},
	}
}
