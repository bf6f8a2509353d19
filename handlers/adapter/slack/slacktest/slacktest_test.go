package slacktest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"

	"github.com/ximd/ximd/handlers/adapter/slack/slacktest"
)

// world is a fake workspace with one bot, one person, a DM and a channel.
type world struct {
	s       *slacktest.Server
	bot     slacktest.Bot
	ann     slacktest.User
	dm, gen string
	api     *slack.Client
}

func newWorld(t *testing.T) *world {
	t.Helper()
	s := slacktest.New()
	t.Cleanup(s.Close)
	w := &world{s: s, bot: s.AddBot("ximd"), ann: s.AddUser("ann")}
	w.dm = s.AddChannel("im", "", w.ann)
	w.gen = s.AddChannel("channel", "general", w.ann)
	w.api = slack.New(w.bot.Token, slack.OptionAPIURL(s.URL()), slack.OptionAppLevelToken(w.bot.AppToken))
	return w
}

// eventually polls cond until it holds or 5 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func slackErr(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

func TestAuthTestAnswersTheBotAndRefusesBadTokens(t *testing.T) {
	w := newWorld(t)
	got, err := w.api.AuthTest()
	if err != nil {
		t.Fatal(err)
	}
	if got.UserID != w.bot.UserID || got.BotID != w.bot.BotID || got.TeamID != w.bot.TeamID {
		t.Fatalf("auth.test = %+v, want bot %+v", got, w.bot)
	}
	tests := []struct {
		name, token, wantErr string
	}{
		{"unknown token", "xoxb-1-2-nope", "invalid_auth"},
		{"app-level token on a bot method", w.bot.AppToken, "not_allowed_token_type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := slack.New(tt.token, slack.OptionAPIURL(w.s.URL())).AuthTest()
			if slackErr(err) != tt.wantErr {
				t.Fatalf("err = %v, want %s", err, tt.wantErr)
			}
		})
	}
	_, _, err = slack.New(w.bot.Token, slack.OptionAPIURL(w.s.URL()), slack.OptionAppLevelToken(w.bot.Token)).StartSocketModeContext(context.Background())
	if slackErr(err) != "not_allowed_token_type" {
		t.Fatalf("apps.connections.open with a bot token: err = %v", err)
	}
}

func TestConversationsInfoHidesChannelsWithoutTheBot(t *testing.T) {
	w := newWorld(t)
	if _, err := w.api.GetConversationInfo(&slack.GetConversationInfoInput{ChannelID: w.gen}); err != nil {
		t.Fatal(err)
	}
	w.s.RemoveBot(w.gen)
	for _, ch := range []string{w.gen, "C0NOSUCH00"} {
		_, err := w.api.GetConversationInfo(&slack.GetConversationInfoInput{ChannelID: ch})
		if slackErr(err) != "channel_not_found" {
			t.Fatalf("%s: err = %v, want channel_not_found", ch, err)
		}
	}
}

func TestPostedMetadataIsReadBackOnlyWithIncludeAllMetadata(t *testing.T) {
	w := newWorld(t)
	meta := slack.SlackMetadata{EventType: "ximd_packet", EventPayload: map[string]any{"packet_id": "p1"}}
	_, ts, err := w.api.PostMessage(w.gen, slack.MsgOptionText("hello", false), slack.MsgOptionMetadata(meta))
	if err != nil {
		t.Fatal(err)
	}
	h, err := w.api.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: w.gen, IncludeAllMetadata: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Messages) != 1 || h.Messages[0].Timestamp != ts || h.Messages[0].Metadata.EventType != "ximd_packet" ||
		h.Messages[0].Metadata.EventPayload["packet_id"] != "p1" {
		t.Fatalf("history = %+v", h.Messages)
	}
	h, err = w.api.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: w.gen})
	if err != nil {
		t.Fatal(err)
	}
	if h.Messages[0].Metadata.EventType != "" {
		t.Fatalf("metadata without include_all_metadata: %+v", h.Messages[0].Metadata)
	}
	if got := w.s.Messages(w.gen); len(got) != 1 || got[0].Metadata == nil || got[0].BotID != w.bot.BotID {
		t.Fatalf("Messages = %+v", got)
	}
}

func TestHistoryPaginatesNewestFirstAndRepliesHoldTheThread(t *testing.T) {
	w := newWorld(t)
	w.s.SetLimits(slacktest.Limits{PostPerSecond: 1000, PostBurst: 1000})
	var tss []string
	for i := range 5 {
		ts, _ := w.s.Post(w.gen, w.ann, string(rune('a'+i)), "")
		tss = append(tss, ts)
	}
	if _, _, err := w.api.PostMessage(w.gen, slack.MsgOptionText("reply", false), slack.MsgOptionTS(tss[0])); err != nil {
		t.Fatal(err)
	}
	var seen []string
	cursor := ""
	for {
		h, err := w.api.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: w.gen, Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range h.Messages {
			seen = append(seen, m.Text)
		}
		if !h.HasMore {
			break
		}
		cursor = h.ResponseMetaData.NextCursor
	}
	if strings.Join(seen, "") != "edcba" {
		t.Fatalf("history pages = %q, want newest first without the reply", seen)
	}
	msgs, _, _, err := w.api.GetConversationReplies(&slack.GetConversationRepliesParameters{ChannelID: w.gen, Timestamp: tss[0]})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[1].Text != "reply" {
		t.Fatalf("replies = %+v", msgs)
	}
	_, _, _, err = w.api.GetConversationReplies(&slack.GetConversationRepliesParameters{ChannelID: w.gen, Timestamp: "1.000001"})
	if slackErr(err) != "thread_not_found" {
		t.Fatalf("unknown thread: err = %v", err)
	}
}

func TestUpdateChangesOnlyTheBotsOwnMessages(t *testing.T) {
	w := newWorld(t)
	_, ts, err := w.api.PostMessage(w.dm, slack.MsgOptionText("draft", false))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := w.api.UpdateMessage(w.dm, ts, slack.MsgOptionText("final", false)); err != nil {
		t.Fatal(err)
	}
	if m := w.s.Messages(w.dm)[0]; m.Text != "final" || m.Edits != 1 {
		t.Fatalf("message = %+v", m)
	}
	annTS, _ := w.s.Post(w.dm, w.ann, "mine", "")
	tests := []struct{ name, ts, wantErr string }{
		{"a person's message", annTS, "cant_update_message"},
		{"an unknown ts", "1.000002", "message_not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, _, err := w.api.UpdateMessage(w.dm, tt.ts, slack.MsgOptionText("x", false))
			if slackErr(err) != tt.wantErr {
				t.Fatalf("err = %v, want %s", err, tt.wantErr)
			}
		})
	}
	_, _, err = w.api.PostMessage(w.dm, slack.MsgOptionText(strings.Repeat("x", 40_001), false))
	if slackErr(err) != "msg_too_long" {
		t.Fatalf("40,001 characters: err = %v", err)
	}
}

func TestStreamAppendsMarkdownUntilStopped(t *testing.T) {
	w := newWorld(t)
	ask, _ := w.s.Post(w.dm, w.ann, "question", "")
	_, ts, err := w.api.StartStream(w.dm, slack.MsgOptionTS(ask), slack.MsgOptionMarkdownText("Hel"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.api.AppendStream(w.dm, ts, slack.MsgOptionMarkdownText("lo")); err != nil {
		t.Fatal(err)
	}
	if m := w.s.Messages(w.dm)[1]; !m.Streaming || m.Text != "Hello" || m.Appends != 1 || m.ThreadTS != ask {
		t.Fatalf("streaming message = %+v", m)
	}
	meta := slack.SlackMetadata{EventType: "ximd_packet", EventPayload: map[string]any{"packet_id": "p2"}}
	if _, _, err := w.api.StopStream(w.dm, ts, slack.MsgOptionMarkdownText("!"), slack.MsgOptionMetadata(meta)); err != nil {
		t.Fatal(err)
	}
	if m := w.s.Messages(w.dm)[1]; m.Streaming || m.Text != "Hello!" || m.Metadata == nil {
		t.Fatalf("stopped message = %+v", m)
	}
	_, _, err = w.api.AppendStream(w.dm, ts, slack.MsgOptionMarkdownText("more"))
	if slackErr(err) != "message_not_in_streaming_state" {
		t.Fatalf("append after stop: err = %v", err)
	}
}

func TestStreamingIsRefusedWhereNotSupported(t *testing.T) {
	w := newWorld(t)
	parent, _ := w.s.Post(w.gen, w.ann, "question", "")
	recipient := []slack.MsgOption{slack.MsgOptionRecipientUserID(w.ann.ID), slack.MsgOptionRecipientTeamID(w.bot.TeamID)}
	if _, _, err := w.api.StartStream(w.gen, append(recipient, slack.MsgOptionTS(parent))...); err != nil {
		t.Fatalf("thread of a channel with recipient: %v", err)
	}
	_, _, err := w.api.StartStream(w.gen, recipient...)
	if slackErr(err) != "channel_type_not_supported" {
		t.Fatalf("top level of a channel: err = %v", err)
	}
	w.s.SetStreamingSupported(w.dm, false)
	_, _, err = w.api.StartStream(w.dm, slack.MsgOptionMarkdownText("x"))
	if slackErr(err) != "channel_type_not_supported" {
		t.Fatalf("streaming turned off: err = %v", err)
	}
}

func TestSetStatusRecordsAndClears(t *testing.T) {
	w := newWorld(t)
	ask, _ := w.s.Post(w.dm, w.ann, "question", "")
	for _, st := range []string{"is thinking...", ""} {
		err := w.api.SetAssistantThreadsStatus(slack.AssistantThreadsSetStatusParameters{ChannelID: w.dm, ThreadTS: ask, Status: st})
		if err != nil {
			t.Fatal(err)
		}
	}
	got := w.s.Statuses(w.dm, ask)
	if len(got) != 2 || got[0].Text != "is thinking..." || got[1].Text != "" {
		t.Fatalf("Statuses = %+v", got)
	}
	if cur := w.s.CurrentStatus(w.dm, ask); cur != "" {
		t.Fatalf("CurrentStatus = %q after clearing", cur)
	}
}

func TestUploadSharesTheFileAndURLPrivateNeedsTheToken(t *testing.T) {
	w := newWorld(t)
	data := []byte("hello, file")
	_, err := w.api.UploadFileContext(context.Background(), slack.UploadFileParameters{
		Filename: "note.txt", FileSize: len(data), Reader: bytes.NewReader(data), Channel: w.gen, InitialComment: "see",
	})
	if err != nil {
		t.Fatal(err)
	}
	msgs := w.s.Messages(w.gen)
	if len(msgs) != 1 || msgs[0].Text != "see" || len(msgs[0].Files) != 1 || string(msgs[0].Files[0].Data) != "hello, file" {
		t.Fatalf("Messages = %+v", msgs)
	}
	h, err := w.api.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: w.gen})
	if err != nil {
		t.Fatal(err)
	}
	f := h.Messages[0].Files[0]
	if f.Name != "note.txt" || f.Mimetype != "text/plain" || f.Size != len(data) {
		t.Fatalf("file = %+v", f)
	}
	var buf bytes.Buffer
	if err := w.api.GetFile(f.URLPrivate, &buf); err != nil || buf.String() != "hello, file" {
		t.Fatalf("GetFile = %q, %v", buf.String(), err)
	}
	resp, err := http.Get(f.URLPrivate)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if bytes.Contains(body, data) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("download without token: %s %q", resp.Header.Get("Content-Type"), body)
	}
}

func TestUploadOfTheWrongLengthIsRefused(t *testing.T) {
	w := newWorld(t)
	u, err := w.api.GetUploadURLExternalContext(context.Background(), slack.GetUploadURLExternalParameters{FileName: "a.bin", FileSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	err = w.api.UploadToURL(context.Background(), slack.UploadToURLParameters{UploadURL: u.UploadURL, Filename: "a.bin", Content: "short"})
	if err == nil {
		t.Fatal("upload of 5 bytes for length 10 succeeded")
	}
	_, err = w.api.CompleteUploadExternalContext(context.Background(), slack.CompleteUploadExternalParameters{
		Files: []slack.FileSummary{{ID: u.FileID}}, Channel: w.gen,
	})
	if slackErr(err) != "file_upload_not_complete" {
		t.Fatalf("complete without upload: err = %v", err)
	}
}

func TestRateLimitAnswers429WithRetryAfterAndCountsEarlyCalls(t *testing.T) {
	w := newWorld(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var mu sync.Mutex
	w.s.SetClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	for i := range 3 { // the burst
		if _, _, err := w.api.PostMessage(w.gen, slack.MsgOptionText("m", false)); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	_, _, err := w.api.PostMessage(w.gen, slack.MsgOptionText("m", false))
	var rl *slack.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter != time.Second {
		t.Fatalf("4th post: err = %v, want 429 Retry-After 1", err)
	}
	if w.s.EarlyCalls() != 0 {
		t.Fatalf("EarlyCalls = %d before any early call", w.s.EarlyCalls())
	}
	if _, _, err := w.api.PostMessage(w.gen, slack.MsgOptionText("m", false)); !errors.As(err, &rl) {
		t.Fatalf("post inside the window: err = %v", err)
	}
	if _, _, err := w.api.PostMessage(w.dm, slack.MsgOptionText("m", false)); err != nil {
		t.Fatalf("another channel has its own budget: %v", err)
	}
	if w.s.EarlyCalls() != 1 {
		t.Fatalf("EarlyCalls = %d, want 1", w.s.EarlyCalls())
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	if _, _, err := w.api.PostMessage(w.gen, slack.MsgOptionText("m", false)); err != nil {
		t.Fatalf("post after Retry-After: %v", err)
	}
	calls := w.s.Calls()
	if c := calls[3]; c.Status != http.StatusTooManyRequests || c.Error != "ratelimited" || c.Channel != w.gen {
		t.Fatalf("call 4 = %+v", c)
	}
}

func TestFailNextAndHang(t *testing.T) {
	w := newWorld(t)
	w.s.FailNext("chat.postMessage", 1, "fatal_error", 0, 0)
	_, _, err := w.api.PostMessage(w.gen, slack.MsgOptionText("m", false))
	if slackErr(err) != "fatal_error" {
		t.Fatalf("err = %v", err)
	}
	w.s.Hang("chat.postMessage", time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, _, err := w.api.PostMessageContext(ctx, w.gen, slack.MsgOptionText("in doubt", false)); err == nil {
		t.Fatal("hung call answered")
	}
	if m := w.s.Messages(w.gen); len(m) != 1 || m[0].Text != "in doubt" {
		t.Fatalf("the hung call was not applied: %+v", m)
	}
	eventually(t, "the hung call to be recorded unanswered", func() bool {
		c := w.s.Calls()
		return len(c) == 2 && c[1].Status == 0
	})
}

// runSocket runs a socketmode client and sends its events_api events to out; ack decides
// whether an event is acknowledged.
func runSocket(t *testing.T, w *world, ack func(socketmode.Request) bool) <-chan socketmode.Request {
	t.Helper()
	sm := socketmode.New(w.api)
	out := make(chan socketmode.Request, 16)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = sm.RunContext(ctx) }()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case e := <-sm.Events:
				if e.Type != socketmode.EventTypeEventsAPI {
					continue
				}
				if ack(*e.Request) {
					_ = sm.Ack(*e.Request)
				}
				out <- *e.Request
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return out
}

func TestSocketModeDeliversAndResendsUnacknowledgedEnvelopes(t *testing.T) {
	w := newWorld(t)
	w.s.SetSocketMode(true)
	var mu sync.Mutex
	skipped := false
	reqs := runSocket(t, w, func(r socketmode.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		if !skipped && r.RetryAttempt == 0 && strings.Contains(string(r.Payload), "second") {
			skipped = true
			return false
		}
		return true
	})
	eventually(t, "a socket", func() bool { return w.s.Connections(w.bot.AppToken) == 1 })

	ts, id := w.s.Post(w.dm, w.ann, "first", "")
	r := <-reqs
	var cb slackevents.EventsAPICallbackEvent
	if err := json.Unmarshal(r.Payload, &cb); err != nil {
		t.Fatal(err)
	}
	var msg slackevents.MessageEvent
	if err := json.Unmarshal(*cb.InnerEvent, &msg); err != nil {
		t.Fatal(err)
	}
	if cb.EventID != id || cb.APIAppID != w.bot.AppID || msg.Text != "first" || msg.TimeStamp != ts || msg.ChannelType != "im" || msg.User != w.ann.ID {
		t.Fatalf("event = %+v %+v", cb, msg)
	}
	eventually(t, "the ack", func() bool { _, ok := w.s.EventStatus(id); return ok })

	_, id2 := w.s.Post(w.dm, w.ann, "second", "")
	first, again := <-reqs, <-reqs
	if first.RetryAttempt != 0 || again.RetryAttempt != 1 || again.RetryReason != "timeout" || again.EnvelopeID != first.EnvelopeID {
		t.Fatalf("attempts = %+v then %+v", first, again)
	}
	eventually(t, "the retry's ack", func() bool { n, ok := w.s.EventStatus(id2); return ok && n == 2 })

	w.s.Redeliver(id)
	if r := <-reqs; r.RetryAttempt != 1 || !strings.Contains(string(r.Payload), id) {
		t.Fatalf("redelivery = %+v", r)
	}
	if n := w.s.EventDeliveries(); n != 4 {
		t.Fatalf("EventDeliveries = %d, want 4", n)
	}
}

func TestEventsAPISignsAndRetriesFailedDeliveries(t *testing.T) {
	w := newWorld(t)
	type hit struct {
		retryNum, reason string
		verified         bool
	}
	var mu sync.Mutex
	var hits []hit
	app := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sv, err := slack.NewSecretsVerifier(r.Header, w.bot.SigningSecret)
		verified := err == nil
		if verified {
			_, _ = sv.Write(body)
			verified = sv.Ensure() == nil
		}
		var v struct{ Type, Challenge string }
		_ = json.Unmarshal(body, &v)
		if v.Type == "url_verification" {
			rw.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(rw).Encode(map[string]string{"challenge": v.Challenge})
			return
		}
		mu.Lock()
		hits = append(hits, hit{r.Header.Get("X-Slack-Retry-Num"), r.Header.Get("X-Slack-Retry-Reason"), verified})
		n := len(hits)
		mu.Unlock()
		switch n {
		case 1:
			rw.WriteHeader(http.StatusInternalServerError)
		case 2:
			time.Sleep(700 * time.Millisecond) // past the event timeout
		}
	}))
	defer app.Close()
	w.s.SetEventURL(app.URL, "")
	sent, got, err := w.s.UrlVerification()
	if err != nil || got != sent {
		t.Fatalf("url_verification: sent %q, got %q, %v", sent, got, err)
	}

	_, id := w.s.Post(w.gen, w.ann, "hi", "")
	eventually(t, "delivery", func() bool { _, ok := w.s.EventStatus(id); return ok })
	mu.Lock()
	defer mu.Unlock()
	want := []hit{{"", "", true}, {"1", "http_error", true}, {"2", "http_timeout", true}}
	if len(hits) != len(want) {
		t.Fatalf("hits = %+v, want %+v", hits, want)
	}
	for i := range want {
		if hits[i] != want[i] {
			t.Fatalf("hit %d = %+v, want %+v", i, hits[i], want[i])
		}
	}
}

// "app_mention": a channel message mentioning the bot comes as a message event and as an
// app_mention with the same ts; in a DM, only the message event. A bot's chat.postMessage makes
// a message event with bot_id for every bot, its author included.
func TestMentionsAndBotMessagesMakeEvents(t *testing.T) {
	w := newWorld(t)
	w.s.SetSocketMode(true)
	reqs := runSocket(t, w, func(socketmode.Request) bool { return true })
	eventually(t, "a socket", func() bool { return w.s.Connections(w.bot.AppToken) == 1 })
	inner := func(r socketmode.Request) map[string]any {
		var cb struct{ Event map[string]any }
		if err := json.Unmarshal(r.Payload, &cb); err != nil {
			t.Fatal(err)
		}
		return cb.Event
	}
	ts, _ := w.s.Post(w.gen, w.ann, "<@"+w.bot.UserID+"> hi", "")
	got := map[string]map[string]any{}
	for range 2 {
		ev := inner(<-reqs)
		got[ev["type"].(string)] = ev
	}
	if m, a := got["message"], got["app_mention"]; m == nil || a == nil || m["ts"] != ts || a["ts"] != ts || a["channel"] != w.gen || m["channel_type"] != "channel" {
		t.Fatalf("events %v", got)
	}
	w.s.Post(w.dm, w.ann, "<@"+w.bot.UserID+"> in a DM", "")
	if ev := inner(<-reqs); ev["type"] != "message" || ev["channel_type"] != "im" {
		t.Fatalf("DM event %v", ev)
	}
	if _, _, err := w.api.PostMessage(w.gen, slack.MsgOptionText("from the bot", false)); err != nil {
		t.Fatal(err)
	}
	if ev := inner(<-reqs); ev["type"] != "message" || ev["bot_id"] != w.bot.BotID || ev["user"] != w.bot.UserID || ev["subtype"] != nil {
		t.Fatalf("bot message event %v", ev)
	}
	select {
	case r := <-reqs:
		t.Fatalf("one more event: %v", inner(r))
	case <-time.After(200 * time.Millisecond):
	}
}

// conversations.info tells the conversation types apart; users.info names a person.
func TestConversationKindsAndUsersInfo(t *testing.T) {
	w := newWorld(t)
	for kind, want := range map[string]func(*slack.Channel) bool{
		"group": func(c *slack.Channel) bool { return c.IsChannel && c.IsPrivate && c.Name == "x" },
		"mpim":  func(c *slack.Channel) bool { return c.IsMpIM && c.IsPrivate && strings.HasPrefix(c.ID, "G") },
		"im":    func(c *slack.Channel) bool { return c.IsIM && c.User == w.ann.ID },
	} {
		id := w.s.AddChannel(kind, "x", w.ann)
		c, err := w.api.GetConversationInfo(&slack.GetConversationInfoInput{ChannelID: id})
		if err != nil || !want(c) {
			t.Errorf("%s: %+v %v", kind, c, err)
		}
	}
	u, err := w.api.GetUserInfo(w.ann.ID)
	if err != nil || u.ID != w.ann.ID || u.Profile.DisplayName != "ann" || u.IsBot {
		t.Fatalf("users.info %+v %v", u, err)
	}
	if _, err := w.api.GetUserInfo("UNOBODY"); slackErr(err) != "user_not_found" {
		t.Fatalf("unknown user: %v", err)
	}
}
