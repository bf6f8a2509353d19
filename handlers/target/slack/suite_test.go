package slack_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/target"
	"github.com/ximd/ximd/handlers/target/slack"
	"github.com/ximd/ximd/handlers/target/slack/slacktest"
	"github.com/ximd/ximd/handlers/target/targettest"
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
	files := targettest.NewFiles()
	limited := slacktest.New()
	t.Cleanup(limited.Close)
	limitedBot := limited.AddBot("limited bot")
	targettest.Run(t, targettest.Setup{
		Adapter: slack.New(slack.Options{Files: files}),
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
				_, err := tg.Send(ctx, target.Message{Text: "limited " + strings.Repeat(".", n), Final: true, IdempotencyKey: "suite:limited:" + strings.Repeat(".", n)})
				return err
			}
		},
		NewChat: func(t *testing.T, streaming, activity string) targettest.Chat {
			person := fake.AddUser("Alice")
			ch := fake.AddChannel("im", "alice", person)
			thread := "" // top-level, so replies are threads of their own
			extra := map[string]any{"streaming": streaming, "activity": target.ActivityNone}
			if activity != target.ActivityNone {
				// The assistant status shows in a thread.
				thread, _ = fake.Post(ch, person, "a question starts the thread", "")
				extra["activity"] = target.ActivityStatus
			}
			return targettest.Chat{
				Config:   config(t, fake, bot, ch, thread, extra),
				Messages: func(t *testing.T) []targettest.Seen { return seen(fake, ch, bot) },
				Activity: func(t *testing.T) bool {
					st := fake.Statuses(ch, thread)
					return len(st) > 0 && st[len(st)-1].Text != ""
				},
				Post: func(t *testing.T, text string, f *targettest.SeenFile) string {
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
func seen(fake *slacktest.Server, ch string, bot slacktest.Bot) []targettest.Seen {
	var out []targettest.Seen
	for _, m := range fake.Messages(ch) {
		if m.BotID != bot.BotID && m.User != bot.UserID {
			continue
		}
		s := targettest.Seen{ID: m.TS, Text: m.Text}
		if m.ThreadTS != "" && m.ThreadTS != m.TS {
			s.ReplyTo = m.ThreadTS
		}
		for _, f := range m.Files {
			s.Files = append(s.Files, targettest.SeenFile{Name: f.Name, Data: f.Data})
		}
		out = append(out, s)
	}
	return out
}
