package wecom_test

import (
	"fmt"
	"testing"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/wecom"
	"github.com/ximd/ximd/handlers/adapter/wecom/wecomtest"
)

// The universal bot cases against the WeCom fake. WeCom calls back a group's messages only when
// they mention the robot, so the suite's group case (an unaddressed message refused
// not_mentioned) cannot arise: TestWeCom_BotGroupMention covers groups.
func TestWeCom_Bots(t *testing.T) {
	fake := newFake(t)
	files := adaptertest.NewFiles()
	a := wecom.New(wecom.Options{Common: adapter.Common{Files: files}, Timing: fast})
	t.Cleanup(func() { _ = a.Close() })
	adaptertest.RunBots(t, adaptertest.Setup{Adapter: a, Files: files}, func(t *testing.T) adaptertest.BotSetup {
		bot := fake.AddBot("Helper")
		return adaptertest.BotSetup{
			Config: config(t, fake, bot, nil),
			Direct: func(t *testing.T) adaptertest.BotChat {
				user := fmt.Sprintf("stranger%d", people.Add(1))
				conv := wecomtest.Single(user)
				return adaptertest.BotChat{Kind: adapter.Direct, Author: user,
					Post:     func(t *testing.T, text string, _ bool) string { return fake.Say(bot, conv, user, text, false) },
					Messages: func(t *testing.T) []adaptertest.Seen { return seen(fake, bot, conv) }}
			},
		}
	})
}

// A group's message reaches the bot mentioned, "@Name" removed from its text, once however
// often WeCom calls it back.
func TestWeCom_BotGroupMention(t *testing.T) {
	fake := newFake(t)
	bot := fake.AddBot("Helper Bot")
	files := adaptertest.NewFiles()
	a := wecom.New(wecom.Options{Common: adapter.Common{Files: files}, Timing: fast})
	t.Cleanup(func() { _ = a.Close() })
	for _, name := range []string{"Helper Bot", ""} {
		t.Run(fmt.Sprintf("bot_name %q", name), func(t *testing.T) {
			p, _ := adapter.ParsePolicy([]byte(`{"groups": "mention"}`))
			extra := map[string]any{}
			if name != "" {
				extra["bot_name"] = name
			}
			b := adapter.Bot{ID: fmt.Sprintf("wb%d", people.Add(1)), Target: adapter.Binding{Adapter: wecom.Name, Config: config(t, fake, bot, extra)},
				Conversations: p, OpenedAt: nowMilli()}
			feed := adaptertest.NewFeed(files)
			feed.AddBot(b)
			stop := poll(t, a, feed)
			defer stop()
			chat := fmt.Sprintf("wrkgroup%d", people.Add(1))
			msgid := fake.Say(bot, wecomtest.Group(chat), "carol", "what is the weather?", true)
			fake.Say(bot, wecomtest.Group(chat), "carol", "chatter", false) // not called back
			fake.Again(bot, msgid)
			conv := adapter.Conversation{Kind: adapter.Group, ID: chat}
			waitFor(t, "the message in the group's channel", func() bool {
				in := feed.InboxOf(conv.ChannelID(b.ID))
				return in != nil && len(in.Messages()) == 1 && in.Redelivered() >= 1
			})
			got := feed.InboxOf(conv.ChannelID(b.ID)).Messages()[0]
			want := "what is the weather?"
			if name == "" {
				want = "Bot what is the weather?" // the leading @word taken for the name
			}
			if got.Text != want {
				t.Fatalf("text %q, want %q", got.Text, want)
			}
			if arr := feed.Arrivals(); !arr[0].Mentioned || arr[0].Author.ID != "carol" {
				t.Fatalf("arrival %+v", arr[0])
			}
		})
	}
}
