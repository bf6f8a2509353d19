package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/telegram"
	"github.com/ximd/ximd/handlers/adapter/telegram/telegramtest"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

// putTelegramBot PUTs a bot of w's token with the conversations policy and extra config.
func (w *telegramWorld) putTelegramBot(id string, conversations, extra map[string]any) (int, []byte) {
	w.t.Helper()
	cfg := map[string]any{"token": w.bot.Token, "api_url": w.fake.URL()}
	for k, v := range extra {
		cfg[k] = v
	}
	body := map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "telegram", "config": cfg},
	}
	if conversations != nil {
		body["conversations"] = conversations
	}
	status, b, err := w.node.Do(http.MethodPut, "/v1/bots/"+id, body)
	if err != nil {
		w.t.Fatal(err)
	}
	if bytes.Contains(b, []byte(w.bot.Token)) {
		w.t.Fatalf("the bot's representation shows the token: %s", b)
	}
	return status, b
}

// mustPutBot is putTelegramBot answered 200.
func (w *telegramWorld) mustPutBot(id string, conversations, extra map[string]any) {
	w.t.Helper()
	if status, b := w.putTelegramBot(id, conversations, extra); status != http.StatusOK {
		w.t.Fatalf("PUT bot %s: %d %s", id, status, b)
	}
}

// botMessages is what w's bot shows in chat (other bots' messages left out).
func (w *telegramWorld) botMessages(chat int64) []telegramtest.Message {
	var out []telegramtest.Message
	for _, m := range w.fake.Messages(chat) {
		if m.From == w.bot.ID {
			out = append(out, m)
		}
	}
	return out
}

// opened waits for the next channel.opened and returns its channel and conversation.
func opened(t *testing.T, a *testkit.Agent) (string, struct{ Kind, Title string }) {
	t.Helper()
	env := nextOf(t, a, profile.TypeChannelOpened)
	var p struct {
		Conversation struct{ Kind, Title string } `json:"conversation"`
	}
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		t.Fatal(err)
	}
	return env.ChannelID, p.Conversation
}

// nextUser waits for the next chat.message to xAgent, acks it, and returns its channel and text.
func nextUser(t *testing.T, a *testkit.Agent) (string, profile.Message) {
	t.Helper()
	env, m := userMessage(t, a, wait)
	ackUser(t, a, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})
	return env.ChannelID, m
}

// refusedOf polls the bot's stats until refused[reason] is want.
func (w *telegramWorld) refusedOf(bot, reason string, want int) {
	w.t.Helper()
	poll(w.t, fmt.Sprintf("%s refused %s %d times", bot, reason, want), func() bool {
		_, b, _ := w.node.Do(http.MethodGet, "/v1/bots/"+bot, nil)
		return strings.Contains(string(b), fmt.Sprintf(`"%s":%d`, reason, want))
	})
}

// edge-api §4.1, §7.2.2: a person nobody bound writes to the bot in a private chat -> the channel
// <bot>-<user id> opens, xAgent gets channel.opened and then the chat.message on it, and the
// agent's streamed answer reaches that chat (draft previews, then one message). A config naming
// a chat, or a token Telegram refuses, is refused at PUT.
func TestTelegramBots_StrangerOpensChannelAndAgentAnswersThere(t *testing.T) {
	w := newTelegramWorld(t, fastAcks)
	if status, b := w.putTelegramBot("tgbad", nil, map[string]any{"chat_id": 42}); status != http.StatusBadRequest || !strings.Contains(string(b), "chat_id") {
		t.Fatalf("a bot config with chat_id: %d %s", status, b)
	}
	if status, b, _ := w.node.Do(http.MethodPut, "/v1/bots/tgbad", map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "telegram", "config": map[string]any{"token": "8001:wrong", "api_url": w.fake.URL()}},
	}); status != http.StatusUnprocessableEntity || !strings.Contains(string(b), "target_config_invalid") || bytes.Contains(b, []byte("8001:")) {
		t.Fatalf("a bot with a bad token: %d %s", status, b)
	}
	w.mustPutBot("tg1", map[string]any{"direct": "open"}, nil)

	alice := w.fake.AddUser("Alice")
	chat := w.fake.AddChat("private", "", alice.ID)
	sent := w.fake.Post(chat, alice, "hello bot")
	want := "tg1-" + strconv.FormatInt(chat, 10)
	ch, conv := opened(t, w.agent)
	if ch != want || conv.Kind != "direct" || conv.Title != "Alice" {
		t.Fatalf("channel.opened on %s %+v, want %s direct Alice", ch, conv, want)
	}
	ch, m := nextUser(t, w.agent)
	if ch != want || m.Text != "hello bot" || m.MessageID != telegram.MessageIDOf(chat, sent) {
		t.Fatalf("chat.message on %s: %+v", ch, m)
	}

	// The agent's streamed answer: draft previews in the private chat, then one message.
	words := strings.Fields("Hello Alice, nice to meet you here today")
	for i, word := range words {
		w.sendTo(want, profile.TypeDelta, delta("a1", i+1, word+" "))
	}
	poll(t, "a draft preview in alice's chat", func() bool { return len(w.fake.Drafts(chat)) > 0 })
	final := strings.Join(words, " ")
	if a := w.ackOf(w.sendTo(want, profile.TypeMessage, msg("a1", final))); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	if shown := w.botMessages(chat); len(shown) != 1 || shown[0].Text != final {
		t.Fatalf("alice's chat shows %+v", shown)
	}

	_, b, _ := w.node.Do(http.MethodGet, "/v1/channels/"+want, nil)
	rep := jsonOf(t, b)
	if rep["bot"] != "tg1" || rep["conversation"].(map[string]any)["id"] != strconv.FormatInt(chat, 10) || bytes.Contains(b, []byte(w.bot.Token)) {
		t.Fatalf("channel representation: %s", b)
	}

	// Her next message comes on the same channel, without another channel.opened.
	w.fake.Post(chat, alice, "thanks")
	env, m2 := userMessage(t, w.agent, wait)
	if env.ChannelID != want || m2.Text != "thanks" {
		t.Fatalf("second message %s %+v", env.ChannelID, m2)
	}
	ackUser(t, w.agent, env, map[string]any{"message_id": m2.MessageID, "status": "accepted"})
}

// edge-api §4.1 groups "mention" (§7.2.2 mentions): chatter is not passed; an @mention, a
// /command@botname and a reply to the bot's message are, with the mention removed; another bot's
// message never is, even addressed to the bot.
func TestTelegramBots_GroupMentionsAndOtherBots(t *testing.T) {
	w := newTelegramWorld(t, fastAcks)
	w.fake.SetLimits(telegramtest.Limits{PerChatPerSecond: 1000, GroupPerMinute: 100000, EditsPerMinute: 100000, EphemeralPerSecond: 1000})
	other := w.fake.AddBot("8002:other-secret", "other_bot")
	w.fake.SetBotToBot(other.ID, true) // its messages addressed to ximd_bot reach it
	w.mustPutBot("tg2", nil, nil)      // groups: mention (default)
	bob := w.fake.AddUser("Bob")
	group := w.fake.AddChat("supergroup", "Team", bob.ID)
	want := "tg2-" + strconv.FormatInt(group, 10) // "-100…" kept as is

	w.fake.Post(group, bob, "chatter nobody addressed to the bot")
	w.fake.PostAsBot(group, other, "/help@ximd_bot from another bot")
	w.fake.Post(group, bob, "@ximd_bot what is the weather?")
	ch, conv := opened(t, w.agent)
	if ch != want || conv.Kind != "group" || conv.Title != "Team" {
		t.Fatalf("channel.opened on %s %+v, want %s group Team", ch, conv, want)
	}
	if ch, m := nextUser(t, w.agent); ch != want || m.Text != "what is the weather?" {
		t.Fatalf("first passed on %s: %q (chatter and the other bot's message come before it)", ch, m.Text)
	}
	w.refusedOf("tg2", "not_mentioned", 1)
	w.refusedOf("tg2", "from_bot", 1)

	// The agent answers in the group (streaming "edit" there); a reply to that answer addresses
	// the bot, and so does a command to it.
	if a := w.ackOf(w.sendTo(want, profile.TypeMessage, msg("g1", "Sunny."))); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	shown := w.botMessages(group)
	if len(shown) != 1 || shown[0].Text != "Sunny." {
		t.Fatalf("the group shows %+v", shown)
	}
	w.fake.PostReply(group, bob, "and tomorrow?", shown[0].ID)
	if ch, m := nextUser(t, w.agent); ch != want || m.Text != "and tomorrow?" {
		t.Fatalf("reply passed on %s: %q", ch, m.Text)
	}
	w.fake.Post(group, bob, "/forecast@ximd_bot Paris")
	if ch, m := nextUser(t, w.agent); ch != want || m.Text != "/forecast Paris" {
		t.Fatalf("command passed on %s: %q", ch, m.Text)
	}
	w.fake.PostAsBot(group, other, "/forecast@ximd_bot loop")
	w.fake.PostReply(group, bob, "marker", shown[0].ID) // read after the other bot's message
	if _, m := nextUser(t, w.agent); m.Text != "marker" {
		t.Fatalf("passed on: %q, want only the marker after the other bot's message", m.Text)
	}
	w.refusedOf("tg2", "from_bot", 2)
}

// edge-api §4.1 pairing: a stranger gets one answer from the bot with a code, however often
// they write, and nothing reaches xAgent; POST /v1/bots/{id}/pairings/{code} approves them;
// their next message opens the channel.
func TestTelegramBots_PairingCodeThenApproval(t *testing.T) {
	w := newTelegramWorld(t, fastAcks)
	w.mustPutBot("tg3", nil, nil) // direct: pairing (default)
	carol := w.fake.AddUser("Carol")
	chat := w.fake.AddChat("private", "", carol.ID)
	w.fake.Post(chat, carol, "/start")
	w.fake.Post(chat, carol, "let me in")
	w.refusedOf("tg3", "pairing_pending", 2)
	answers := w.botMessages(chat)
	if len(answers) != 1 {
		t.Fatalf("the bot answered %d times: %+v", len(answers), answers)
	}
	_, b, _ := w.node.Do(http.MethodGet, "/v1/bots/tg3/pairings", nil)
	var list struct {
		Pairings []struct{ Code, User, DisplayName string } `json:"pairings"`
	}
	if err := json.Unmarshal(b, &list); err != nil || len(list.Pairings) != 1 {
		t.Fatalf("pairings %s (%v)", b, err)
	}
	p := list.Pairings[0]
	if p.User != strconv.FormatInt(carol.ID, 10) || !strings.Contains(answers[0].Text, p.Code) {
		t.Fatalf("pairing %+v; the answer %q", p, answers[0].Text)
	}
	w.quiet(300 * time.Millisecond) // nothing reached xAgent
	if status, b, _ := w.node.Do(http.MethodPost, "/v1/bots/tg3/pairings/"+p.Code, nil); status != http.StatusNoContent {
		t.Fatalf("approve: %d %s", status, b)
	}
	w.fake.Post(chat, carol, "thanks")
	want := "tg3-" + strconv.FormatInt(chat, 10)
	if ch, _ := opened(t, w.agent); ch != want {
		t.Fatalf("channel.opened on %s, want %s", ch, want)
	}
	if ch, m := nextUser(t, w.agent); ch != want || m.Text != "thanks" {
		t.Fatalf("after approval: %s %q", ch, m.Text)
	}
}

// edge-api §4.1 scope "thread", §7.2.2: a forum topic is a conversation of its own, key
// <chat id>_<message_thread_id>, and the agent's answer and typing go to that topic; the forum's
// General topic is the group's own conversation.
func TestTelegramBots_ForumTopicIsAThread(t *testing.T) {
	w := newTelegramWorld(t, fastAcks)
	w.mustPutBot("tg4", map[string]any{"groups": "all", "scope": "thread"}, nil)
	dan := w.fake.AddUser("Dan")
	forum := w.fake.AddForum("Team", dan.ID)
	topic := w.fake.AddTopic(forum, dan, "Support")
	w.fake.PostInTopic(forum, topic, dan, "how do I reset it?")
	want := fmt.Sprintf("tg4-%d_%d", forum, topic)
	ch, conv := opened(t, w.agent)
	if ch != want || conv.Kind != "thread" || conv.Title != "Team / Support" {
		t.Fatalf("channel.opened on %s %+v, want %s thread", ch, conv, want)
	}
	if ch, m := nextUser(t, w.agent); ch != want || m.Text != "how do I reset it?" {
		t.Fatalf("topic message on %s: %q", ch, m.Text)
	}
	w.sendTo(want, profile.TypeActivity, map[string]any{"status": "thinking"})
	poll(t, "typing in the topic", func() bool { return len(w.fake.Actions(forum)) > 0 })
	if a := w.ackOf(w.sendTo(want, profile.TypeMessage, msg("t1", "Hold the button."))); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	if shown := w.botMessages(forum); len(shown) != 1 || shown[0].Thread != topic || shown[0].Text != "Hold the button." {
		t.Fatalf("the forum shows %+v, want the answer in topic %d", shown, topic)
	}
	if a := w.fake.Actions(forum); a[0].Thread != topic {
		t.Fatalf("typing shown in thread %d", a[0].Thread)
	}

	w.fake.Post(forum, dan, "in General")
	general := "tg4-" + strconv.FormatInt(forum, 10)
	if ch, conv := opened(t, w.agent); ch != general || conv.Kind != "group" {
		t.Fatalf("General: channel.opened on %s %+v", ch, conv)
	}
	if ch, m := nextUser(t, w.agent); ch != general || m.Text != "in General" {
		t.Fatalf("General message on %s: %q", ch, m.Text)
	}
}

// edge-api §4.1: a channel PUT for a chat (or one forum topic) of the bot's token wins: its
// messages go to that channel, and the bot opens none for it; the token's other chats (and the
// forum's other topics) still reach the bot. One getUpdates loop serves both.
func TestTelegramBots_ChannelPutWins(t *testing.T) {
	w := newTelegramWorld(t, fastAcks)
	erin, fay := w.fake.AddUser("Erin"), w.fake.AddUser("Fay")
	bound, free := w.fake.AddChat("private", "", erin.ID), w.fake.AddChat("private", "", fay.ID)
	w.bind("tg-erin", bound, nil)
	forum := w.fake.AddForum("Team", erin.ID)
	topic := w.fake.AddTopic(forum, erin, "Ops")
	w.bind("tg-ops", forum, map[string]any{"message_thread_id": topic}) // one topic of the forum
	w.mustPutBot("tg6", map[string]any{"direct": "open", "groups": "all"}, nil)
	w.fake.PostInTopic(forum, topic, erin, "to the bound topic")
	if ch, m := nextUser(t, w.agent); ch != "tg-ops" || m.Text != "to the bound topic" {
		t.Fatalf("on %s: %q", ch, m.Text)
	}
	w.fake.Post(forum, erin, "in General")
	if ch, _ := opened(t, w.agent); ch != "tg6-"+strconv.FormatInt(forum, 10) {
		t.Fatalf("General: channel.opened on %s", ch)
	}
	if _, m := nextUser(t, w.agent); m.Text != "in General" {
		t.Fatalf("%q", m.Text)
	}
	w.fake.Post(bound, erin, "to the bound channel")
	if ch, m := nextUser(t, w.agent); ch != "tg-erin" || m.Text != "to the bound channel" {
		t.Fatalf("on %s: %q", ch, m.Text)
	}
	w.fake.Post(free, fay, "to the bot")
	if ch, _ := opened(t, w.agent); ch != "tg6-"+strconv.FormatInt(free, 10) {
		t.Fatalf("channel.opened on %s", ch)
	}
	if _, m := nextUser(t, w.agent); m.Text != "to the bot" {
		t.Fatalf("%q", m.Text)
	}
	if status, _, _ := w.node.Do(http.MethodGet, "/v1/channels/tg6-"+strconv.FormatInt(bound, 10), nil); status != http.StatusNotFound {
		t.Fatalf("the bot opened a channel for the bound chat: %d", status)
	}
}

// edge-api §7.2.2 webhook inbound for a bot: the PUT sets the bot's webhook to
// /v1/targets/telegram/bots/{bot_id}/updates with its secret; Telegram's calls open the
// conversation's channel; a call without the secret, or for no bot, is 401 alike.
func TestTelegramBots_WebhookInbound(t *testing.T) {
	addr := freeAddr(t)
	w := newTelegramWorld(t, func(c *node.Config) { fastAcks(c); c.HTTPAddr, c.PublicURL = addr, "http://"+addr })
	secret := "bot-hook-secret-" + strings.Repeat("y", 16)
	w.mustPutBot("tg5", map[string]any{"direct": "open"}, map[string]any{"inbound": "webhook", "webhook_secret": secret})
	gus := w.fake.AddUser("Gus")
	chat := w.fake.AddChat("private", "", gus.ID)
	w.fake.Post(chat, gus, "via the webhook")
	want := "tg5-" + strconv.FormatInt(chat, 10)
	if ch, _ := opened(t, w.agent); ch != want {
		t.Fatalf("channel.opened on %s, want %s", ch, want)
	}
	if ch, m := nextUser(t, w.agent); ch != want || m.Text != "via the webhook" {
		t.Fatalf("on %s: %q", ch, m.Text)
	}
	for _, c := range []struct{ bot, secret string }{{"tg5", ""}, {"tg5", "wrong-secret-0123456789"}, {"nobot", secret}} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+w.node.Addr+"/v1/targets/telegram/bots/"+c.bot+"/updates", strings.NewReader(`{"update_id":1}`))
		if c.secret != "" {
			req.Header.Set("X-Telegram-Bot-Api-Secret-Token", c.secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a call for %s with secret %q: %d, want 401", c.bot, c.secret, resp.StatusCode)
		}
	}
	w.quiet(500 * time.Millisecond)
}
