package telegram_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/telegram"
	"github.com/ximd/ximd/handlers/adapter/telegram/telegramtest"
	"github.com/ximd/ximd/profile"
)

func TestConfig_DefaultsAndPublicViewWithoutSecrets(t *testing.T) {
	a := telegram.New(telegram.Options{})
	for _, tt := range []struct {
		cfg                string
		streaming, inbound string
		editsPerMinute     int
	}{
		{`{"token":"1:tok-SECRET","chat_id":42}`, "draft", "polling", 60},
		{`{"token":"1:tok-SECRET","chat_id":"-1001234"}`, "edit", "polling", 20},
		{`{"token":"1:tok-SECRET","chat_id":42,"streaming":"none","inbound":"webhook","webhook_secret":"SECRET-abcdefghijklmnop","edits_per_minute":30}`, "none", "webhook", 30},
	} {
		raw, err := a.Public(json.RawMessage(tt.cfg))
		if err != nil {
			t.Fatalf("%s: %v", tt.cfg, err)
		}
		if bytes.Contains(raw, []byte("SECRET")) {
			t.Fatalf("public view %s shows a secret", raw)
		}
		var p struct {
			Streaming      string `json:"streaming"`
			Inbound        string `json:"inbound"`
			EditsPerMinute int    `json:"edits_per_minute"`
			APIURL         string `json:"api_url"`
		}
		_ = json.Unmarshal(raw, &p)
		if p.Streaming != tt.streaming || p.Inbound != tt.inbound || p.EditsPerMinute != tt.editsPerMinute || p.APIURL != telegram.DefaultAPIURL {
			t.Fatalf("%s: public %s", tt.cfg, raw)
		}
	}
}

func TestConfig_RefusalsNameTheFieldNeverTheSecret(t *testing.T) {
	a := telegram.New(telegram.Options{})
	for cfg, field := range map[string]string{
		`{}`:                                     "token",
		`{"token":"nocolon","chat_id":1}`:        "token",
		`{"token":"1:SECRET","chat_id":0}`:       "chat_id",
		`{"token":"1:SECRET","chat_id":"@name"}`: "chat_id",
		`{"token":"1:SECRET","chat_id":-5,"streaming":"draft"}`:                       "streaming",
		`{"token":"1:SECRET","chat_id":5,"streaming":"stream"}`:                       "streaming",
		`{"token":"1:SECRET","chat_id":5,"activity":"status"}`:                        "activity",
		`{"token":"1:SECRET","chat_id":5,"inbound":"webhook"}`:                        "webhook_secret",
		`{"token":"1:SECRET","chat_id":5,"webhook_secret":"SECRET-0123456789abcdef"}`: "webhook_secret",
		`{"token":"1:SECRET","chat_id":5,"api_url":"ftp://x"}`:                        "api_url",
		`{"token":"1:SECRET","chat_id":5,"edits_per_minute":601}`:                     "edits_per_minute",
		`{"token":"1:SECRET","chat_id":5,"colour":"red"}`:                             "colour",
	} {
		_, err := a.Open(json.RawMessage(cfg))
		var pe *profile.Error
		if !errors.As(err, &pe) || pe.Code != profile.CodeInvalidDescriptor || !strings.Contains(pe.Message, "target.config."+field) || strings.Contains(pe.Message, "SECRET") {
			t.Fatalf("%s: %v, want invalid_descriptor naming target.config.%s without the secret", cfg, err, field)
		}
	}
}

// Errors map to ack codes (edge-api §7.2.2): 401 auth, 403 (bot blocked) and 400 (chat gone)
// delivery, 5xx unavailable, 429 rate-limited with its retry time; a refused connection is a
// certain failure, a timeout after the request was sent an ambiguous one.
func TestErrors_MapToAckCodes(t *testing.T) {
	fake := telegramtest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	bot := fake.AddBot("7101:errors-secret", "errors_bot")
	person := fake.AddUser("Eve")
	chat := fake.AddChat("private", "", person.ID)
	open := func(cfg json.RawMessage) adapter.Target {
		tg, err := telegram.New(telegram.Options{}).Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return tg
	}
	send := func(tg adapter.Target, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := tg.Send(ctx, adapter.Message{Text: "hi", Final: true, IdempotencyKey: "c:" + time.Now().String()})
		return err
	}
	code := func(err error) (string, bool, bool) {
		pe := profile.AsError(err)
		return pe.Code, pe.Retryable, adapter.IsAmbiguous(err)
	}
	tg := open(config(t, fake.URL(), bot, chat, map[string]any{"streaming": "none"}))

	check := func(name string, err error, wantCode string, wantRetryable, wantAmbiguous bool) {
		t.Helper()
		c, r, a := code(err)
		if c != wantCode || r != wantRetryable || a != wantAmbiguous {
			t.Fatalf("%s: %v: code %s retryable %v ambiguous %v, want %s %v %v", name, err, c, r, a, wantCode, wantRetryable, wantAmbiguous)
		}
		if strings.Contains(err.Error(), bot.Token) || strings.Contains(err.Error(), "errors-secret") {
			t.Fatalf("%s: the error shows the token: %v", name, err)
		}
	}
	wrong := open(config(t, fake.URL(), telegramtest.Bot{Token: "7101:wrong"}, chat, map[string]any{"streaming": "none"}))
	check("unknown token", send(wrong, 5*time.Second), profile.CodeTargetAuthFailed, false, false)
	fake.FailNext("sendRichMessage", 1, 500, "Internal Server Error", 0)
	check("server error", send(tg, 5*time.Second), profile.CodeTargetUnavailable, true, false)
	fake.FailNext("sendRichMessage", 1, 400, "Bad Request: chat not found", 0)
	check("chat not found", send(tg, 5*time.Second), profile.CodeTargetDeliveryFailed, false, false)
	fake.BlockBot(chat)
	check("bot blocked", send(tg, 5*time.Second), profile.CodeTargetDeliveryFailed, false, false)
	fake.UnblockBot(chat)
	fake.FailNext("sendRichMessage", 1, 429, "Too Many Requests: retry after 2", 2)
	err := send(tg, 5*time.Second)
	check("rate limited", err, profile.CodeTargetRateLimited, true, false)
	if after, ok := adapter.RetryAfterOf(err); !ok || after != 2*time.Second {
		t.Fatalf("retry after %s %v, want 2s", after, ok)
	}
	// No call to the chat before retry_after: refused here, without a call.
	before := len(fake.Calls())
	check("during retry_after", send(tg, 5*time.Second), profile.CodeTargetRateLimited, true, false)
	if len(fake.Calls()) != before || fake.EarlyCalls() != 0 {
		t.Fatalf("a call was made during retry_after (%d calls, %d early)", len(fake.Calls())-before, fake.EarlyCalls())
	}

	// Nothing listens: certain. An answer that never comes: ambiguous.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	check("connection refused", send(open(config(t, closed, bot, chat, map[string]any{"streaming": "none"})), 5*time.Second), profile.CodeTargetUnavailable, true, false)
	other := fake.AddChat("private", "", fake.AddUser("Frank").ID)
	slow := open(config(t, fake.URL(), bot, other, map[string]any{"streaming": "none"}))
	fake.Hang("sendRichMessage", 5*time.Second)
	check("timeout after sending", send(slow, 300*time.Millisecond), profile.CodeTargetUnavailable, true, true)
	fake.Hang("sendRichMessage", 0)
}

// Probe (PUT) refuses what cannot work, after a call: a token Telegram refuses, a chat the bot
// is not in, a webhook without XIM_PUBLIC_URL; with a public URL it sets the
// webhook to the channel's route with the secret.
func TestProbe(t *testing.T) {
	fake := telegramtest.New()
	t.Cleanup(fake.Close)
	bot := fake.AddBot("7201:probe-secret", "probe_bot")
	person := fake.AddUser("Pat")
	chat := fake.AddChat("private", "", person.ID)
	probe := func(a *telegram.Adapter, cfg json.RawMessage) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return a.Probe(ctx, adapter.Channel{ID: "tgp", Target: adapter.Binding{Adapter: telegram.Name, Config: cfg}})
	}
	a := telegram.New(telegram.Options{})
	if err := probe(a, config(t, fake.URL(), bot, chat, nil)); err != nil {
		t.Fatalf("a good config: %v", err)
	}
	secret := "probe-webhook-secret-0123"
	for name, cfg := range map[string]json.RawMessage{
		"bad token":       config(t, fake.URL(), telegramtest.Bot{Token: "7201:nope"}, chat, nil),
		"unknown chat":    config(t, fake.URL(), bot, 99999, nil),
		"webhook, no URL": config(t, fake.URL(), bot, chat, map[string]any{"inbound": "webhook", "webhook_secret": secret}),
	} {
		err := probe(a, cfg)
		var pe *profile.Error
		if !errors.As(err, &pe) || (pe.Code != profile.CodeTargetConfigInvalid && pe.Code != profile.CodeInvalidDescriptor) || strings.Contains(pe.Message, "probe-secret") {
			t.Fatalf("%s: %v, want target_config_invalid", name, err)
		}
	}
	hooked := telegram.New(telegram.Options{PublicURL: "https://ximd.example.org/"})
	if err := probe(hooked, config(t, fake.URL(), bot, chat, map[string]any{"inbound": "webhook", "webhook_secret": secret})); err != nil {
		t.Fatalf("webhook config: %v", err)
	}
	var set bool
	for _, c := range fake.Calls() {
		set = set || strings.EqualFold(c.Method, "setWebhook") && c.Status == 200
	}
	if !set {
		t.Fatal("setWebhook was not called")
	}
}

// A file past the Bot API's 20 MB download limit is not fetched: the message says so, and the
// rest of it still reaches xAgent. The bot's own messages and service messages are not user
// messages.
func TestPoll_TooLargeFileIsNamedNotLost(t *testing.T) {
	fake := telegramtest.New()
	t.Cleanup(fake.Close)
	bot := fake.AddBot("7301:poll-secret", "poll_bot")
	person := fake.AddUser("Quinn")
	chat := fake.AddChat("private", "", person.ID)
	files := adaptertest.NewFiles()
	a := telegram.New(telegram.Options{Common: adapter.Common{Files: files}, PollTimeout: time.Second})
	ch := adapter.Channel{ID: "tgq", Target: adapter.Binding{Adapter: telegram.Name, Config: config(t, fake.URL(), bot, chat, nil)}, OpenedAt: time.Now().UnixMilli()}
	feed := adaptertest.NewFeed(files, ch)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Poll(ctx, feed) }()
	defer func() { cancel(); <-done }()

	fake.PostService(chat, person)
	fake.PostFile(chat, person, "document", "the big one", "big.bin", make([]byte, telegram.MaxDownload+1))
	fake.Post(chat, person, "and a small question")
	in := feed.InboxOf("tgq")
	deadline := time.Now().Add(10 * time.Second)
	for len(in.Messages()) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	m := in.Messages()
	if len(m) != 2 || len(m[0].Files) != 0 || !strings.Contains(m[0].Text, "the big one") || !strings.Contains(m[0].Text, "[big.bin: not passed on:") || m[1].Text != "and a small question" {
		t.Fatalf("user messages %+v", m)
	}
}

// One getUpdates loop per bot: the chats of one token share a poll key (never the token itself),
// another token has its own, and a chat taking updates by webhook is not polled.
func TestPollKey_OnePerBotNoneForWebhook(t *testing.T) {
	a := telegram.New(telegram.Options{})
	ch := func(cfg string) adapter.Channel {
		return adapter.Channel{ID: "c", Target: adapter.Binding{Adapter: telegram.Name, Config: json.RawMessage(cfg)}}
	}
	k1 := a.PollKey(ch(`{"token":"1:SECRET","chat_id":5}`))
	k2 := a.PollKey(ch(`{"token":"1:SECRET","chat_id":-6,"streaming":"edit"}`))
	k3 := a.PollKey(ch(`{"token":"2:SECRET","chat_id":5}`))
	hook := a.PollKey(ch(`{"token":"1:SECRET","chat_id":5,"inbound":"webhook","webhook_secret":"abcdefghijklmnopq"}`))
	if k1 == "" || k1 != k2 || k1 == k3 || hook != "" || strings.Contains(k1, "SECRET") || strings.ContainsAny(k1, " :/*>") {
		t.Fatalf("poll keys %q %q %q %q", k1, k2, k3, hook)
	}
}
