package slack_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/slack"
	"github.com/ximd/ximd/handlers/adapter/slack/slacktest"
	"github.com/ximd/ximd/profile"
)

// botWorld is a workspace with the bot's app on Socket Mode and an adapter polling for one bot.
type botWorld struct {
	fake  *slacktest.Server
	bot   slacktest.Bot
	files *adaptertest.Files
	b     adapter.Bot
	feed  *adaptertest.Feed
	stop  func()
}

func newBotWorld(t *testing.T, policy string) *botWorld {
	t.Helper()
	fake := slacktest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	fake.SetSocketMode(true)
	w := &botWorld{fake: fake, bot: fake.AddBot("ximd"), files: adaptertest.NewFiles()}
	cfg, _ := json.Marshal(map[string]any{"bot_token": w.bot.Token, "app_token": w.bot.AppToken, "api_url": fake.URL()})
	p, err := adapter.ParsePolicy(json.RawMessage(policy))
	if err != nil {
		t.Fatal(err)
	}
	w.b = adapter.Bot{ID: "sb", Connection: adapter.Connection{TargetType: "im", Profiles: []string{"xagent.im.v2"}},
		Target: adapter.Binding{Adapter: slack.Name, Config: cfg}, Conversations: p, OpenedAt: time.Now().UnixMilli()}
	w.start(t)
	return w
}

// start runs a new adapter's Poll for the bot with a new feed (a restart: nothing remembered),
// after the one running stopped.
func (w *botWorld) start(t *testing.T) {
	t.Helper()
	if w.stop != nil {
		w.stop()
		eventually(t, "the old socket closed", func() bool { return w.fake.Connections(w.bot.AppToken) == 0 })
	}
	w.feed = adaptertest.NewFeed(w.files)
	w.feed.AddBot(w.b)
	a := slack.New(slack.Options{Common: adapter.Common{Files: w.files}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Poll(ctx, w.feed) }()
	w.stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(w.stop)
	eventually(t, "the app's socket", func() bool { return w.fake.Connections(w.bot.AppToken) == 1 })
}

// texts are the user messages of the bot's channel of conversation c.
func (w *botWorld) texts(c adapter.Conversation) []string {
	in := w.feed.InboxOf(c.ChannelID(w.b.ID))
	if in == nil {
		return nil
	}
	var out []string
	for _, m := range in.Messages() {
		out = append(out, m.Text)
	}
	return out
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// edge-api §7.2.4 Bot: under scope "thread" a reply is a thread conversation keyed
// "<channel>_<thread_ts with . as _>"; a thread the bot answered in passes its replies without a
// mention, also after a restart (the bot's message is found in the thread); one it did not
// answer in needs a mention.
func TestSlackBot_ThreadTheBotAnsweredInPassesWithoutMention(t *testing.T) {
	w := newBotWorld(t, `{"groups": "mention", "scope": "thread"}`)
	ann := w.fake.AddUser("Ann")
	ch := w.fake.AddChannel("channel", "help", ann)
	top, _ := w.fake.Post(ch, ann, "a question for everyone", "")
	w.fake.Post(ch, ann, "<@"+w.bot.UserID+"> can you look?", top)
	thread := adapter.Conversation{Kind: adapter.Thread, ID: ch, Thread: top}
	eventually(t, "the mention in the thread's channel", func() bool { return slices.Contains(w.texts(thread), "can you look?") })
	if want := ch + "_" + strings.ReplaceAll(top, ".", "_"); thread.Key() != want {
		t.Fatalf("key %s, want %s", thread.Key(), want)
	}
	eventually(t, "the top-level message without a mention refused not_mentioned", func() bool {
		return w.feed.Refused(adapter.RefusedNotMentioned) == 1
	})
	// The bot answers in the thread (as the node binds its channel).
	cfg, err := slack.New(slack.Options{}).Bind(w.b.Target.Config, thread)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := slack.New(slack.Options{}).Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Send(context.Background(), adapter.Message{Text: "looking", Final: true, IdempotencyKey: "sb:looking"}); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(w.fake.Messages(ch), func(m slacktest.Message) bool { return m.Text == "looking" && m.ThreadTS == top }) {
		t.Fatalf("the answer is not in the thread: %+v", w.fake.Messages(ch))
	}
	w.fake.Post(ch, ann, "thanks, and one more thing", top)
	eventually(t, "the reply without a mention", func() bool { return slices.Contains(w.texts(thread), "thanks, and one more thing") })

	// After a restart, the thread still passes; another thread without the bot does not.
	w.start(t)
	w.fake.Post(ch, ann, "still there?", top)
	other, _ := w.fake.Post(ch, ann, "another topic", "")
	w.fake.Post(ch, ann, "chatter in it", other)
	eventually(t, "the reply after the restart", func() bool { return slices.Contains(w.texts(thread), "still there?") })
	eventually(t, "the other thread's chatter refused", func() bool { return w.feed.Refused(adapter.RefusedNotMentioned) == 2 })
	if got := w.texts(adapter.Conversation{Kind: adapter.Thread, ID: ch, Thread: other}); got != nil {
		t.Fatalf("a thread the bot is not in passed %v", got)
	}
}

// edge-api §7.2.4 Bot: Slack sends a channel message that mentions the bot twice (a message event
// and an app_mention with the same ts): it is one arrival and one user message, the mention
// removed.
func TestSlackBot_MentionDeliveredTwiceIsOneMessage(t *testing.T) {
	w := newBotWorld(t, `{"groups": "mention"}`)
	ann := w.fake.AddUser("Ann")
	ch := w.fake.AddChannel("channel", "general", ann)
	ts, _ := w.fake.Post(ch, ann, "hey <@"+w.bot.UserID+"> what time is it?", "")
	group := adapter.Conversation{Kind: adapter.Group, ID: ch}
	eventually(t, "the message", func() bool { return len(w.texts(group)) == 1 })
	w.fake.Post(ch, ann, "<@"+w.bot.UserID+"> another", "")
	eventually(t, "every event taken", func() bool { return w.fake.Unacknowledged(w.bot) == 0 })
	if got := w.texts(group); len(got) != 2 || !slices.Contains(got, "hey what time is it?") {
		t.Fatalf("texts %q", got)
	}
	in := w.feed.InboxOf(group.ChannelID(w.b.ID))
	if m := in.Messages()[0]; m.MessageID != slack.MessageIDOf(ch, ts) {
		t.Fatalf("message_id %s", m.MessageID)
	}
	if n := len(w.feed.Arrivals()); n != 2 {
		t.Fatalf("%d arrivals for two messages, each delivered twice: %+v", n, w.feed.Arrivals())
	}
}

// edge-api §7.2.4 Bot: kinds (im direct; public and private channels and mpims group), titles
// (the channel's name; a direct one's the person's), the author's name; a bot_message of an
// integration is from a bot.
func TestSlackBot_KindsTitlesAndAuthors(t *testing.T) {
	w := newBotWorld(t, `{"direct": "open", "groups": "all"}`)
	ann := w.fake.AddUser("Ann Lee")
	cases := []struct {
		kind  string
		want  adapter.ConversationKind
		title string
	}{
		{"im", adapter.Direct, "Ann Lee"},
		{"channel", adapter.Group, "general"},
		{"group", adapter.Group, "secret-plans"},
		{"mpim", adapter.Group, "mpdm-ann--bob-1"},
	}
	for _, c := range cases {
		name := c.title
		if c.kind == "im" {
			name = ""
		}
		ch := w.fake.AddChannel(c.kind, name, ann)
		w.fake.Post(ch, ann, "hello "+c.kind, "")
		conv := adapter.Conversation{Kind: c.want, ID: ch}
		eventually(t, "the "+c.kind+" message", func() bool { return slices.Contains(w.texts(conv), "hello "+c.kind) })
		i := slices.IndexFunc(w.feed.Arrivals(), func(a adapter.Arrival) bool { return a.Conversation.ID == ch })
		a := w.feed.Arrivals()[i]
		if a.Conversation.Kind != c.want || a.Conversation.Title != c.title || a.Author.ID != ann.ID || a.Author.DisplayName != "Ann Lee" || a.Author.IsBot {
			t.Errorf("%s: arrival %+v", c.kind, a)
		}
	}
	other := w.fake.AddBot("another app")
	ch := w.fake.AddChannel("channel", "bots", ann)
	w.fake.PostAsBot(ch, other, "beep", "")
	eventually(t, "the other bot's message refused from_bot", func() bool { return w.feed.Refused(adapter.RefusedFromBot) == 1 })
	if got := w.texts(adapter.Conversation{Kind: adapter.Group, ID: ch}); got != nil {
		t.Fatalf("another bot's message passed: %v", got)
	}
}

// A bot's config names no conversation; Bind names one (a thread's with its ts), and a bot whose
// token Slack refuses is refused at PUT (auth.test).
func TestSlackBot_BindAndProbe(t *testing.T) {
	fake := slacktest.New()
	t.Cleanup(fake.Close)
	bot := fake.AddBot("ximd")
	a := slack.New(slack.Options{})
	if keys := a.ConversationKeys(); !slices.Equal(keys, []string{"channel_id", "thread_ts"}) {
		t.Fatalf("ConversationKeys %v", keys)
	}
	cfg, _ := json.Marshal(map[string]any{"bot_token": bot.Token, "app_token": bot.AppToken, "api_url": fake.URL()})
	bound, err := a.Bind(cfg, adapter.Conversation{Kind: adapter.Thread, ID: "C1", Thread: "1700000000.000100"})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	_ = json.Unmarshal(bound, &got)
	if got["channel_id"] != "C1" || got["thread_ts"] != "1700000000.000100" || got["bot_token"] != bot.Token {
		t.Fatalf("bound %v", got)
	}
	if _, err := a.Open(bound); err != nil {
		t.Fatalf("Open the bound config: %v", err)
	}
	placeholder, err := a.Bind(cfg, adapter.Conversation{})
	if err != nil {
		t.Fatal(err)
	}
	if key := a.PollKey(adapter.Channel{Target: adapter.Binding{Adapter: slack.Name, Config: placeholder}}); key == "" {
		t.Fatal("a Socket Mode bot has no poll key")
	}
	b := adapter.Bot{ID: "sb", Target: adapter.Binding{Adapter: slack.Name, Config: cfg}}
	if err := a.ProbeBot(context.Background(), b); err != nil {
		t.Fatalf("ProbeBot: %v", err)
	}
	bad, _ := json.Marshal(map[string]any{"bot_token": "xoxb-wrong", "api_url": fake.URL()})
	err = a.ProbeBot(context.Background(), adapter.Bot{ID: "sb", Target: adapter.Binding{Adapter: slack.Name, Config: bad}})
	if pe := profile.AsError(err); err == nil || pe.Code != profile.CodeTargetConfigInvalid || strings.Contains(pe.Message, "xoxb-wrong") {
		t.Fatalf("ProbeBot with a bad token: %v", err)
	}
}

// A bot's answer in a thread of a channel streams natively: chat.startStream there needs the
// recipient ("Required when streaming to channels"), the person who started the thread.
func TestSlackBot_AnswerStreamsInAChannelThread(t *testing.T) {
	fake := slacktest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	bot := fake.AddBot("ximd")
	ann := fake.AddUser("Ann")
	ch := fake.AddChannel("channel", "help", ann)
	top, _ := fake.Post(ch, ann, "<@"+bot.UserID+"> help me", "")
	cfg, _ := json.Marshal(map[string]any{"bot_token": bot.Token, "api_url": fake.URL()})
	a := slack.New(slack.Options{})
	bound, err := a.Bind(cfg, adapter.Conversation{Kind: adapter.Thread, ID: ch, Thread: top})
	if err != nil {
		t.Fatal(err)
	}
	tg, err := a.Open(bound)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ts, err := tg.Send(ctx, adapter.Message{Text: "Let me see", IdempotencyKey: "sb:s1"})
	if err != nil {
		t.Fatalf("the first streamed part: %v", err)
	}
	if err := tg.(adapter.Editor).Edit(ctx, ts, adapter.Message{Text: "Let me see: done.", Final: true, IdempotencyKey: "sb:s1"}); err != nil {
		t.Fatalf("the final: %v", err)
	}
	msgs := fake.Messages(ch)
	last := msgs[len(msgs)-1]
	if last.TS != ts || last.ThreadTS != top || last.Text != "Let me see: done." || last.Streaming || last.Edits != 0 {
		t.Fatalf("the answer %+v, want a stopped stream in the thread", last)
	}
	if !slices.ContainsFunc(fake.Calls(), func(c slacktest.Call) bool { return c.Method == "chat.startStream" && c.Status == 200 && c.Error == "" }) {
		t.Fatalf("no stream started: %+v", fake.Calls())
	}
}
