package test

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/telegram"
	"github.com/ximd/ximd/handlers/adapter/telegram/telegramtest"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

// openTelegram binds channel to a Telegram chat through the real API.
func openTelegram(n *testkit.Node, channel string, cfg map[string]any) (int, []byte, error) {
	return n.Do(http.MethodPut, "/v1/channels/"+channel, map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "telegram", "config": cfg},
	})
}

// telegramWorld is a node, xAgent on /v1/ws, and the Bot API fake with one bot.
type telegramWorld struct {
	*env
	fake *telegramtest.Server
	bot  telegramtest.Bot
}

func newTelegramWorld(t *testing.T, mutate func(*node.Config)) *telegramWorld {
	fake := telegramtest.New()
	t.Cleanup(fake.Close)
	return &telegramWorld{env: newEnv(t, envOptions{mutate: mutate}), fake: fake, bot: fake.AddBot("8001:e2e-secret-token", "ximd_bot")}
}

// bind opens channel on chat with extra config.
func (w *telegramWorld) bind(channel string, chat int64, extra map[string]any) {
	w.t.Helper()
	cfg := map[string]any{"token": w.bot.Token, "chat_id": chat, "api_url": w.fake.URL()}
	for k, v := range extra {
		cfg[k] = v
	}
	status, body, err := openTelegram(w.node, channel, cfg)
	if err != nil || status != http.StatusOK {
		w.t.Fatalf("PUT telegram channel %s: %d %s %v", channel, status, body, err)
	}
	if bytes.Contains(body, []byte(w.bot.Token)) {
		w.t.Fatal("the channel's representation shows the bot token")
	}
}

// calls counts the fake's calls of method ("": any) to chat (0: any) answered status (0: any).
func (w *telegramWorld) calls(method string, chat int64, status int) int {
	n := 0
	for _, c := range w.fake.Calls() {
		if (method == "" || strings.EqualFold(c.Method, method)) && (chat == 0 || c.ChatID == chat) && (status == 0 || c.Status == status) {
			n++
		}
	}
	return n
}

// The Telegram adapter end to end (edge-api §7.2.2) through /v1/ws against the Bot API fake:
// a draft-streamed answer in a private chat is drafts and then one message; typing is renewed
// while the agent thinks and stops with the answer; a 10,000-character final arrives split, in
// order; a 429 storm ends in accepted without a call before retry_after; a file goes out as a
// photo with its caption; im.reply_message replies; the person's photo reaches xAgent once; a
// config that cannot work is refused at PUT.
func TestTelegram_EndToEndPrivateChat(t *testing.T) {
	w := newTelegramWorld(t, func(c *node.Config) { c.TargetRetryBudget = time.Minute }) // a 429 is waited out
	alice := w.fake.AddUser("Alice")
	chat := w.fake.AddChat("private", "", alice.ID)
	w.bind("tg", chat, nil)

	// Refused at PUT: a bad token, an unknown chat, drafts in a group.
	group := w.fake.AddChat("group", "team", alice.ID)
	for name, cfg := range map[string]map[string]any{
		"bad token":      {"token": "8001:wrong", "chat_id": chat, "api_url": w.fake.URL()},
		"unknown chat":   {"token": w.bot.Token, "chat_id": 424242, "api_url": w.fake.URL()},
		"draft in group": {"token": w.bot.Token, "chat_id": group, "api_url": w.fake.URL(), "streaming": "draft"},
	} {
		if status, body, _ := openTelegram(w.node, "tg-bad", cfg); status/100 != 4 || bytes.Contains(body, []byte("8001:")) {
			t.Fatalf("PUT with %s: %d %s, want a 4xx without the token", name, status, body)
		}
	}

	// Typing while the agent thinks: renewed every 4 s, then stopped by the answer.
	w.sendTo("tg", profile.TypeActivity, map[string]any{"status": "thinking"})
	poll(t, "typing renewed", func() bool { return len(w.fake.Actions(chat)) >= 2 })
	if a := w.fake.Actions(chat); a[1].At.Sub(a[0].At) < 3*time.Second {
		t.Fatalf("typing renewed after %s, want about 4 s", a[1].At.Sub(a[0].At))
	}

	// A draft-streamed answer: drafts while it streams, then one message.
	words := strings.Fields("Hello Alice, this answer streams as a draft preview before it is sent")
	for i, word := range words {
		w.sendTo("tg", profile.TypeDelta, delta("m_draft", i+1, word+" "))
		time.Sleep(40 * time.Millisecond)
	}
	final := strings.Join(words, " ")
	if a := w.ackOf(w.sendTo("tg", profile.TypeMessage, msg("m_draft", final))); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	drafts := w.fake.Drafts(chat)
	if len(drafts) < 2 || !strings.HasPrefix(final, strings.TrimSpace(drafts[len(drafts)-1].Text)) {
		t.Fatalf("drafts %+v, want several previews of the answer", drafts)
	}
	for _, d := range drafts {
		if d.DraftID != drafts[0].DraftID {
			t.Fatalf("draft ids %q and %q for one answer", drafts[0].DraftID, d.DraftID)
		}
		if !(adapter.Capabilities{FirstPreviewWords: telegram.DefaultFirstPreviewWords}).PreviewReady(d.Text) {
			t.Fatalf("a draft shown before its first %d words: %q", telegram.DefaultFirstPreviewWords, d.Text)
		}
	}
	if shown := w.fake.Messages(chat); len(shown) != 1 || shown[0].Text != final {
		t.Fatalf("the chat shows %+v, want one message with the final text", shown)
	}
	actions := len(w.fake.Actions(chat))
	time.Sleep(5 * time.Second) // past a renewal
	if n := len(w.fake.Actions(chat)); n != actions || w.fake.Typing(chat) {
		t.Fatalf("typing went on after the answer: %d chat actions, then %d", actions, n)
	}

	// A 10,000-character final: one rich message (a rich message holds 32,768 characters), its
	// lines one paragraph.
	var long strings.Builder
	for i := 0; long.Len() < 10000; i++ {
		fmt.Fprintf(&long, "Line %d of a long answer that a plain message could not hold.\n", i)
	}
	text := strings.TrimSpace(long.String())
	if a := w.ackOf(w.sendTo("tg", profile.TypeMessage, msg("m_long", text))); a.Status != profile.AckAccepted {
		t.Fatalf("long final: %+v", a)
	}
	shown := w.fake.Messages(chat)[1:]
	if len(shown) != 1 || shown[0].Form != "rich" || len(shown[0].Text) > telegram.MaxTextLength ||
		strings.Join(strings.Fields(shown[0].Text), " ") != strings.Join(strings.Fields(text), " ") {
		t.Fatalf("the long final shows as %d messages", len(shown))
	}

	// A 429 storm: retried no sooner than retry_after, then accepted.
	w.fake.FailNext("sendRichMessage", 3, http.StatusTooManyRequests, "Too Many Requests: retry after 1", 1)
	start := time.Now()
	if a := w.ackOf(w.sendTo("tg", profile.TypeMessage, msg("m_storm", "after the storm"))); a.Status != profile.AckAccepted {
		t.Fatalf("final through a 429 storm: %+v", a)
	}
	if took := time.Since(start); took < 3*time.Second {
		t.Fatalf("accepted after %s: three retry_after of 1 s were not waited out", took)
	}
	if n := w.fake.EarlyCalls(); n != 0 {
		t.Fatalf("%d calls before retry_after", n)
	}

	// A file: the photo with the text as its caption.
	data := []byte("\x89PNG\r\n\x1a\n not really a png")
	ref := upload(t, w.node, "tg", "chart.png", data)
	if a := w.ackOf(w.sendTo("tg", profile.TypeMessage, map[string]any{"message_id": "m_file", "text": "the chart", "files": []any{map[string]any{"type": "image", "file_ref": ref}}})); a.Status != profile.AckAccepted {
		t.Fatalf("final with a file: %+v", a)
	}
	all := w.fake.Messages(chat)
	last := all[len(all)-1]
	if last.File == nil || last.File.Kind != "photo" || !bytes.Equal(last.File.Data, data) || last.Caption != "the chart" {
		t.Fatalf("the file shows as %+v", last)
	}

	// im.reply_message: a Telegram reply to the first answer.
	r := invokeOn(w.env, "tg", "inv_reply", profile.ToolReplyMessage, map[string]any{"reply_to_target_message_id": strconv.Itoa(all[0].ID), "text": "more on that"})
	all = w.fake.Messages(chat)
	if last = all[len(all)-1]; !r.OK || last.Text != "more on that" || last.ReplyTo != all[0].ID || r.Result.TargetMessageID != strconv.Itoa(last.ID) {
		t.Fatalf("reply %+v shown as %+v", r, last)
	}

	// IM -> xAgent: text, then a photo, each once; the bot's own and service messages are not.
	w.fake.PostService(chat, alice)
	sent := w.fake.Post(chat, alice, "hi bot")
	uenv, um := userMessage(t, w.agent, wait)
	if uenv.ChannelID != "tg" || um.Text != "hi bot" || um.MessageID != telegram.MessageIDOf(chat, sent) {
		t.Fatalf("user message %s %+v", uenv.ChannelID, um)
	}
	ackUser(t, w.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	photo := bytes.Repeat([]byte("jpeg"), 1000)
	w.fake.PostFile(chat, alice, "photo", "look", "", photo)
	uenv, um = userMessage(t, w.agent, wait)
	if um.Text != "look" || len(um.Files) != 1 || um.Files[0].Type != "image" {
		t.Fatalf("photo message %+v", um)
	}
	if status, got, _ := w.node.Do(http.MethodGet, um.Files[0].DownloadURL, nil); status != http.StatusOK || !bytes.Equal(got, photo) {
		t.Fatalf("the photo in ximd's file store: %d, %d bytes", status, len(got))
	}
	ackUser(t, w.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})

	// A restart neither loses nor replays: the update offset is in JetStream.
	w.restart()
	after := w.fake.Post(chat, alice, "still there?")
	uenv, um = userMessage(t, w.agent, wait)
	if um.MessageID != telegram.MessageIDOf(chat, after) {
		t.Fatalf("after the restart the agent got %+v, want only the new message", um)
	}
	ackUser(t, w.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	w.quiet(time.Second)
}

// In a group, a streamed answer is one message edited in place, and 50 deltas a second never
// push the bot past the group's budget (20 messages and edits a minute): no call is answered
// 429, and the final is the last edit.
func TestTelegram_GroupEditStreamWithinBudget(t *testing.T) {
	w := newTelegramWorld(t, func(c *node.Config) { c.EditInterval = 0 })
	alice := w.fake.AddUser("Alice")
	group := w.fake.AddChat("supergroup", "team", alice.ID)
	w.bind("tgg", group, nil)
	var final strings.Builder
	seq := 0
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); {
		seq++
		part := fmt.Sprintf("word%d ", seq)
		final.WriteString(part)
		w.sendTo("tgg", profile.TypeDelta, delta("m_group", seq, part))
		time.Sleep(20 * time.Millisecond)
	}
	text := strings.TrimSpace(final.String())
	if a := w.ackOf(w.sendTo("tgg", profile.TypeMessage, msg("m_group", text))); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	shown := w.fake.Messages(group)
	if len(shown) != 1 || shown[0].Text != text || shown[0].Edits < 1 {
		t.Fatalf("the group shows %d messages (%+v), want one edited to the final", len(shown), shown)
	}
	if n := w.calls("", group, http.StatusTooManyRequests); n != 0 {
		t.Fatalf("%d calls answered 429 in the group", n)
	}
	calls := w.calls("sendRichMessage", group, 0) + w.calls("editMessageText", group, 0)
	t.Logf("%d deltas shown with %d calls (%d edits)", seq, calls, shown[0].Edits)
	if calls > 4 {
		t.Fatalf("%d message calls in about 4 s in a group", calls)
	}
}

// A direct final whose sendRichMessage times out after Telegram applied it may be shown: Telegram
// has no idempotency key, so it is answered delivery_outcome_unknown and never sent again (a
// retransmission gets the same answer); a streamed answer in doubt is settled by its edit.
func TestTelegram_TimeoutAfterSendIsNeverSentTwice(t *testing.T) {
	w := newTelegramWorld(t, func(c *node.Config) { c.TargetTimeout = time.Second; c.TargetRetryBudget = time.Minute })
	alice := w.fake.AddUser("Alice")
	chat := w.fake.AddChat("private", "", alice.ID)
	w.bind("tgd", chat, map[string]any{"streaming": "none"})
	w.fake.Hang("sendRichMessage", 3*time.Second)
	a := w.ackOf(w.sendTo("tgd", profile.TypeMessage, msg("m_doubt", "shown once at most")))
	if a.Status != profile.AckRejected || a.Code != profile.CodeDeliveryOutcomeUnknown {
		t.Fatalf("final after a timeout: %+v, want rejected delivery_outcome_unknown", a)
	}
	w.fake.Hang("sendRichMessage", 0)
	if a := w.ackOf(w.sendTo("tgd", profile.TypeMessage, msg("m_doubt", "shown once at most"))); a.Code != profile.CodeDeliveryOutcomeUnknown {
		t.Fatalf("retransmission: %+v, want delivery_outcome_unknown again", a)
	}
	if n := w.calls("sendRichMessage", chat, 0); n != 1 {
		t.Fatalf("sendRichMessage called %d times, want once", n)
	}
	if shown := w.fake.Messages(chat); len(shown) != 1 {
		t.Fatalf("the chat shows %d messages", len(shown))
	}
}

// Webhook inbound (edge-api §7.2.2): PUT sets the bot's webhook to the channel's route with the
// secret token; Telegram's calls carry the person's messages to xAgent once each, for every chat
// of the bot (one webhook per bot); a call without the secret is refused and loses nothing.
func TestTelegram_WebhookInbound(t *testing.T) {
	addr := freeAddr(t)
	w := newTelegramWorld(t, func(c *node.Config) { c.HTTPAddr, c.PublicURL = addr, "http://"+addr }) // Telegram calls XIM_PUBLIC_URL
	alice, bob := w.fake.AddUser("Alice"), w.fake.AddUser("Bob")
	chatA, chatB := w.fake.AddChat("private", "", alice.ID), w.fake.AddChat("group", "team", bob.ID)
	secret := "hook-secret-" + strings.Repeat("x", 16)
	w.bind("tga", chatA, map[string]any{"inbound": "webhook", "webhook_secret": secret})
	w.bind("tgb", chatB, map[string]any{"inbound": "webhook", "webhook_secret": secret})
	if status, body, _ := openTelegram(w.node, "tg-nosecret", map[string]any{"token": w.bot.Token, "chat_id": chatA, "api_url": w.fake.URL(), "inbound": "webhook"}); status != http.StatusUnprocessableEntity && status != http.StatusBadRequest {
		t.Fatalf("webhook inbound without a secret: %d %s", status, body)
	}
	for i, post := range []struct {
		chat    int64
		from    telegramtest.User
		channel string
	}{{chatA, alice, "tga"}, {chatB, bob, "tgb"}} {
		id := w.fake.Post(post.chat, post.from, fmt.Sprintf("hello %d", i))
		uenv, um := userMessage(t, w.agent, wait)
		if uenv.ChannelID != post.channel || um.MessageID != telegram.MessageIDOf(post.chat, id) || um.Text != fmt.Sprintf("hello %d", i) {
			t.Fatalf("user message on %s: %+v", uenv.ChannelID, um)
		}
		ackUser(t, w.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	}
	// Without the secret, or with another: 401, like a channel that is not open.
	for _, header := range []string{"", "wrong-secret-0123456789"} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+w.node.Addr+"/v1/targets/telegram/tga/updates", strings.NewReader(`{"update_id":1}`))
		if header != "" {
			req.Header.Set("X-Telegram-Bot-Api-Secret-Token", header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("webhook call with secret %q: %v %v, want 401", header, resp, err)
		}
		resp.Body.Close()
	}
	w.quiet(time.Second)
}

// A preview refused with retry_after pauses the display instead of ending it (edge-api §7.2:
// edits stretch): the first preview's sendRichMessage and a later edit are answered 429, and the
// message still comes to show the whole streamed text before the final arrives, with no call
// before retry_after.
func TestTelegram_PreviewRateLimitedPausesNotEnds(t *testing.T) {
	w := newTelegramWorld(t, func(c *node.Config) { c.EditInterval = 100 * time.Millisecond })
	alice := w.fake.AddUser("Alice")
	chat := w.fake.AddChat("private", "", alice.ID)
	w.bind("tgp", chat, map[string]any{"streaming": "edit", "edits_per_minute": 600, "first_preview_words": 0})
	w.fake.FailNext("sendRichMessage", 1, http.StatusTooManyRequests, "Too Many Requests: retry after 1", 1)
	var text strings.Builder
	for i := 1; i <= 30; i++ {
		part := fmt.Sprintf("w%d ", i)
		text.WriteString(part)
		w.sendTo("tgp", profile.TypeDelta, delta("m_pause", i, part))
		if i == 15 {
			w.fake.FailNext("editMessageText", 1, http.StatusTooManyRequests, "Too Many Requests: retry after 1", 1)
		}
		time.Sleep(50 * time.Millisecond)
	}
	streamed := strings.TrimSpace(text.String())
	poll(t, "the preview shows the whole streamed text before the final", func() bool {
		m := w.fake.Messages(chat)
		return len(m) == 1 && m[0].Text == streamed
	})
	if n := w.calls("", chat, http.StatusTooManyRequests); n != 2 {
		t.Fatalf("%d calls answered 429, want the two injected", n)
	}
	if n := w.fake.EarlyCalls(); n != 0 {
		t.Fatalf("%d calls before retry_after", n)
	}
	if a := w.ackOf(w.sendTo("tgp", profile.TypeMessage, msg("m_pause", streamed+" end."))); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	if m := w.fake.Messages(chat); len(m) != 1 || m[0].Text != streamed+" end." {
		t.Fatalf("the chat shows %+v, want one message with the final text", m)
	}
}
