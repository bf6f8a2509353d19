package adaptertest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// BotSetup is a bot of the platform under test (edge-api §4.1): an account, and conversations
// of it that a person writes in without anybody having bound them.
type BotSetup struct {
	// Config is the bot's target.config: the account, no conversation named.
	Config json.RawMessage
	// Direct starts a one-to-one conversation of a new person with the bot.
	Direct func(t *testing.T) BotChat
	// Group starts a conversation of several people with the bot in it; nil: none here.
	Group func(t *testing.T) BotChat
	// Listen makes the platform's calls for the bot's account reach the adapter's
	// adapter.BotReceiver with feed as its Inboxes (an event subscription pointed at a local
	// route); nil: the adapter polls (adapter.Poller), and the suite runs its Poll.
	Listen func(t *testing.T, bot adapter.Bot, feed *Feed)
}

// BotChat is one conversation of a bot's account.
type BotChat struct {
	// Kind is the kind the adapter gives it (direct or group).
	Kind adapter.ConversationKind
	// Author is the platform id of the person who writes in it.
	Author string
	// Post writes text as the person, addressing the bot by the platform's mention when mention
	// is true (the adapter passes the text without it), and returns the platform's message id.
	Post func(t *testing.T, text string, mention bool) string
	// PostAsBot writes text as another bot account; nil: no other bot can write here.
	PostAsBot func(t *testing.T, text string)
	// Messages returns what the conversation shows of the bot, oldest first.
	Messages func(t *testing.T) []Seen
}

// RunBots runs the bot cases every adapter that takes bots passes (edge-api §4.1): a stranger's
// message opens the conversation's channel and the answer reaches that conversation; a group
// message passes only with a mention, which is removed; bots' messages, the bot's own included,
// never pass; a channel PUT for the conversation wins; the bot's own answer (a pairing code)
// reaches the person.
func RunBots(t *testing.T, s Setup, bot func(t *testing.T) BotSetup) {
	if _, ok := s.Adapter.(adapter.BotTaker); !ok {
		t.Fatalf("adapter %s takes no bots (adapter.BotTaker)", s.Adapter.Name())
	}
	t.Run("a stranger's message opens its conversation, the answer reaches it", func(t *testing.T) { botStranger(t, s, bot(t)) })
	t.Run("a group passes a message only with a mention, removed", func(t *testing.T) { botMention(t, s, bot(t)) })
	t.Run("bots' messages never pass", func(t *testing.T) { botLoops(t, s, bot(t)) })
	t.Run("a channel PUT for the conversation wins", func(t *testing.T) { botPutWins(t, s, bot(t)) })
	t.Run("the bot's own answer reaches the person", func(t *testing.T) { botAnswers(t, s, bot(t)) })
}

// startBot runs the adapter's inbound for b with feed: the setup's Listen, or Poll.
func startBot(t *testing.T, s Setup, bs BotSetup, b adapter.Bot, feed *Feed) {
	t.Helper()
	feed.AddBot(b)
	if bs.Listen != nil {
		bs.Listen(t, b, feed)
		return
	}
	poller, ok := s.Adapter.(adapter.Poller)
	if !ok {
		t.Fatal("the adapter neither polls nor has a Listen in its BotSetup")
	}
	startPoll(t, poller, feed)
}

func newBot(t *testing.T, s Setup, bs BotSetup, policy string) adapter.Bot {
	t.Helper()
	p, err := adapter.ParsePolicy(json.RawMessage(policy))
	if err != nil {
		t.Fatal(err)
	}
	return adapter.Bot{ID: fmt.Sprintf("suitebot%d", channels.Add(1)),
		Connection: adapter.Connection{TargetType: "im", Profiles: []string{"xagent.im.v2"}},
		Target:     adapter.Binding{Adapter: s.Adapter.Name(), Config: bs.Config}, Conversations: p, OpenedAt: time.Now().UnixMilli()}
}

// admitted waits for the feed's one admitted conversation of kind whose channel received want,
// and returns the conversation's latest arrival (that of want, when nothing came after it).
func admitted(t *testing.T, feed *Feed, b adapter.Bot, kind adapter.ConversationKind, want string) adapter.Arrival {
	t.Helper()
	var got adapter.Arrival
	eventually(t, "the message in its conversation's channel: "+want, func() bool {
		arrivals := feed.Arrivals()
		for i := len(arrivals) - 1; i >= 0; i-- { // the latest first
			a := arrivals[i]
			if a.Conversation.Kind != kind || b.Conversations.Decide(a).Refused != "" {
				continue // another kind, or refused (a group's unaddressed message before it)
			}
			if in := feed.InboxOf(a.Conversation.ChannelID(b.ID)); in != nil {
				for _, m := range in.Messages() {
					if m.Text == want {
						got = a
						return true
					}
				}
			}
		}
		return false
	})
	return got
}

func botStranger(t *testing.T, s Setup, bs BotSetup) {
	b := newBot(t, s, bs, `{"direct": "open"}`)
	feed := NewFeed(s.Files)
	startBot(t, s, bs, b, feed)
	chat := bs.Direct(t)
	chat.Post(t, "hello, is anyone there?", false)
	a := admitted(t, feed, b, adapter.Direct, "hello, is anyone there?")
	if a.Author.ID != chat.Author || a.Author.IsBot {
		t.Fatalf("arrival %+v, want author %s", a, chat.Author)
	}
	// The agent's answer goes to a target bound to that conversation, as the node binds it.
	answer(t, s, b, a.Conversation, "yes: the agent", false)
	eventually(t, "the answer in the person's conversation", func() bool {
		return slices.ContainsFunc(chat.Messages(t), func(m Seen) bool { return m.Text == "yes: the agent" })
	})
}

// answer sends a final to a conversation of b through a target bound as the node binds it.
func answer(t *testing.T, s Setup, b adapter.Bot, c adapter.Conversation, text string, system bool) {
	t.Helper()
	cfg, err := s.Adapter.(adapter.BotTaker).Bind(b.Target.Config, c)
	if err != nil {
		t.Fatalf("Bind: %v", err)
	}
	tg, err := s.Adapter.Open(cfg)
	if err != nil {
		t.Fatalf("Open the conversation's binding: %v", err)
	}
	if _, err := tg.Send(ctx10(t), adapter.Message{Text: text, Final: true, System: system, IdempotencyKey: c.ChannelID(b.ID) + ":" + text}); err != nil {
		t.Fatalf("Send: %v", err)
	}
}

func botMention(t *testing.T, s Setup, bs BotSetup) {
	if bs.Group == nil {
		t.Skip("no group conversation on this platform's setup")
	}
	b := newBot(t, s, bs, `{"groups": "mention"}`)
	feed := NewFeed(s.Files)
	startBot(t, s, bs, b, feed)
	chat := bs.Group(t)
	chat.Post(t, "chatter nobody addressed to the bot", false)
	chat.Post(t, "what is the weather?", true)
	a := admitted(t, feed, b, adapter.Group, "what is the weather?")
	if !a.Mentioned {
		t.Fatalf("arrival %+v: not marked mentioned", a)
	}
	// The unaddressed message may be taken after the mentioned one (a platform calling a route
	// delivers its events concurrently).
	eventually(t, "the unaddressed message refused not_mentioned once", func() bool { return feed.Refused(adapter.RefusedNotMentioned) == 1 })
}

func botLoops(t *testing.T, s Setup, bs BotSetup) {
	b := newBot(t, s, bs, `{"direct": "open", "groups": "all"}`)
	feed := NewFeed(s.Files)
	startBot(t, s, bs, b, feed)
	chat := bs.Direct(t)
	chat.Post(t, "first", false)
	a := admitted(t, feed, b, adapter.Direct, "first")
	answer(t, s, b, a.Conversation, "the bot's own words", false)
	if bs.Group != nil {
		if g := bs.Group(t); g.PostAsBot != nil {
			g.PostAsBot(t, "another bot's words")
			eventually(t, "the other bot's message refused from_bot", func() bool { return feed.Refused(adapter.RefusedFromBot) >= 1 })
		}
	}
	chat.Post(t, "marker", false) // read after the bot's own message
	admitted(t, feed, b, adapter.Direct, "marker")
	for _, m := range feed.InboxOf(a.Conversation.ChannelID(b.ID)).Messages() {
		if m.Text == "the bot's own words" {
			t.Fatal("the bot's own message was passed on")
		}
	}
	for _, arr := range feed.Arrivals() {
		if !arr.Author.IsBot && arr.Author.ID != chat.Author && arr.Conversation.Kind == adapter.Direct {
			t.Fatalf("an arrival from %q in the direct conversation", arr.Author.ID)
		}
	}
}

func botPutWins(t *testing.T, s Setup, bs BotSetup) {
	b := newBot(t, s, bs, `{"direct": "open"}`)
	// Learn the conversation's id from a first message, then bind it with a channel PUT.
	probe := NewFeed(s.Files)
	stop := func() {}
	chat := bs.Direct(t)
	if bs.Listen == nil {
		probe.AddBot(b)
		stop = startPoll(t, s.Adapter.(adapter.Poller), probe)
	} else {
		bs.Listen(t, b, probe)
		probe.AddBot(b)
	}
	chat.Post(t, "before the PUT", false)
	a := admitted(t, probe, b, adapter.Direct, "before the PUT")
	stop()
	cfg, err := s.Adapter.(adapter.BotTaker).Bind(b.Target.Config, a.Conversation)
	if err != nil {
		t.Fatal(err)
	}
	put := adapter.Channel{ID: fmt.Sprintf("suite_put_%d", channels.Add(1)), Connection: b.Connection,
		Target: adapter.Binding{Adapter: s.Adapter.Name(), Config: cfg}, OpenedAt: time.Now().UnixMilli()}
	feed := NewFeed(s.Files, put)
	if bs.Listen != nil {
		bs.Listen(t, b, feed)
		feed.AddBot(b)
	} else {
		feed.AddBot(b)
		cursor, _ := probe.Cursor(ctx10(t))
		feed.SetCursor(cursor)
		startPoll(t, s.Adapter.(adapter.Poller), feed)
	}
	chat.Post(t, "after the PUT", false)
	eventually(t, "the message in the PUT channel", func() bool {
		return slices.ContainsFunc(feed.InboxOf(put.ID).Messages(), func(m profile.Message) bool { return m.Text == "after the PUT" })
	})
	if len(feed.Arrivals()) != 0 {
		t.Fatalf("the bot admitted %+v, though a channel PUT binds the conversation", feed.Arrivals())
	}
}

func botAnswers(t *testing.T, s Setup, bs BotSetup) {
	b := newBot(t, s, bs, `{"direct": "pairing"}`)
	feed := NewFeed(s.Files)
	startBot(t, s, bs, b, feed)
	chat := bs.Direct(t)
	chat.Post(t, "let me in", false)
	eventually(t, "refused pairing_pending", func() bool { return feed.Refused(adapter.RefusedPairingPending) == 1 })
	a := feed.Arrivals()[0]
	answer(t, s, b, a.Conversation, "Your pairing code is ABCD2345", true)
	eventually(t, "the bot's answer in the person's conversation", func() bool {
		return slices.ContainsFunc(chat.Messages(t), func(m Seen) bool { return strings.Contains(m.Text, "ABCD2345") })
	})
}
