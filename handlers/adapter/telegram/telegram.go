// Package telegram is the `telegram` target adapter (edge-api §7.2.2): a channel bound to one
// Telegram chat (or one forum topic of it, message_thread_id) through a bot of the Bot API, and
// bots that open a channel for every chat that reaches the token.
//
// Out: a streamed answer is shown as a draft preview in private chats (sendRichMessageDraft, which
// creates no message: the final is one sendRichMessage) or by editing one message in groups
// (sendRichMessage on the first displayed delta, editMessageText with rich_message within the
// chat's budget, the final as the last edit); streaming "none" sends once at the final. Finals
// longer than a rich message holds (32,768 characters, 500 blocks) are split between blocks into
// consecutive messages. Files go out as sendPhoto, sendVideo, sendAudio or sendDocument uploads
// from the Transfer Plane, the text (as plain text) as caption where it fits. "typing" is
// sendChatAction, renewed every 4 s while a status is shown. Replies use reply_parameters.
//
// Markdown (edge-api §7.3): the agent's text is a rich message (Bot API 10.1), its Markdown as
// written (Telegram shows headings, lists, tables and code itself), with what Telegram's rich
// Markdown reads beyond CommonMark escaped (markdown.Doc.TelegramRich: raw HTML, images, "$" formulas). On a
// definite refusal (a 400 with Telegram's rich-message or entity-parsing description, or a 404
// from a server without rich messages; never a timeout) the same text is sent once in the next
// simpler form: the HTML parse mode with Telegram's tags (markdown.Telegram: headings as bold
// lines, lists as "•"/"1." lines, tables in <pre>), split at 4,096 characters, then plain text.
// Each fall-back is counted (ximd_render_fallbacks_total{adapter="telegram",reason}: rich_refused,
// rich_unsupported, html_refused) and logged; a streamed message or draft keeps the form that
// worked, and a server without rich messages gets HTML first from then on. A person's formatting
// entities reach xAgent as the same Markdown (markdownOf).
//
// In: getUpdates long polling (default; one loop per bot across all channels of that bot, the
// offset persisted in KV xim_cursors), or Telegram's webhook calls to
// POST /v1/targets/telegram/{channel}/updates (setWebhook at PUT, the secret token compared in
// constant time). A message's message_id is derived from its chat and message id, so an update
// read twice is one message.
//
// Bots (edge-api §4.1): a bot's config is a channel's without chat_id and message_thread_id
// (Bind adds them for each conversation; ProbeBot checks the token with getMe). The bot shares
// its token's getUpdates loop, or webhook (POST /v1/targets/telegram/bots/{bot_id}/updates),
// with the token's channels: a chat or forum topic a channel PUT binds goes to that channel, any
// other goes to the bot's policy (Admit). A private chat is direct, a group or supergroup a
// group, a forum topic a thread under scope "thread"; keys are the chat id ("-100…" kept) and
// "<chat id>_<message_thread_id>". A mention is a "mention" entity of the bot's username, a
// "text_mention" of its user, a /command@username or a reply to the bot; it is removed from the
// text. Messages of bots (is_bot) are refused from_bot.
//
// Limits: no call to a chat before a 429's retry_after has passed; messages and edits within the
// chat's budget (edits_per_minute: 60 in private chats, 20 in groups by default); previews
// cut at what a message of their form holds. In doubt (a crash, or a timeout after the request was sent): a
// streamed message is settled by editing it; a direct final is answered delivery_outcome_unknown,
// because Telegram has no idempotency key. docs/adapters/telegram.md says all of it.
//
// The Bot API methods are called through github.com/go-telegram/bot. Three parts are not, and
// say why: getUpdates, which the library does not export (its own polling loop confirms updates
// before they are handled, which a crash would lose); file downloads, which it only names by
// URL; and the rich message methods (sendRichMessage, sendRichMessageDraft, editMessageText with
// rich_message), which v1.19.0, the newest version the module proxy serves here, does not have
// (v1.22.0 does) and whose raw request it does not export (account.raw: a JSON call whose
// errors are the library's). All are plain HTTP calls on the same client.
package telegram

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// Name is the adapter's name in a channel's target binding.
const Name = "telegram"

// Limits and timings (docs/adapters/telegram.md, Bot API "sendMessage", "sendChatAction",
// "getFile", "Sending files").
const (
	// MaxTextLength is the most characters a rich message holds (Bot API 10.1 "Rich Message
	// Limits"; counted in UTF-16 code units of its Markdown), MaxRichBlocks the most blocks
	// (list items and table rows included) and MaxRichColumns the most table columns.
	MaxTextLength  = 32768
	MaxRichBlocks  = 500
	MaxRichColumns = 20
	// MaxPlainTextLength is the most characters a message in HTML or plain text holds, after
	// entity parsing (Telegram counts UTF-16 code units): the fall-back forms.
	MaxPlainTextLength = 4096
	// MaxCaptionLength is the most characters a file's caption holds.
	MaxCaptionLength = 1024
	// TypingRenewal: a chat action shows for 5 s; it is sent again this often while a status
	// is shown.
	TypingRenewal = 4 * time.Second
	// MaxDownload is the largest file the Bot API lets a bot download (getFile).
	MaxDownload = 20 << 20
	// MaxUpload is the largest file a bot can send; MaxPhotoUpload the largest photo.
	MaxUpload      = 50 << 20
	MaxPhotoUpload = 10 << 20
	// PollTimeout is how long one getUpdates long poll waits for news.
	PollTimeout = 25 * time.Second
	// DraftRenewal: a draft is a 30-second preview; while an answer pauses, its draft is sent
	// again this long after the last one.
	DraftRenewal = 20 * time.Second
)

// Options configure the adapter.
type Options struct {
	// Common: the logger, the HTTP client (default: keep-alive, no overall timeout: the long
	// polls bound their own) and the file source of a final's files (required for files out).
	adapter.Common
	// PublicURL is XIM_PUBLIC_URL: the base of the webhook URL given to setWebhook for a
	// channel with "inbound": "webhook" (such a channel cannot be bound without it).
	PublicURL string
	// PollTimeout is how long one getUpdates long poll waits. Default PollTimeout.
	PollTimeout time.Duration
}

// Adapter binds channels to Telegram chats. One client per bot (API server and token) is shared
// by every channel of that bot, with each chat's budget and rate-limit pause. Its Public shows a
// config without the token and the webhook secret; Open makes no call (Probe checks the config
// against Telegram).
type Adapter struct {
	adapter.Platform[*config, publicConfig, *account]
	opts Options // PublicURL and PollTimeout
}

// New returns the adapter.
func New(opts Options) *Adapter {
	opts.PollTimeout = adapter.OrDefault(opts.PollTimeout, PollTimeout)
	opts.PublicURL = strings.TrimRight(opts.PublicURL, "/")
	a := &Adapter{opts: opts}
	a.Init(Name, opts.Common, 0, parseConfig, (*config).public, a.open)
	return a
}

func (a *Adapter) open(c *config) (adapter.Target, error) {
	return &Target{a: a, acc: a.account(c), cfg: c}, nil
}

// Probe implements adapter.Prober: the token is valid (getMe), the bot is in the chat
// (getChat), a draft-streamed chat is private; with "inbound": "webhook" it sets the bot's
// webhook to the channel's route, and with polling it removes a webhook left set, since
// Telegram refuses getUpdates while one is.
func (a *Adapter) Probe(ctx context.Context, ch adapter.Channel) error {
	c, err := parseConfig(ch.Target.Config)
	if err != nil {
		return err
	}
	acc := a.account(c)
	var me *models.User
	if err := acc.call(ctx, "getMe", 0, func(ctx context.Context) (err error) { me, err = acc.bot.GetMe(ctx); return err }); err != nil {
		return refused("token", err)
	}
	if !me.IsBot {
		return profile.Errorf(profile.CodeTargetConfigInvalid, "telegram: the token is not a bot's")
	}
	var chat *models.ChatFullInfo
	if err := acc.call(ctx, "getChat", 0, func(ctx context.Context) (err error) {
		chat, err = acc.bot.GetChat(ctx, &bot.GetChatParams{ChatID: c.chatID})
		return err
	}); err != nil {
		return refused("chat_id", err)
	}
	if c.streaming == adapter.StreamingDraft && chat.Type != models.ChatTypePrivate {
		return profile.Errorf(profile.CodeTargetConfigInvalid, `telegram: chat %d is a %s: "draft" streaming works in private chats only`, c.chatID, chat.Type)
	}
	return a.setInbound(ctx, acc, c, ch.ID)
}

// setInbound points the bot's updates where c takes them: with "inbound": "webhook" it sets the
// bot's webhook to POST /v1/targets/telegram/{route}/updates (route: a channel's id, or
// "bots/{bot_id}") with c's secret; with polling it removes a webhook left set, since Telegram
// refuses getUpdates while one is.
func (a *Adapter) setInbound(ctx context.Context, acc *account, c *config, route string) error {
	switch c.inbound {
	case InboundWebhook:
		if a.opts.PublicURL == "" {
			return profile.Errorf(profile.CodeTargetConfigInvalid, `telegram: "inbound": "webhook" needs XIM_PUBLIC_URL, the address Telegram calls`)
		}
		hook := a.opts.PublicURL + "/v1/targets/" + Name + "/" + route + "/updates"
		if err := acc.call(ctx, "setWebhook", 0, func(ctx context.Context) error {
			_, err := acc.bot.SetWebhook(ctx, &bot.SetWebhookParams{URL: hook, SecretToken: c.webhookSecret, AllowedUpdates: []string{"message"}})
			return err
		}); err != nil {
			return refused("webhook", err)
		}
	case InboundPolling:
		if err := acc.call(ctx, "deleteWebhook", 0, func(ctx context.Context) error {
			_, err := acc.bot.DeleteWebhook(ctx, &bot.DeleteWebhookParams{})
			return err
		}); err != nil {
			return refused("webhook", err)
		}
	}
	return nil
}

// refused is a probe's failure: target_config_invalid naming what was refused.
func refused(what string, err error) error {
	pe := profile.AsError(err)
	return profile.Errorf(profile.CodeTargetConfigInvalid, "telegram refused the %s: %s", what, pe.Message)
}

// account is one bot's client, shared by the channels of that bot.
type account struct {
	key    string
	apiURL string
	token  string
	botID  int64
	bot    *bot.Bot
	http   *http.Client
	log    *slog.Logger

	mu       sync.Mutex
	username string // the bot's, once getMe told it (identity)
	chats    map[int64]*chatState
	noRich   bool                 // the server has no rich messages (it answered 404): HTML first
	sent     map[string]*sentText // what was sent of a final, a streamed message or a draft
	order    []string             // sent keys, oldest first (bounded)
}

// chatState is what the bot knows of one chat's limits.
type chatState struct {
	until time.Time // no call before (a 429's retry_after)
	next  time.Time // the next message or edit within the chat's budget
}

// maxSentKeys bounds the finals, streamed messages and drafts whose form and progress an
// account remembers.
const maxSentKeys = 4096

func (a *Adapter) account(c *config) *account {
	return a.Accounts.Get(c.botKey(), func() *account { return a.newAccount(c) })
}

// newAccount makes the client of c's bot.
func (a *Adapter) newAccount(c *config) *account {
	hc := a.HTTPClient
	acc := &account{key: c.botKey(), apiURL: c.apiURL, token: c.token, botID: c.botID(), http: hc, log: a.Logger,
		chats: map[int64]*chatState{}, sent: map[string]*sentText{}}
	b, err := bot.New(c.token, bot.WithServerURL(c.apiURL), bot.WithSkipGetMe(), bot.WithHTTPClient(a.opts.PollTimeout, tracingClient{hc}),
		bot.WithErrorsHandler(func(err error) { acc.log.Debug("telegram_client_error", "err", err) }))
	if err != nil {
		panic(fmt.Sprintf("telegram: bot.New with a validated token: %v", err)) // only an empty token fails
	}
	acc.bot = b
	return acc
}

// callInfo is what the HTTP client saw of one call: whether the request was written, and the
// answer's status.
type callInfo struct {
	wrote  bool
	status int
}

type callInfoKey struct{}

// tracingClient records, for the call whose context carries a *callInfo, whether the request was
// written and the answer's status: the library's errors do not tell a 502 from a 500, nor a
// refused connection (certain) from a timeout after sending (ambiguous).
type tracingClient struct{ c *http.Client }

func (t tracingClient) Do(req *http.Request) (*http.Response, error) {
	info, _ := req.Context().Value(callInfoKey{}).(*callInfo)
	if info != nil {
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { info.wrote = true },
		}))
	}
	resp, err := t.c.Do(req)
	if info != nil && resp != nil {
		info.status = resp.StatusCode
	}
	return resp, err
}

// call runs one Bot API method for chat (0: none). While the chat's retry_after runs it makes no
// call and answers a RetryAfterError; a failure is mapped to its ack code (edge-api §7.2.2).
func (acc *account) call(ctx context.Context, method string, chat int64, fn func(ctx context.Context) error) error {
	if wait := acc.paused(chat); wait > 0 {
		return &adapter.RetryAfterError{After: wait, Err: profile.Errorf(profile.CodeTargetRateLimited, "telegram %s: the chat is rate-limited", method)}
	}
	info := &callInfo{}
	err := fn(context.WithValue(ctx, callInfoKey{}, info))
	if err == nil {
		return nil
	}
	return acc.mapErr(ctx, method, chat, info, err)
}

// mapErr maps a failed call to its ack code: 429 -> target_rate_limited (with the retry time,
// which pauses the chat), 401 -> target_auth_failed, other 4xx (chat not found, bot blocked)
// -> target_delivery_failed, 5xx, timeouts and network failures -> target_unavailable (ambiguous
// when the request was sent and no answer came).
func (acc *account) mapErr(ctx context.Context, method string, chat int64, info *callInfo, err error) error {
	var tm *bot.TooManyRequestsError
	if errors.As(err, &tm) {
		after := time.Duration(max(tm.RetryAfter, 1)) * time.Second
		acc.pause(chat, after)
		return &adapter.RetryAfterError{After: after, Err: profile.Errorf(profile.CodeTargetRateLimited, "telegram %s: too many requests, retry after %s", method, after)}
	}
	desc := describe(err)
	switch {
	case info.status == http.StatusUnauthorized || errors.Is(err, bot.ErrorUnauthorized):
		return profile.Errorf(profile.CodeTargetAuthFailed, "telegram %s: the bot token was refused (401)", method)
	case info.status >= 400 && info.status < 500:
		return &platformError{status: info.status, desc: desc, err: profile.Errorf(profile.CodeTargetDeliveryFailed, "telegram %s: %s", method, desc)}
	case info.status >= 500:
		return profile.Errorf(profile.CodeTargetUnavailable, "telegram %s: server error %d", method, info.status)
	case info.status == 0 && !info.wrote && ctx.Err() == nil:
		return profile.Errorf(profile.CodeTargetUnavailable, "telegram %s: unreachable: %s", method, desc) // certain: nothing was sent
	default:
		// Sent, and no usable answer (a timeout, a reset, a garbled body): applied or not.
		return &adapter.AmbiguousError{Err: profile.Errorf(profile.CodeTargetUnavailable, "telegram %s: no answer: %s", method, desc)}
	}
}

// describe is an error's text without the library's prefixes; the library already replaces the
// token in URLs with ***.
func describe(err error) string {
	s := err.Error()
	for _, p := range []string{"bad request, ", "forbidden, ", "not found, ", "conflict, "} {
		if i := strings.Index(s, p); i >= 0 {
			return s[i+len(p):]
		}
	}
	return s
}

func (acc *account) chat(id int64) *chatState {
	cs, ok := acc.chats[id]
	if !ok {
		cs = &chatState{}
		acc.chats[id] = cs
	}
	return cs
}

// paused is how long the chat's retry_after still runs.
func (acc *account) paused(chat int64) time.Duration {
	if chat == 0 {
		return 0
	}
	acc.mu.Lock()
	defer acc.mu.Unlock()
	return time.Until(acc.chat(chat).until)
}

func (acc *account) pause(chat int64, d time.Duration) {
	if chat == 0 {
		return
	}
	acc.mu.Lock()
	defer acc.mu.Unlock()
	cs := acc.chat(chat)
	if until := time.Now().Add(d); until.After(cs.until) {
		cs.until = until
	}
}

// budget takes the chat's next slot for a message or an edit, interval apart. A final waits for
// it; a preview that would have to wait is answered a RetryAfterError instead (the display
// stretches, nothing is sent).
func (acc *account) budget(ctx context.Context, chat int64, interval time.Duration, wait bool) error {
	acc.mu.Lock()
	cs := acc.chat(chat)
	now := time.Now()
	at := now
	if cs.next.After(now) {
		at = cs.next
	}
	if !wait && at.After(now) {
		acc.mu.Unlock()
		return &adapter.RetryAfterError{After: at.Sub(now), Err: profile.Errorf(profile.CodeTargetRateLimited, "telegram: the chat's edit budget is spent")}
	}
	cs.next = at.Add(interval)
	acc.mu.Unlock()
	if d := at.Sub(now); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return profile.Errorf(profile.CodeTargetUnavailable, "telegram: waiting for the chat's budget: %v", ctx.Err())
		}
	}
	return nil
}

// Target is one channel's chat.
type Target struct {
	a   *Adapter
	acc *account
	cfg *config
}

var (
	_ adapter.Target         = (*Target)(nil)
	_ adapter.Editor         = (*Target)(nil)
	_ adapter.Drafter        = (*Target)(nil)
	_ adapter.ActivityShower = (*Target)(nil)
	_ adapter.Prober         = (*Adapter)(nil)
)

// Capabilities implements adapter.Target.
func (t *Target) Capabilities() adapter.Capabilities {
	c := adapter.Capabilities{Streaming: t.cfg.streaming, Activity: t.cfg.activity, Reply: adapter.ReplyNative,
		InDoubt: adapter.InDoubtUnknown, MaxTextLength: MaxTextLength, FirstPreviewWords: t.cfg.firstWords, ActivityRenewal: TypingRenewal}
	switch t.cfg.streaming {
	case adapter.StreamingEdit:
		c.InDoubt = adapter.InDoubtEdit
		c.MinEditInterval = t.cfg.interval()
	case adapter.StreamingDraft:
		c.PreviewRenewal = DraftRenewal
	}
	return c
}

func (t *Target) reply(replyTo string) *models.ReplyParameters {
	id, err := strconv.Atoi(replyTo)
	if replyTo == "" || err != nil {
		return nil
	}
	// A reply to a message deleted meanwhile is still sent, as a plain message.
	return &models.ReplyParameters{MessageID: id, AllowSendingWithoutReply: true}
}

// sendFile uploads one file from the Transfer Plane with the method its kind takes (a photo
// too large or of a type Telegram does not show as a photo goes as a document).
func (t *Target) sendFile(ctx context.Context, f adapter.File, caption, replyTo string) (int, error) {
	if t.a.Files == nil {
		return 0, profile.Errorf(profile.CodeTargetDeliveryFailed, "telegram: no file store to read %s from", f.FileRef)
	}
	if f.ByteSize > MaxUpload {
		return 0, profile.Errorf(profile.CodeTargetDeliveryFailed, "telegram: %s is %d bytes; a bot can send at most %d", f.Filename, f.ByteSize, MaxUpload)
	}
	method := methodFor(f)
	var msg *models.Message
	err := t.acc.call(ctx, method, t.cfg.chatID, func(ctx context.Context) error {
		_, rc, err := t.a.Files.Open(ctx, f.FileRef)
		if err != nil {
			return err
		}
		defer rc.Close()
		// The library calls reflect IsNil on Data, which panics on a non-pointer reader.
		up := &models.InputFileUpload{Filename: f.Filename, Data: &reader{rc}}
		chat, topic, reply := t.cfg.chatID, t.cfg.threadID, t.reply(replyTo)
		switch method {
		case "sendPhoto":
			msg, err = t.acc.bot.SendPhoto(ctx, &bot.SendPhotoParams{ChatID: chat, MessageThreadID: topic, Photo: up, Caption: caption, ReplyParameters: reply})
		case "sendVideo":
			msg, err = t.acc.bot.SendVideo(ctx, &bot.SendVideoParams{ChatID: chat, MessageThreadID: topic, Video: up, Caption: caption, ReplyParameters: reply})
		case "sendAudio":
			msg, err = t.acc.bot.SendAudio(ctx, &bot.SendAudioParams{ChatID: chat, MessageThreadID: topic, Audio: up, Caption: caption, ReplyParameters: reply})
		default:
			msg, err = t.acc.bot.SendDocument(ctx, &bot.SendDocumentParams{ChatID: chat, MessageThreadID: topic, Document: up, Caption: caption, ReplyParameters: reply})
		}
		return err
	})
	var pe *profile.Error
	if errors.As(err, &pe) && pe.Code == profile.CodeFileNotFound {
		return 0, pe
	}
	if err != nil {
		return 0, err
	}
	return msg.ID, nil
}

// reader is an io.Reader behind a pointer (see sendFile).
type reader struct{ io.Reader }

// methodFor picks the send method of a file: photos Telegram shows as photos (JPEG, PNG, WebP
// up to 10 MB), MPEG-4 videos, MP3 and M4A audio; everything else as a document.
func methodFor(f adapter.File) string {
	mime := strings.ToLower(f.MimeType)
	switch {
	case f.Type == "image" && (mime == "image/jpeg" || mime == "image/png" || mime == "image/webp") && f.ByteSize <= MaxPhotoUpload:
		return "sendPhoto"
	case f.Type == "video" && mime == "video/mp4":
		return "sendVideo"
	case f.Type == "audio" && (mime == "audio/mpeg" || mime == "audio/mp4" || mime == "audio/x-m4a"):
		return "sendAudio"
	}
	return "sendDocument"
}

// draftID is a message's draft id: non-zero, the same for every draft of the message.
func draftID(key string) int64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int64(h.Sum32()>>1) + 1
}

// ShowActivity implements adapter.ActivityShower: "typing" by sendChatAction (it shows for 5 s;
// the stage renews it every TypingRenewal). Telegram has no call to stop it: idle sends
// nothing, and the indicator ends by itself or with the bot's next message.
func (t *Target) ShowActivity(ctx context.Context, a adapter.Activity) error {
	if a.Status == adapter.StatusIdle {
		return nil
	}
	p := &bot.SendChatActionParams{ChatID: t.cfg.chatID, MessageThreadID: t.cfg.threadID, Action: models.ChatActionTyping}
	return t.acc.call(ctx, "sendChatAction", t.cfg.chatID, func(ctx context.Context) error { _, err := t.acc.bot.SendChatAction(ctx, p); return err })
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if l := utf16.RuneLen(r); l > 0 {
			n += l
		} else {
			n++ // an invalid byte, sent as U+FFFD
		}
	}
	return n
}

// download fetches a file Telegram stores (getFile gave its path); the URL holds the token, so
// no error names it.
func (acc *account) download(ctx context.Context, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, acc.apiURL+"/file/bot"+acc.token+"/"+path, nil)
	if err != nil {
		return nil, profile.Errorf(profile.CodeFileDownloadFailed, "telegram: bad file path")
	}
	resp, err := acc.http.Do(req)
	if err != nil {
		return nil, profile.Errorf(profile.CodeTargetUnavailable, "telegram file download failed: %v", errors.Unwrap(err))
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			return nil, profile.Errorf(profile.CodeTargetUnavailable, "telegram file download: server error %d", resp.StatusCode)
		}
		return nil, profile.Errorf(profile.CodeFileDownloadFailed, "telegram file download: status %d", resp.StatusCode)
	}
	return resp.Body, nil
}
