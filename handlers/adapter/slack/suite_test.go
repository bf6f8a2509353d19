package slack_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/slack"
	"github.com/ximd/ximd/handlers/adapter/slack/slacktest"
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
