// Package feishu is the `feishu` target adapter (edge-api §7.2.3): a channel bound to one
// Feishu/Lark chat through a custom app's bot, or a bot bound to the whole app.
//
// Out: a streamed answer is one CardKit card in streaming mode whose markdown element is
// updated with the whole text and a strictly increasing sequence (Feishu animates the new part
// like a typewriter), and whose streaming is closed at the final with the final text; streaming
// "none" sends one card at the final. A card's markdown element holds the agent's Markdown in the
// card's form (at most CardTables tables); a card Feishu refuses for its content goes as a plain
// post instead (render.go); a person's post comes in as Markdown. Every message is sent with a uuid derived from
// the idempotency key and part, which Feishu keeps for an hour: a send repeated within it shows
// nothing new, so a delivery a crash left in doubt is sent again instead of being answered
// delivery_outcome_unknown. Finals whose Markdown is longer than MaxTextLength are split; files go out through
// the image and file upload APIs; replies through the reply API.
//
// In: Feishu's event calls to POST /v1/targets/feishu/{channel}/events (URL verification, the
// X-Lark-Signature check, encrypt_key decryption), each im.message.receive_v1 of a person
// becoming a user message of the channel of its chat, its image or file copied in through the
// message resource API. The message_id is derived from Feishu's message id, so an event
// delivered again is a duplicate.
//
// Bots (edge-api §4.1, bot.go): a bot binds the app (a config without chat_id, with encrypt_key
// or verification_token) and its events come to POST /v1/targets/feishu/bots/{bot_id}/events,
// checked and opened as the channel route's, an event_id handled already ignored. A p2p chat is
// a direct conversation, a group chat a group, keyed by the chat_id; a message mentions the bot
// when the bot's open_id (GET /open-apis/bot/v3/info, fetched once per app) is among its
// mentions, and that @_user_N is removed from the text (other people's written as their names);
// a sender that is not a person (sender_type other than "user") is a bot, never passed on. A chat
// a channel PUT of the same app binds gets its messages on that channel. The PUT's probe fetches
// the tenant access token and the bot's information.
//
// The official Go SDK (github.com/larksuite/oapi-sdk-go) is not available from the module
// proxy here, so the client is a small typed one on net/http (client.go): the tenant access
// token fetched and refreshed before expiry (and once more when a call is refused with an
// invalid token), rate limits and their reset time honoured per chat and per app.
package feishu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/markdown"
	"github.com/ximd/ximd/profile"
)

// Name is the adapter's name in a channel's target binding.
const Name = "feishu"

// Limits and timings (docs/adapters/feishu.md).
const (
	// MaxTextLength is the most characters one message or card holds: a card's JSON is at most
	// 30 KB, a text message's body 150 KB; 7,000 characters of three-byte UTF-8 fit a card.
	MaxTextLength = 7000
	// UUIDWindow is how long Feishu remembers a send's uuid.
	UUIDWindow = time.Hour
	// CardUpdateInterval spaces the operations on one card entity, which takes at most 10 a
	// second (a little more than 100 ms, for the clocks' jitter).
	CardUpdateInterval = 110 * time.Millisecond
	// SendInterval paces the messages sent to one chat (Feishu: 5 a second to one chat).
	SendInterval = 200 * time.Millisecond
	// MaxImageUpload and MaxFileUpload are the upload APIs' limits.
	MaxImageUpload = 10 << 20
	MaxFileUpload  = 30 << 20
	// elementID is the streamed markdown element of ximd's cards.
	elementID = "answer"
)

// Options configure the adapter.
type Options struct {
	// Common: the logger, the HTTP client (default: keep-alive, a 30 s timeout) and the file
	// source of a final's files (required for files out).
	adapter.Common
	// SignatureWindow bounds how far an event's X-Lark-Request-Timestamp may be from now.
	// Default 5 minutes.
	SignatureWindow time.Duration
}

// Adapter binds channels to Feishu chats. One client per app (base URL, App ID and secret) is
// shared by every channel of that app. Its Public shows a config without the app secret, the
// verification token and the encrypt key; Open makes no call (Probe checks the config against
// Feishu).
type Adapter struct {
	adapter.Platform[*config, publicConfig, *app]
	window time.Duration   // Options.SignatureWindow
	events *adapter.Recent // the events a bot's route handled, by app and event_id
}

// New returns the adapter.
func New(opts Options) *Adapter {
	a := &Adapter{window: adapter.OrDefault(opts.SignatureWindow, adapter.DefaultSignatureWindow), events: adapter.NewRecent(recentEventsKept)}
	a.Init(Name, opts.Common, 30*time.Second, parseConfig, (*config).public, a.open)
	return a
}

func (a *Adapter) open(c *config) (adapter.Target, error) {
	return &Target{a: a, app: a.app(c), cfg: c}, nil
}

func (a *Adapter) app(c *config) *app {
	return a.Accounts.Get(c.appKey(), func() *app {
		return &app{base: c.baseURL, id: c.appID, secret: c.appSecret, http: a.HTTPClient,
			until: map[string]time.Time{}, next: map[string]time.Time{}, seq: map[string]int{}, titles: map[string]string{}}
	})
}

var (
	_ adapter.Target   = (*Target)(nil)
	_ adapter.Editor   = (*Target)(nil)
	_ adapter.Prober   = (*Adapter)(nil)
	_ adapter.Receiver = (*Adapter)(nil)
)

// Probe implements adapter.Prober: the app's credentials give a tenant access token, and the
// app's bot is in the chat.
func (a *Adapter) Probe(ctx context.Context, ch adapter.Channel) error {
	c, err := parseConfig(ch.Target.Config)
	if err != nil {
		return err
	}
	ap := a.app(c)
	if _, err := ap.tokenFor(ctx, ""); err != nil {
		return profile.Errorf(profile.CodeTargetConfigInvalid, "feishu refused the app: %s", profile.AsError(err).Message)
	}
	if err := ap.do(ctx, request{method: http.MethodGet, path: "/open-apis/im/v1/chats/" + pathEscape(c.chatID)}, nil); err != nil {
		return profile.Errorf(profile.CodeTargetConfigInvalid, "feishu refused the chat (is the app's bot in it?): %s", profile.AsError(err).Message)
	}
	return nil
}

// Target is one channel's chat.
type Target struct {
	a   *Adapter
	app *app
	cfg *config
}

// Capabilities implements adapter.Target: streaming edit (a card) or none, no activity, native
// replies, in-doubt dedupe within the uuid's hour.
func (t *Target) Capabilities() adapter.Capabilities {
	c := adapter.Capabilities{Streaming: adapter.StreamingNone, Activity: adapter.ActivityNone, Reply: adapter.ReplyNative,
		InDoubt: adapter.InDoubtDedupe, InDoubtWindow: UUIDWindow, MaxTextLength: MaxTextLength, FirstPreviewWords: t.cfg.firstWords}
	if t.cfg.streaming == StreamingCard {
		c.Streaming = adapter.StreamingEdit
		c.MinEditInterval = CardUpdateInterval
	}
	return c
}

// uuid is a send's Feishu uuid: a digest of the idempotency key, the kind and the part, so the
// same part of the same message always has the same one (at most 50 characters).
func uuid(key, kind string, part int) string {
	sum := sha256.Sum256([]byte(key + "\x00" + kind + "\x00" + strconv.Itoa(part)))
	return hex.EncodeToString(sum[:16])
}

// cardHandle is the target message id of a streamed card: the message id, the card id and the
// card's creation time (the base of its sequence), joined by ':'.
type cardHandle struct {
	messageID, cardID string
	created           time.Time
}

func (h cardHandle) String() string {
	return h.messageID + ":" + h.cardID + ":" + strconv.FormatInt(h.created.UnixMilli(), 10)
}

func parseHandle(id string) (cardHandle, bool) {
	parts := strings.Split(id, ":")
	if len(parts) != 3 {
		return cardHandle{}, false
	}
	ms, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return cardHandle{}, false
	}
	return cardHandle{messageID: parts[0], cardID: parts[1], created: time.UnixMilli(ms)}, true
}

// messageOf is the Feishu message id in a target message id (a card's handle, or a message id).
func messageOf(id string) string {
	m, _, _ := strings.Cut(id, ":")
	return m
}

// Send implements adapter.Sender: the first streamed part as a streaming card, or a final as text
// messages (split) and its files. Every send carries its uuid.
func (t *Target) Send(ctx context.Context, m adapter.Message) (string, error) {
	if !m.Final {
		return t.openCard(ctx, m)
	}
	ids, err := t.sendFinal(ctx, m, splitText(m.Text), 0, m.ReplyTo)
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// openCard creates a card entity in streaming mode showing the text so far and sends it.
func (t *Target) openCard(ctx context.Context, m adapter.Message) (string, error) {
	created := time.Now()
	var cr struct {
		CardID string `json:"card_id"`
	}
	err := t.app.do(ctx, request{method: http.MethodPost, path: "/open-apis/cardkit/v1/cards", chat: t.cfg.chatID,
		json: map[string]any{"type": "card_json", "data": cardJSON(truncate(m.Text), true)}}, &cr)
	if cardRefused(err) {
		// A preview Feishu will not show as a card waits for the final, which goes as a direct
		// final does (a card, or its plain fall-back).
		return cardHandle{created: created}.String(), nil
	}
	if err != nil {
		return "", err
	}
	content, _ := json.Marshal(map[string]any{"type": "card", "data": map[string]string{"card_id": cr.CardID}})
	id, err := t.sendMessage(ctx, "interactive", string(content), uuid(m.IdempotencyKey, "card", 0), m.ReplyTo)
	if err != nil {
		return "", err
	}
	return cardHandle{messageID: id, cardID: cr.CardID, created: created}.String(), nil
}

// Edit implements adapter.Editor: the card's text so far (streamed: Feishu types out what is
// new), or its final text with streaming closed, then the text's further parts and the files as
// messages after it. A card whose streaming closed by itself (Feishu closes it 10 minutes after
// it opened) is updated whole instead.
func (t *Target) Edit(ctx context.Context, targetMessageID string, m adapter.Message) error {
	h, ok := parseHandle(targetMessageID)
	if !ok {
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "feishu: %q is not a card of ximd's", targetMessageID)
	}
	parts := splitText(m.Text)
	if h.cardID == "" { // no card: its preview was refused
		if !m.Final {
			return nil
		}
		_, err := t.sendFinal(ctx, adapter.Message{Text: m.Text, Files: m.Files, IdempotencyKey: m.IdempotencyKey}, parts, 0, "")
		return err
	}
	text := truncate(m.Text)
	if m.Final {
		text = parts[0]
	}
	cardPath := "/open-apis/cardkit/v1/cards/" + pathEscape(h.cardID)
	op := func(r request) error { // each operation on the card within its rate
		if err := t.app.pace(ctx, "card:"+h.cardID, CardUpdateInterval); err != nil {
			return err
		}
		return t.app.do(ctx, r, nil)
	}
	content := func(c string) error {
		return op(request{method: http.MethodPut, path: cardPath + "/elements/" + elementID + "/content", chat: t.cfg.chatID,
			json: map[string]any{"content": c, "sequence": t.app.nextSeq(h.cardID, h.created)}})
	}
	whole := func(data string) error {
		return op(request{method: http.MethodPut, path: cardPath, chat: t.cfg.chatID,
			json: map[string]any{"card": map[string]any{"type": "card_json", "data": data}, "sequence": t.app.nextSeq(h.cardID, h.created)}})
	}
	err := content(cardText(text))
	if streamingClosed(err) {
		// The whole card, streaming on until the final.
		err = whole(cardJSON(text, !m.Final))
		if cardRefused(err) && m.Final {
			t.a.Fallback(Name, "card_refused")
			err = whole(plainCardJSON(text))
		}
	} else if cardRefused(err) {
		if !m.Final {
			return nil // a preview Feishu refuses waits for the final
		}
		t.a.Fallback(Name, "card_refused") // the final as plain text, in the same card
		err = content(plainText(text))
	}
	if err == nil && m.Final {
		settings, _ := json.Marshal(map[string]any{"config": map[string]any{"streaming_mode": false, "summary": map[string]any{"content": summary(plainText(m.Text))}}})
		err = op(request{method: http.MethodPatch, path: cardPath + "/settings", chat: t.cfg.chatID,
			json: map[string]any{"settings": string(settings), "sequence": t.app.nextSeq(h.cardID, h.created)}})
		if streamingClosed(err) {
			err = nil // closed already (the whole card was updated with streaming off)
		}
	}
	if err != nil || !m.Final {
		return err
	}
	if len(parts) > 1 || len(m.Files) > 0 {
		if _, err := t.sendFinal(ctx, adapter.Message{Text: m.Text, Files: m.Files, IdempotencyKey: m.IdempotencyKey}, parts[1:], 1, ""); err != nil {
			return err
		}
	}
	return nil
}

// Card refusals: its streaming is closed (by ximd's final, applied again, or by Feishu after 10
// minutes).
const (
	codeStreamingClosed  = 300309
	codeStreamingTimeout = 200850
)

func streamingClosed(err error) bool {
	c := codeOf(err)
	return c == codeStreamingClosed || c == codeStreamingTimeout
}

// sendFinal sends text parts (numbered from first) and then the files, each with its uuid; it
// returns the message ids.
func (t *Target) sendFinal(ctx context.Context, m adapter.Message, parts []string, first int, replyTo string) ([]string, error) {
	var ids []string
	for i, text := range parts {
		if text == "" && (len(parts) > 1 || len(m.Files) > 0) {
			continue
		}
		reply := ""
		if len(ids) == 0 {
			reply = replyTo
		}
		id, err := t.sendRich(ctx, text, m.IdempotencyKey, first+i, reply)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	for i, f := range m.Files {
		reply := ""
		if len(ids) == 0 {
			reply = replyTo
		}
		id, err := t.sendFile(ctx, f, uuid(m.IdempotencyKey, "file", i), reply)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, profile.Errorf(profile.CodeTargetDeliveryFailed, "feishu: a message with neither text nor files")
	}
	return ids, nil
}

// sendMessage sends one message to the chat (or as a reply), paced per chat.
func (t *Target) sendMessage(ctx context.Context, msgType, content, uuid, replyTo string) (string, error) {
	if err := t.app.pace(ctx, t.cfg.chatID, SendInterval); err != nil {
		return "", err
	}
	r := request{method: http.MethodPost, path: "/open-apis/im/v1/messages?receive_id_type=chat_id", chat: t.cfg.chatID,
		json: map[string]any{"receive_id": t.cfg.chatID, "msg_type": msgType, "content": content, "uuid": uuid}}
	if replyTo != "" {
		r.path = "/open-apis/im/v1/messages/" + pathEscape(messageOf(replyTo)) + "/reply"
		r.json = map[string]any{"msg_type": msgType, "content": content, "uuid": uuid}
	}
	var out struct {
		MessageID string `json:"message_id"`
	}
	if err := t.app.do(ctx, r, &out); err != nil {
		return "", err
	}
	if out.MessageID == "" {
		return "", profile.Errorf(profile.CodeTargetUnavailable, "feishu: a sent message without an id")
	}
	return out.MessageID, nil
}

// sendFile uploads a file from the Transfer Plane (an image through the image API, anything
// else through the file API) and sends it.
func (t *Target) sendFile(ctx context.Context, f adapter.File, uuid, replyTo string) (string, error) {
	if t.a.Files == nil {
		return "", profile.Errorf(profile.CodeTargetDeliveryFailed, "feishu: no file store to read %s from", f.FileRef)
	}
	image := f.Type == "image" && f.ByteSize <= MaxImageUpload && imageMime(f.MimeType)
	if !image && f.ByteSize > MaxFileUpload {
		return "", profile.Errorf(profile.CodeTargetDeliveryFailed, "feishu: %s is %d bytes; the file API takes at most %d", f.Filename, f.ByteSize, MaxFileUpload)
	}
	form := func(mw *multipart.Writer) error {
		_, rc, err := t.a.Files.Open(ctx, f.FileRef)
		if err != nil {
			return err
		}
		defer rc.Close()
		field := "file"
		if image {
			_ = mw.WriteField("image_type", "message")
			field = "image"
		} else {
			_ = mw.WriteField("file_type", fileType(f))
			_ = mw.WriteField("file_name", f.Filename)
		}
		w, err := mw.CreateFormFile(field, f.Filename)
		if err != nil {
			return err
		}
		_, err = io.Copy(w, rc)
		return err
	}
	var up struct {
		ImageKey string `json:"image_key"`
		FileKey  string `json:"file_key"`
	}
	p := "/open-apis/im/v1/files"
	if image {
		p = "/open-apis/im/v1/images"
	}
	if err := t.app.do(ctx, request{method: http.MethodPost, path: p, chat: t.cfg.chatID, form: form}, &up); err != nil {
		var pe *profile.Error
		if errors.As(err, &pe) && pe.Code == profile.CodeFileNotFound {
			return "", pe
		}
		return "", err
	}
	msgType, content := "file", map[string]string{"file_key": up.FileKey}
	if image {
		msgType, content = "image", map[string]string{"image_key": up.ImageKey}
	}
	raw, _ := json.Marshal(content)
	return t.sendMessage(ctx, msgType, string(raw), uuid, replyTo)
}

func imageMime(m string) bool {
	switch strings.ToLower(m) {
	case "image/jpeg", "image/png", "image/webp", "image/gif", "image/tiff", "image/bmp", "image/x-icon":
		return true
	}
	return false
}

// fileType is the file API's file_type of a file: by its extension, else "stream".
func fileType(f adapter.File) string {
	switch ext := strings.ToLower(strings.TrimPrefix(path.Ext(f.Filename), ".")); ext {
	case "opus", "mp4", "pdf":
		return ext
	case "doc", "docx":
		return "doc"
	case "xls", "xlsx", "csv":
		return "xls"
	case "ppt", "pptx":
		return "ppt"
	}
	return "stream"
}

// splitText cuts a final's text into cards whose Markdown is at most MaxTextLength characters,
// between blocks.
func splitText(text string) []string {
	return markdown.Split(text, MaxTextLength, func(s string) int { return utf8.RuneCountInString(cardText(s)) })
}

// truncate cuts a streamed preview at MaxTextLength characters.
func truncate(text string) string { return adapter.Truncate(text, MaxTextLength) }

// summary is a card's preview in the chat list: its first line, shortened.
func summary(text string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(text), "\n")
	if r := []rune(line); len(r) > 60 {
		return string(r[:60]) + "…"
	}
	return line
}

func pathEscape(s string) string { return url.PathEscape(s) }
