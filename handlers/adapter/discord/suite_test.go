package discord_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/discord"
	"github.com/ximd/ximd/handlers/adapter/discord/discordtest"
)

// unlimited turns the fake's rate limits off, for tests that are not about them.
var unlimited = discordtest.Limits{Messages: 1000, Typing: 1000, Window: time.Second}

// The universal adapter suite against the Discord API fake: each chat is a guild text channel
// of one bot with a person of its own.
func TestDiscord_UniversalAdapterSuite(t *testing.T) {
	fake := discordtest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	fake.TypingFor = 2 * time.Second // Discord's 10 s, shortened so "cleared" shows within the suite's wait
	bot := fake.AddBot("suite-token", "suite")
	files := adaptertest.NewFiles()
	limited := discordtest.New() // Discord's limits
	t.Cleanup(limited.Close)
	limitedBot := limited.AddBot("limited-token", "limited")
	adaptertest.Run(t, adaptertest.Setup{
		Adapter: discord.New(discord.Options{Common: adapter.Common{Files: files}}),
		Files:   files,
		RateLimited: func(t *testing.T) func(context.Context) error {
			person := limited.AddUser("Lim")
			ch := limited.AddChannel("g1", limitedBot, person)
			tg, err := discord.New(discord.Options{}).Open(config(t, limited, limitedBot, ch, nil))
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context) error {
				return tg.(adapter.ActivityShower).ShowActivity(ctx, adapter.Activity{Status: adapter.StatusTyping})
			}
		},
		NewChat: func(t *testing.T, streaming adapter.Streaming, activity adapter.ActivityMode) adaptertest.Chat {
			person := fake.AddUser("Alice")
			ch := fake.AddChannel("g1", bot, person)
			return adaptertest.Chat{
				Config:   config(t, fake, bot, ch, map[string]any{"streaming": streaming, "activity": activity, "first_preview_words": 0}),
				Messages: func(t *testing.T) []adaptertest.Seen { return seen(fake, ch, bot) },
				Activity: func(t *testing.T) bool { return fake.Typing(ch) },
				Post: func(t *testing.T, text string, f *adaptertest.SeenFile) string {
					if f != nil {
						return fake.PostFile(ch, person, text, f.Name, f.Data)
					}
					return fake.Post(ch, person, text)
				},
			}
		},
	})
}

// config is a channel config binding channel ch of bot on the fake.
func config(t *testing.T, fake *discordtest.Server, bot discordtest.User, ch string, extra map[string]any) json.RawMessage {
	t.Helper()
	c := map[string]any{"bot_token": bot.Token, "api_url": fake.URL()}
	if ch != "" {
		c["channel_id"] = ch
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

// seen is the channel as its person sees it: the bot's messages, oldest first.
func seen(fake *discordtest.Server, ch string, bot discordtest.User) []adaptertest.Seen {
	var out []adaptertest.Seen
	for _, m := range fake.Messages(ch) {
		if m.Author.ID != bot.ID {
			continue
		}
		s := adaptertest.Seen{ID: m.ID, Text: m.Content, ReplyTo: m.ReplyTo}
		for _, f := range m.Files {
			s.Files = append(s.Files, adaptertest.SeenFile{Name: f.Name, Data: f.Data})
		}
		out = append(out, s)
	}
	// A file goes in a message of its own after the text: seen as the text's message.
	return out
}

// The universal suite's bot cases (edge-api §4.1) against the fake: each case has a bot of its
// own, and another bot in its guild channels.
func TestDiscord_BotSuite(t *testing.T) {
	fake := discordtest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	files := adaptertest.NewFiles()
	var n atomic.Int64
	adaptertest.RunBots(t, adaptertest.Setup{
		Adapter: discord.New(discord.Options{Common: adapter.Common{Files: files}}),
		Files:   files,
	}, func(t *testing.T) adaptertest.BotSetup {
		i := n.Add(1)
		b := fake.AddBot(fmt.Sprintf("bot-token-%d", i), fmt.Sprintf("suite%d", i))
		other := fake.AddBot(fmt.Sprintf("other-token-%d", i), fmt.Sprintf("other%d", i))
		chat := func(guild string, k adapter.ConversationKind) adaptertest.BotChat {
			person := fake.AddUser("Dana")
			members := []discordtest.User{b, person}
			if guild != "" {
				members = append(members, other)
			}
			ch := fake.AddChannel(guild, members...)
			c := adaptertest.BotChat{Kind: k, Author: person.ID,
				Post: func(t *testing.T, text string, mention bool) string {
					// Discord replays nothing of a conversation a bot has not seen yet (a new DM
					// written while it is offline is never read): a person writes once it is online.
					online(t, fake, b.Token)
					if mention {
						return fake.Post(ch, person, "<@"+b.ID+"> "+text, b)
					}
					return fake.Post(ch, person, text)
				},
				Messages: func(t *testing.T) []adaptertest.Seen { return seen(fake, ch, b) },
			}
			if guild != "" {
				c.PostAsBot = func(t *testing.T, text string) { fake.Post(ch, other, text) }
			}
			return c
		}
		return adaptertest.BotSetup{
			Config: config(t, fake, b, "", nil),
			Direct: func(t *testing.T) adaptertest.BotChat { return chat("", adapter.Direct) },
			Group:  func(t *testing.T) adaptertest.BotChat { return chat("g1", adapter.Group) },
		}
	})
}

// online waits for the bot with token to hold a gateway connection.
func online(t *testing.T, fake *discordtest.Server, token string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for fake.Connections(token) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the bot did not connect to the gateway within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
