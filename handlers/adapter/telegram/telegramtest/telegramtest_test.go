package telegramtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"github.com/ximd/ximd/handlers/adapter/telegram/telegramtest"
)

const token = "123456789:AAE-test_secret"

// noLimits turns the rate limits off for tests about something else.
var noLimits = telegramtest.Limits{PerChatPerSecond: 1e6, GroupPerMinute: 1e6, EditsPerMinute: 1e6, EphemeralPerSecond: 1e6}

// world is a fake with one bot and one person in a private chat with it.
type world struct {
	s       *telegramtest.Server
	bot     telegramtest.Bot
	ann     telegramtest.User
	private int64
	client  *bot.Bot
}

func newWorld(t *testing.T) *world {
	t.Helper()
	s := telegramtest.New()
	t.Cleanup(s.Close)
	w := &world{s: s, bot: s.AddBot(token, "ximd_bot"), ann: s.AddUser("Ann")}
	w.private = s.AddChat("private", "", w.ann.ID)
	c, err := bot.New(token, bot.WithServerURL(s.URL()), bot.WithSkipGetMe())
	if err != nil {
		t.Fatalf("bot.New: %v", err)
	}
	w.client = c
	return w
}

// envelope is a Bot API answer.
type envelope struct {
	OK          bool            `json:"ok"`
	Result      json.RawMessage `json:"result"`
	ErrorCode   int             `json:"error_code"`
	Description string          `json:"description"`
	Parameters  struct {
		RetryAfter int `json:"retry_after"`
	} `json:"parameters"`
	status int
}

// callJSON POSTs a method with an application/json body, as the adapter's getUpdates does.
func callJSON(t *testing.T, base, tok, method string, params map[string]any) envelope {
	t.Helper()
	body, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(base+"/bot"+tok+"/"+method, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return readEnvelope(t, resp)
}

func readEnvelope(t *testing.T, resp *http.Response) envelope {
	t.Helper()
	defer resp.Body.Close()
	var e envelope
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("decode answer: %v", err)
	}
	e.status = resp.StatusCode
	if !e.OK && e.status != e.ErrorCode {
		t.Errorf("HTTP status %d, error_code %d: they must be equal", e.status, e.ErrorCode)
	}
	return e
}

// wantError checks an error answer's code and exact description.
func wantError(t *testing.T, e envelope, code int, desc string) {
	t.Helper()
	if e.OK || e.ErrorCode != code || e.Description != desc {
		t.Fatalf("answer = ok %v, %d %q; want %d %q", e.OK, e.ErrorCode, e.Description, code, desc)
	}
}

// getUpdates long-polls as the adapter does (POST application/json).
func getUpdates(t *testing.T, base string, params map[string]any) ([]models.Update, envelope) {
	t.Helper()
	e := callJSON(t, base, token, "getUpdates", params)
	if !e.OK {
		return nil, e
	}
	var ups []models.Update
	if err := json.Unmarshal(e.Result, &ups); err != nil {
		t.Fatalf("decode updates: %v", err)
	}
	return ups, e
}

// getUpdatesAsync long-polls in a goroutine of its own (no t: it may not call FailNow).
func getUpdatesAsync(base string, params map[string]any) <-chan envelope {
	done := make(chan envelope, 1)
	go func() {
		var e envelope
		defer func() { done <- e }()
		body, err := json.Marshal(params)
		if err != nil {
			e.Description = err.Error()
			return
		}
		resp, err := http.Post(base+"/bot"+token+"/getUpdates", "application/json", bytes.NewReader(body))
		if err != nil {
			e.Description = err.Error()
			return
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			e.Description = err.Error()
		}
		e.status = resp.StatusCode
	}()
	return done
}

// eventually polls cond until it holds or 5 seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// clock is a settable clock for SetClock: frozen, moved only by advance.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(s *telegramtest.Server) *clock {
	c := &clock{t: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	s.SetClock(c.now)
	return c
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestSendMessageTextLimits(t *testing.T) {
	w := newWorld(t)
	w.s.SetLimits(noLimits)
	emoji := "\U0001F600" // 2 UTF-16 code units
	tests := []struct {
		name     string
		text     string
		wantText string // stored text; "" when an error is wanted
		wantErr  string
	}{
		{name: "4096 ASCII characters", text: strings.Repeat("a", 4096), wantText: strings.Repeat("a", 4096)},
		{name: "4097 ASCII characters", text: strings.Repeat("a", 4097), wantErr: "Bad Request: message is too long"},
		{name: "2048 emoji are 4096 UTF-16 units", text: strings.Repeat(emoji, 2048), wantText: strings.Repeat(emoji, 2048)},
		{name: "2048 emoji and one letter are 4097 units", text: strings.Repeat(emoji, 2048) + "a", wantErr: "Bad Request: message is too long"},
		{name: "whitespace around 4096 is stripped", text: "\n  " + strings.Repeat("b", 4096) + " \t", wantText: strings.Repeat("b", 4096)},
		{name: "empty", text: "", wantErr: "Bad Request: message text is empty"},
		{name: "whitespace only", text: " \n\t ", wantErr: "Bad Request: message text is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, err := w.client.SendMessage(context.Background(), &bot.SendMessageParams{ChatID: w.private, Text: tt.text})
			if tt.wantErr != "" {
				if !errors.Is(err, bot.ErrorBadRequest) || !strings.HasSuffix(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("SendMessage: %v", err)
			}
			if msg.Text != tt.wantText {
				t.Errorf("returned text has %d bytes, want %d", len(msg.Text), len(tt.wantText))
			}
			got := w.s.Messages(w.private)
			if last := got[len(got)-1]; last.ID != msg.ID || last.Text != tt.wantText || last.From != w.bot.ID {
				t.Errorf("person sees message %d from %d with %d bytes", last.ID, last.From, len(last.Text))
			}
		})
	}
	e := callJSON(t, w.s.URL(), token, "sendMessage", map[string]any{"text": "x"})
	wantError(t, e, 400, "Bad Request: chat_id is empty")
	e = callJSON(t, w.s.URL(), token, "sendMessage", map[string]any{"chat_id": 42, "text": "x"})
	wantError(t, e, 400, "Bad Request: chat not found")
}

func TestEditMessageTextNotModified(t *testing.T) {
	w := newWorld(t)
	w.s.SetLimits(noLimits)
	ctx := context.Background()
	msg, err := w.client.SendMessage(ctx, &bot.SendMessageParams{ChatID: w.private, Text: "draft"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.client.EditMessageText(ctx, &bot.EditMessageTextParams{ChatID: w.private, MessageID: msg.ID, Text: "draft"})
	const notModified = "Bad Request: message is not modified: specified new message content and reply markup are " +
		"exactly the same as a current content and reply markup of the message"
	if !errors.Is(err, bot.ErrorBadRequest) || !strings.HasSuffix(err.Error(), notModified) {
		t.Fatalf("same text: err = %v", err)
	}
	edited, err := w.client.EditMessageText(ctx, &bot.EditMessageTextParams{ChatID: w.private, MessageID: msg.ID, Text: "final"})
	if err != nil {
		t.Fatalf("new text: %v", err)
	}
	if edited.Text != "final" || edited.EditDate == 0 {
		t.Errorf("edited message: text %q edit_date %d", edited.Text, edited.EditDate)
	}
	got := w.s.Messages(w.private)
	if len(got) != 1 || got[0].Text != "final" || got[0].Edits != 1 {
		t.Errorf("person sees %+v, want one message \"final\" edited once", got)
	}
	userMsg := w.s.Post(w.private, w.ann, "mine")
	for _, id := range []int{userMsg, 999} {
		e := callJSON(t, w.s.URL(), token, "editMessageText", map[string]any{"chat_id": w.private, "message_id": id, "text": "x"})
		wantError(t, e, 400, "Bad Request: message to edit not found")
	}
}

func TestSendMessageDraftOnlyInPrivateChats(t *testing.T) {
	w := newWorld(t)
	w.s.SetLimits(noLimits)
	ctx := context.Background()
	group := w.s.AddChat("supergroup", "Team", w.ann.ID)
	_, err := w.client.SendMessageDraft(ctx, &bot.SendMessageDraftParams{ChatID: group, DraftID: "7", Text: "thinking"})
	if !errors.Is(err, bot.ErrorBadRequest) || !strings.HasSuffix(err.Error(), "Bad Request: TEXTDRAFT_PEER_INVALID") {
		t.Fatalf("draft in a supergroup: err = %v", err)
	}
	ok, err := w.client.SendMessageDraft(ctx, &bot.SendMessageDraftParams{ChatID: w.private, DraftID: "7", Text: "thinking"})
	if err != nil || !ok {
		t.Fatalf("draft in a private chat: %v, %v", ok, err)
	}
	e := callJSON(t, w.s.URL(), token, "sendMessageDraft", map[string]any{"chat_id": w.private, "draft_id": 8, "text": "more"})
	if !e.OK || string(e.Result) != "true" {
		t.Fatalf("draft with a JSON number draft_id: %+v", e)
	}
	e = callJSON(t, w.s.URL(), token, "sendMessageDraft", map[string]any{"chat_id": w.private, "draft_id": 9, "text": ""})
	if !e.OK { // Bot API 9.5+: an empty text shows a "Thinking..." placeholder
		t.Fatalf("draft with empty text: %+v", e)
	}
	e = callJSON(t, w.s.URL(), token, "sendMessageDraft", map[string]any{"chat_id": w.private, "draft_id": 0, "text": "x"})
	wantError(t, e, 400, "Bad Request: draft_id must be a non-zero integer")
	drafts := w.s.Drafts(w.private)
	if len(drafts) != 3 || drafts[0].DraftID != "7" || drafts[0].Text != "thinking" || drafts[1].DraftID != "8" || drafts[2].Text != "" {
		t.Errorf("drafts = %+v", drafts)
	}
	if len(w.s.Drafts(group)) != 0 || len(w.s.Messages(w.private)) != 0 {
		t.Error("a refused draft was recorded, or a draft became a message")
	}
}

func TestRateLimitAnswersRetryAfterAndCountsEarlyCalls(t *testing.T) {
	w := newWorld(t)
	clk := newClock(w.s) // frozen: no token refills unless the test moves it
	ctx := context.Background()
	send := func(chat int64) error {
		_, err := w.client.SendMessage(ctx, &bot.SendMessageParams{ChatID: chat, Text: "hi"})
		return err
	}
	for i := range 3 { // the burst
		if err := send(w.private); err != nil {
			t.Fatalf("message %d of the burst: %v", i+1, err)
		}
	}
	err := send(w.private)
	var tooMany *bot.TooManyRequestsError
	if !errors.As(err, &tooMany) || tooMany.RetryAfter != 1 {
		t.Fatalf("4th message: err = %v, want 429 with retry_after 1", err)
	}
	if w.s.EarlyCalls() != 0 {
		t.Fatalf("the call that got the 429 is counted early")
	}
	e := callJSON(t, w.s.URL(), token, "sendChatAction", map[string]any{"chat_id": w.private, "action": "typing"})
	wantError(t, e, 429, "Too Many Requests: retry after 1")
	if e.Parameters.RetryAfter != 1 || w.s.EarlyCalls() != 1 {
		t.Fatalf("call during retry_after: retry_after %d, EarlyCalls %d; want 1, 1", e.Parameters.RetryAfter, w.s.EarlyCalls())
	}
	other := w.s.AddChat("private", "Bob")
	if err := send(other); err != nil {
		t.Fatalf("another chat is limited too: %v", err)
	}
	clk.advance(time.Second)
	if err := send(w.private); err != nil {
		t.Fatalf("after retry_after: %v", err)
	}
	if w.s.EarlyCalls() != 1 {
		t.Errorf("EarlyCalls = %d after waiting retry_after, want 1", w.s.EarlyCalls())
	}
	statuses := func() string {
		var st []int
		for _, c := range w.s.Calls() {
			st = append(st, c.Status)
		}
		return fmt.Sprint(st)
	}
	// A status is recorded once the answer is written: wait for the last one.
	eventually(t, "call statuses [200 200 200 429 429 200 200], have "+statuses(), func() bool {
		return statuses() == "[200 200 200 429 429 200 200]"
	})

	t.Run("20 messages a minute in a group", func(t *testing.T) {
		w.s.SetLimits(telegramtest.Limits{PerChatPerSecond: 1000, GroupPerMinute: 2})
		group := w.s.AddChat("group", "Team")
		for range 2 {
			if err := send(group); err != nil {
				t.Fatal(err)
			}
		}
		err := send(group)
		if !errors.As(err, &tooMany) || tooMany.RetryAfter != 60 {
			t.Fatalf("3rd message in a minute: err = %v, want retry_after 60", err)
		}
		clk.advance(time.Minute)
		if err := send(group); err != nil {
			t.Fatalf("a minute later: %v", err)
		}
	})

	t.Run("injected 429 starts the window", func(t *testing.T) {
		w.s.SetLimits(noLimits)
		before := w.s.EarlyCalls()
		w.s.FailNext("sendMessage", 1, 429, "Too Many Requests: retry after 5", 5)
		if err := send(w.private); !errors.As(err, &tooMany) || tooMany.RetryAfter != 5 {
			t.Fatalf("injected: %v", err)
		}
		clk.advance(4 * time.Second)
		if err := send(w.private); !errors.As(err, &tooMany) || tooMany.RetryAfter != 1 {
			t.Fatalf("4 s into a 5 s window: %v", err)
		}
		if w.s.EarlyCalls() != before+1 {
			t.Errorf("EarlyCalls = %d, want %d", w.s.EarlyCalls(), before+1)
		}
	})
}

func TestGetUpdatesConfirmsByOffset(t *testing.T) {
	w := newWorld(t)
	base := w.s.URL()
	for _, text := range []string{"one", "two", "three"} {
		w.s.Post(w.private, w.ann, text)
	}
	ups, _ := getUpdates(t, base, nil)
	if len(ups) != 3 || ups[0].Message.Text != "one" || ups[2].Message.Text != "three" {
		t.Fatalf("first getUpdates: %d updates", len(ups))
	}
	first := ups[0].ID
	if ups[1].ID != first+1 || ups[2].ID != first+2 {
		t.Fatalf("update ids %d %d %d do not increase by one", ups[0].ID, ups[1].ID, ups[2].ID)
	}
	if m := ups[0].Message; m.From.ID != w.ann.ID || m.Chat.ID != w.private || m.Chat.Type != "private" {
		t.Errorf("message from %d in chat %d (%s)", m.From.ID, m.Chat.ID, m.Chat.Type)
	}
	if again, _ := getUpdates(t, base, nil); len(again) != 3 {
		t.Fatalf("without offset nothing is confirmed: got %d updates, want 3", len(again))
	}
	if rest, _ := getUpdates(t, base, map[string]any{"offset": first + 1}); len(rest) != 2 || rest[0].ID != first+1 {
		t.Fatalf("offset first+1: got %d updates", len(rest))
	}
	if rest, _ := getUpdates(t, base, nil); len(rest) != 2 {
		t.Fatalf("update %d should be forgotten once confirmed: %d pending", first, len(rest))
	}
	if rest, _ := getUpdates(t, base, map[string]any{"offset": first + 3}); len(rest) != 0 || w.s.PendingUpdates(w.bot.ID) != 0 {
		t.Fatalf("offset past the last: got %d, pending %d", len(rest), w.s.PendingUpdates(w.bot.ID))
	}

	for _, text := range []string{"four", "five", "six"} {
		w.s.Post(w.private, w.ann, text)
	}
	if one, _ := getUpdates(t, base, map[string]any{"limit": 1}); len(one) != 1 || one[0].Message.Text != "four" {
		t.Fatalf("limit 1: %d updates", len(one))
	}
	last, _ := getUpdates(t, base, map[string]any{"offset": -1})
	if len(last) != 1 || last[0].Message.Text != "six" || last[0].ID != first+5 {
		t.Fatalf("offset -1: want only the last update")
	}
	if rest, _ := getUpdates(t, base, nil); len(rest) != 1 {
		t.Fatalf("negative offset forgets the earlier updates: %d pending", len(rest))
	}
}

func TestUpdatesOlderThan24HoursAreDropped(t *testing.T) {
	w := newWorld(t)
	clk := newClock(w.s)
	w.s.Post(w.private, w.ann, "old")
	clk.advance(23 * time.Hour)
	w.s.Post(w.private, w.ann, "new")
	clk.advance(time.Hour + time.Second)
	ups, _ := getUpdates(t, w.s.URL(), nil)
	if len(ups) != 1 || ups[0].Message.Text != "new" {
		t.Fatalf("got %d updates, want only the one younger than 24 hours", len(ups))
	}
}

func TestLongPollAndConflicts(t *testing.T) {
	w := newWorld(t)
	base := w.s.URL()

	t.Run("an update ends a long poll", func(t *testing.T) {
		done := getUpdatesAsync(base, map[string]any{"timeout": 10})
		eventually(t, "the long poll", func() bool { return w.s.LongPolling(w.bot.ID) })
		w.s.Post(w.private, w.ann, "wake up")
		e := <-done
		var ups []models.Update
		if !e.OK || json.Unmarshal(e.Result, &ups) != nil || len(ups) != 1 || ups[0].Message.Text != "wake up" {
			t.Fatalf("long poll answered %+v", e)
		}
		getUpdates(t, base, map[string]any{"offset": ups[0].ID + 1})
	})

	t.Run("the timeout ends a long poll with no updates", func(t *testing.T) {
		start := time.Now()
		ups, e := getUpdates(t, base, map[string]any{"timeout": 1})
		if !e.OK || len(ups) != 0 || string(e.Result) != "[]" || time.Since(start) < time.Second {
			t.Fatalf("after %v: %+v", time.Since(start), e)
		}
	})

	t.Run("a second getUpdates terminates the first", func(t *testing.T) {
		done := getUpdatesAsync(base, map[string]any{"timeout": 10})
		eventually(t, "the long poll", func() bool { return w.s.LongPolling(w.bot.ID) })
		if _, e := getUpdates(t, base, nil); !e.OK {
			t.Fatalf("second getUpdates: %+v", e)
		}
		wantError(t, <-done, 409, "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running")
	})

	t.Run("setWebhook terminates a long poll and refuses getUpdates", func(t *testing.T) {
		done := getUpdatesAsync(base, map[string]any{"timeout": 10})
		eventually(t, "the long poll", func() bool { return w.s.LongPolling(w.bot.ID) })
		if ok, err := w.client.SetWebhook(context.Background(), &bot.SetWebhookParams{URL: "http://127.0.0.1:1/hook"}); err != nil || !ok {
			t.Fatalf("setWebhook: %v", err)
		}
		wantError(t, <-done, 409, "Conflict: terminated by setWebhook request")
		_, e := getUpdates(t, base, nil)
		wantError(t, e, 409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first")
		if _, err := w.client.DeleteWebhook(context.Background(), &bot.DeleteWebhookParams{}); err != nil {
			t.Fatal(err)
		}
		if _, e := getUpdates(t, base, nil); !e.OK {
			t.Fatalf("getUpdates after deleteWebhook: %+v", e)
		}
	})
}

func TestWebhookDeliversWithSecretAndRetries(t *testing.T) {
	w := newWorld(t)
	var mu sync.Mutex
	var attempts int
	var got []models.Update
	var secrets []string
	hook := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		attempts++
		if attempts <= 2 {
			http.Error(rw, "not yet", http.StatusInternalServerError)
			return
		}
		var u models.Update
		if err := json.NewDecoder(r.Body).Decode(&u); err != nil {
			t.Errorf("decode update: %v", err)
		}
		got = append(got, u)
		secrets = append(secrets, r.Header.Get("X-Telegram-Bot-Api-Secret-Token"))
	}))
	defer hook.Close()

	ctx := context.Background()
	for _, bad := range []struct{ secret, want string }{
		{"has space", "Bad Request: secret token contains unallowed characters"},
		{strings.Repeat("s", 257), "Bad Request: secret token is too long"},
	} {
		_, err := w.client.SetWebhook(ctx, &bot.SetWebhookParams{URL: hook.URL, SecretToken: bad.secret})
		if !errors.Is(err, bot.ErrorBadRequest) || !strings.HasSuffix(err.Error(), bad.want) {
			t.Fatalf("secret %.10q: err = %v", bad.secret, err)
		}
	}
	if _, err := w.client.SetWebhook(ctx, &bot.SetWebhookParams{URL: hook.URL, SecretToken: "s3cr-et_"}); err != nil {
		t.Fatal(err)
	}
	w.s.Post(w.private, w.ann, "first")
	w.s.Post(w.private, w.ann, "second")
	eventually(t, "two delivered and confirmed updates", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 2 && w.s.PendingUpdates(w.bot.ID) == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if got[0].Message.Text != "first" || got[1].Message.Text != "second" || got[1].ID != got[0].ID+1 {
		t.Errorf("delivered out of order: %q then %q", got[0].Message.Text, got[1].Message.Text)
	}
	for _, sec := range secrets {
		if sec != "s3cr-et_" {
			t.Errorf("X-Telegram-Bot-Api-Secret-Token = %q", sec)
		}
	}
	if n := w.s.WebhookDeliveries(); n != 4 {
		t.Errorf("WebhookDeliveries = %d, want 4 (2 failed, 2 delivered)", n)
	}
	info, err := w.client.GetWebhookInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.URL != hook.URL || info.PendingUpdateCount != 0 || info.LastErrorMessage != "Wrong response from the webhook: 500 Internal Server Error" {
		t.Errorf("webhook info = %+v", info)
	}
}

func TestFileUploadGetFileDownload(t *testing.T) {
	w := newWorld(t)
	w.s.SetLimits(noLimits)
	ctx := context.Background()
	doc := []byte("quarterly numbers\n")
	msg, err := w.client.SendDocument(ctx, &bot.SendDocumentParams{
		ChatID:   w.private,
		Document: &models.InputFileUpload{Filename: "report.txt", Data: bytes.NewReader(doc)},
		Caption:  "the report",
	})
	if err != nil {
		t.Fatalf("sendDocument: %v", err)
	}
	if d := msg.Document; d == nil || d.FileID == "" || d.FileUniqueID == "" || d.FileName != "report.txt" || d.MimeType != "text/plain" || d.FileSize != int64(len(doc)) {
		t.Fatalf("document = %+v", msg.Document)
	}
	if got := download(t, w, msg.Document.FileID); !bytes.Equal(got, doc) {
		t.Errorf("downloaded %q, want %q", got, doc)
	}
	seen := w.s.Messages(w.private)
	if len(seen) != 1 || seen[0].Caption != "the report" || seen[0].File == nil || seen[0].File.Kind != "document" || !bytes.Equal(seen[0].File.Data, doc) {
		t.Errorf("person sees %+v", seen)
	}

	again, err := w.client.SendDocument(ctx, &bot.SendDocumentParams{ChatID: w.private, Document: &models.InputFileString{Data: msg.Document.FileID}})
	if err != nil || again.Document.FileUniqueID != msg.Document.FileUniqueID {
		t.Fatalf("resend by file_id: %v", err)
	}
	_, err = w.client.SendPhoto(ctx, &bot.SendPhotoParams{ChatID: w.private, Photo: &models.InputFileString{Data: msg.Document.FileID}})
	if !errors.Is(err, bot.ErrorBadRequest) {
		t.Errorf("a document's file_id as a photo: err = %v", err)
	}

	e := callJSON(t, w.s.URL(), token, "sendDocument", map[string]any{
		"chat_id": w.private, "document": msg.Document.FileID, "caption": strings.Repeat("c", 1025),
	})
	wantError(t, e, 400, "Bad Request: message caption is too long")
	e = callJSON(t, w.s.URL(), token, "sendDocument", map[string]any{"chat_id": w.private, "document": "nope"})
	wantError(t, e, 400, "Bad Request: wrong file identifier/HTTP URL specified")

	pic := pngBytes(t, 200, 100)
	ph, err := w.client.SendPhoto(ctx, &bot.SendPhotoParams{ChatID: w.private, Photo: &models.InputFileUpload{Filename: "chart.png", Data: bytes.NewReader(pic)}})
	if err != nil {
		t.Fatalf("sendPhoto: %v", err)
	}
	if len(ph.Photo) < 2 {
		t.Fatalf("photo has %d sizes, want at least 2", len(ph.Photo))
	}
	largest := ph.Photo[len(ph.Photo)-1]
	if largest.Width != 200 || largest.Height != 100 || ph.Photo[0].Width >= largest.Width {
		t.Errorf("sizes %+v", ph.Photo)
	}
	if got := download(t, w, largest.FileID); !bytes.Equal(got, pic) {
		t.Error("the largest photo size does not carry the uploaded bytes")
	}
	if thumb := download(t, w, ph.Photo[0].FileID); len(thumb) == 0 {
		t.Error("the small photo size has no bytes")
	}

	resp, err := http.Get(w.s.URL() + "/file/bot999:wrong/documents/file_0.txt")
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, readEnvelope(t, resp), 404, "Not Found")
}

// download runs getFile and fetches the file as the adapter does.
func download(t *testing.T, w *world, fileID string) []byte {
	t.Helper()
	f, err := w.client.GetFile(context.Background(), &bot.GetFileParams{FileID: fileID})
	if err != nil {
		t.Fatalf("getFile: %v", err)
	}
	resp, err := http.Get(w.client.FileDownloadLink(f))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("download: HTTP %d", resp.StatusCode)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != f.FileSize {
		t.Errorf("file_size %d, downloaded %d bytes", f.FileSize, len(data))
	}
	return data
}

func pngBytes(t *testing.T, wd, ht int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, wd, ht))
	for y := range ht {
		for x := range wd {
			img.Set(x, y, color.RGBA{R: uint8(x), G: uint8(y), B: 200, A: 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestGetFileRefusesFilesOver20MB(t *testing.T) {
	w := newWorld(t)
	w.s.PostFile(w.private, w.ann, "document", "", "exact.bin", make([]byte, 20<<20))
	w.s.PostFile(w.private, w.ann, "document", "", "big.bin", make([]byte, 20<<20+1))
	ups, _ := getUpdates(t, w.s.URL(), nil)
	if len(ups) != 2 || ups[0].Message.Document == nil || ups[1].Message.Document == nil {
		t.Fatalf("want 2 document updates, got %d", len(ups))
	}
	if _, err := w.client.GetFile(context.Background(), &bot.GetFileParams{FileID: ups[0].Message.Document.FileID}); err != nil {
		t.Fatalf("20 MB: %v", err)
	}
	_, err := w.client.GetFile(context.Background(), &bot.GetFileParams{FileID: ups[1].Message.Document.FileID})
	if !errors.Is(err, bot.ErrorBadRequest) || !strings.HasSuffix(err.Error(), "Bad Request: file is too big") {
		t.Fatalf("20 MB + 1 byte: err = %v", err)
	}
}

func TestPersonMessagesAsUpdates(t *testing.T) {
	w := newWorld(t)
	group := w.s.AddChat("group", "Team", w.ann.ID)
	first := w.s.Post(group, w.ann, "question")
	w.s.PostReply(group, w.ann, "follow-up", first)
	w.s.PostService(group, w.ann)
	w.s.PostFile(w.private, w.ann, "photo", " look ", "cat.png", pngBytes(t, 40, 30))
	w.s.PostFile(w.private, w.ann, "audio", "", "song.mp3", []byte("ID3"))
	ups, _ := getUpdates(t, w.s.URL(), nil)
	if len(ups) != 5 {
		t.Fatalf("got %d updates, want 5", len(ups))
	}
	if m := ups[0].Message; m.Chat.Type != "group" || m.Chat.Title != "Team" || m.Chat.ID >= 0 {
		t.Errorf("group chat = %+v", m.Chat)
	}
	if r := ups[1].Message.ReplyToMessage; r == nil || r.ID != first || r.Text != "question" {
		t.Errorf("reply_to_message = %+v", r)
	}
	if m := ups[2].Message; m.Text != "" || len(m.NewChatMembers) != 1 || m.NewChatMembers[0].ID != w.ann.ID {
		t.Errorf("service message = %+v", m)
	}
	if m := ups[3].Message; len(m.Photo) < 2 || m.Caption != "look" || m.Photo[len(m.Photo)-1].Width != 40 {
		t.Errorf("photo message: caption %q, %d sizes", m.Caption, len(m.Photo))
	}
	if a := ups[4].Message.Audio; a == nil || a.FileName != "song.mp3" || a.MimeType != "audio/mpeg" {
		t.Errorf("audio = %+v", a)
	}
	super := w.s.AddChat("supergroup", "Big")
	if !strings.HasPrefix(strconv.FormatInt(super, 10), "-100") {
		t.Errorf("supergroup id %d does not start with -100", super)
	}
}

func TestRequestEncodings(t *testing.T) {
	w := newWorld(t)
	w.s.SetLimits(noLimits)
	replyTo := w.s.Post(w.private, w.ann, "hi")
	chat := strconv.FormatInt(w.private, 10)
	reply := fmt.Sprintf(`{"message_id":%d}`, replyTo)
	vals := url.Values{"chat_id": {chat}, "text": {"hello"}, "reply_parameters": {reply}}
	endpoint := w.s.URL() + "/bot" + token + "/SENDMESSAGE" // method names are case-insensitive
	multipartBody := func() (*bytes.Buffer, string) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		for k, v := range vals {
			if err := mw.WriteField(k, v[0]); err != nil {
				t.Fatal(err)
			}
		}
		if err := mw.Close(); err != nil {
			t.Fatal(err)
		}
		return &buf, mw.FormDataContentType()
	}
	tests := []struct {
		name string
		do   func() (*http.Response, error)
	}{
		{"query string", func() (*http.Response, error) { return http.Get(endpoint + "?" + vals.Encode()) }},
		{"form", func() (*http.Response, error) { return http.PostForm(endpoint, vals) }},
		{"json", func() (*http.Response, error) {
			body := fmt.Sprintf(`{"chat_id":%s,"text":"hello","reply_parameters":%s}`, chat, reply)
			return http.Post(endpoint, "application/json", strings.NewReader(body))
		}},
		{"multipart", func() (*http.Response, error) {
			body, ct := multipartBody()
			return http.Post(endpoint, ct, body)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := tt.do()
			if err != nil {
				t.Fatal(err)
			}
			e := readEnvelope(t, resp)
			var m models.Message
			if !e.OK || json.Unmarshal(e.Result, &m) != nil || m.Text != "hello" || m.ReplyToMessage == nil || m.ReplyToMessage.ID != replyTo {
				t.Fatalf("answer %+v", e)
			}
		})
	}
	if c := w.s.Calls(); c[0].Method != "sendMessage" || c[0].ChatID != w.private {
		t.Errorf("recorded call %+v", c[0])
	}
}

func TestAuthAndUnknownMethods(t *testing.T) {
	w := newWorld(t)
	base := w.s.URL()
	wantError(t, callJSON(t, base, "999:unknown", "getMe", nil), 401, "Unauthorized")
	wantError(t, callJSON(t, base, "not-a-token", "getMe", nil), 401, "Unauthorized: invalid token specified")
	wantError(t, callJSON(t, base, token, "sendSticker", nil), 404, "Not Found")
	me, err := w.client.GetMe(context.Background())
	if err != nil || me.ID != w.bot.ID || !me.IsBot || me.Username != "ximd_bot" {
		t.Fatalf("getMe = %+v, %v", me, err)
	}
	chat, err := w.client.GetChat(context.Background(), &bot.GetChatParams{ChatID: w.private})
	if err != nil || chat.Type != "private" || chat.FirstName != "Ann" {
		t.Fatalf("getChat = %+v, %v", chat, err)
	}
	group := w.s.AddChat("group", "Team")
	w.s.RemoveBot(group, w.bot.ID)
	wantError(t, callJSON(t, base, token, "getChat", map[string]any{"chat_id": group}), 400, "Bad Request: chat not found")
	wantError(t, callJSON(t, base, token, "sendMessage", map[string]any{"chat_id": group, "text": "x"}), 403,
		"Forbidden: bot is not a member of the group chat")
	w.s.BlockBot(w.private)
	wantError(t, callJSON(t, base, token, "sendMessage", map[string]any{"chat_id": w.private, "text": "x"}), 403,
		"Forbidden: bot was blocked by the user")
}

func TestReplyToUnknownMessage(t *testing.T) {
	w := newWorld(t)
	w.s.SetLimits(noLimits)
	ctx := context.Background()
	_, err := w.client.SendMessage(ctx, &bot.SendMessageParams{ChatID: w.private, Text: "x", ReplyParameters: &models.ReplyParameters{MessageID: 77}})
	if !errors.Is(err, bot.ErrorBadRequest) || !strings.HasSuffix(err.Error(), "Bad Request: message to be replied not found") {
		t.Fatalf("err = %v", err)
	}
	m, err := w.client.SendMessage(ctx, &bot.SendMessageParams{
		ChatID: w.private, Text: "x", ReplyParameters: &models.ReplyParameters{MessageID: 77, AllowSendingWithoutReply: true},
	})
	if err != nil || m.ReplyToMessage != nil {
		t.Fatalf("allow_sending_without_reply: %v", err)
	}
}

func TestChatActionShowsFiveSecondsOrUntilMessage(t *testing.T) {
	w := newWorld(t)
	w.s.SetLimits(noLimits)
	clk := newClock(w.s)
	ctx := context.Background()
	action := func() {
		t.Helper()
		if _, err := w.client.SendChatAction(ctx, &bot.SendChatActionParams{ChatID: w.private, Action: models.ChatActionTyping}); err != nil {
			t.Fatal(err)
		}
	}
	action()
	if !w.s.Typing(w.private) {
		t.Fatal("no typing after sendChatAction")
	}
	clk.advance(5 * time.Second)
	if w.s.Typing(w.private) {
		t.Fatal("typing still shown after 5 s")
	}
	action()
	if _, err := w.client.SendMessage(ctx, &bot.SendMessageParams{ChatID: w.private, Text: "done"}); err != nil {
		t.Fatal(err)
	}
	if w.s.Typing(w.private) {
		t.Fatal("typing still shown after the bot's message")
	}
	if a := w.s.Actions(w.private); len(a) != 2 || a[0].Action != "typing" {
		t.Errorf("actions = %+v", a)
	}
	e := callJSON(t, w.s.URL(), token, "sendChatAction", map[string]any{"chat_id": w.private, "action": "dancing"})
	wantError(t, e, 400, "Bad Request: wrong parameter action in request")
}

func TestFailNextAndHang(t *testing.T) {
	w := newWorld(t)
	w.s.SetLimits(noLimits)
	ctx := context.Background()
	w.s.FailNext("sendmessage", 1, 502, "Bad Gateway", 0)
	if _, err := w.client.SendMessage(ctx, &bot.SendMessageParams{ChatID: w.private, Text: "a"}); err == nil {
		t.Fatal("injected failure not answered")
	}
	if len(w.s.Messages(w.private)) != 0 {
		t.Fatal("a failed call was applied")
	}
	if _, err := w.client.SendMessage(ctx, &bot.SendMessageParams{ChatID: w.private, Text: "b"}); err != nil {
		t.Fatalf("second call: %v", err)
	}

	w.s.Hang("sendMessage", time.Minute)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := w.client.SendMessage(short, &bot.SendMessageParams{ChatID: w.private, Text: "in doubt"}); err == nil {
		t.Fatal("hung call answered")
	}
	eventually(t, "the hung call to end", func() bool {
		c := w.s.Calls()
		return c[len(c)-1].Status == 0 && len(w.s.Messages(w.private)) == 2
	})
	if got := w.s.Messages(w.private); got[1].Text != "in doubt" {
		t.Errorf("the unanswered call was not applied: %+v", got)
	}
	w.s.Hang("sendMessage", 0)
}
