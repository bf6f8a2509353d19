package matrix

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// Name is the adapter's name in a channel's target binding.
const Name = "matrix"

// Limits and timings (docs/adapters/matrix.md).
const (
	// MaxTextLength is the most characters one event carries: a Matrix event is at most 64 KiB
	// of JSON; 12,000 characters of 4-byte UTF-8 leave room for the rest.
	MaxTextLength = 12000
	// TypingTimeout is the typing notification's timeout; it is renewed every TypingRenewal
	// while a status is shown.
	TypingTimeout = 30 * time.Second
	TypingRenewal = 20 * time.Second
	// LookupEvents bounds how far back Lookup reads the room (its newest events first).
	LookupEvents = 2000
	// fallbackChars bounds the plain-text fallback of an edit (clients show m.new_content).
	fallbackChars = 500
)

// Content keys ximd adds to its events, so an interrupted delivery is found in the room.
const (
	keyIdempotency = "org.ximd.idempotency_key"
	keyPart        = "org.ximd.part"
	keyParts       = "org.ximd.parts"
	keyFinal       = "org.ximd.final"
	keyTextSHA     = "org.ximd.text_sha256"
)

// Options configure the adapter.
type Options struct {
	// Common: the logger, the HTTP client (default: keep-alive, no overall timeout: the long
	// polls bound their own) and the file source of a final's files (required for files out).
	adapter.Common
	// SyncTimeout is how long one /sync long-poll waits for news. Default SyncTimeout.
	SyncTimeout time.Duration
}

// Adapter binds channels to Matrix rooms. One client per bot account (homeserver and access
// token) is shared by every channel of that account, with the account's rate-limit pause. Its
// Public shows a config without the access token; Open makes no call (Probe checks the config
// against the server).
type Adapter struct {
	adapter.Platform[*config, publicConfig, *account]
	sync time.Duration // Options.SyncTimeout
}

// New returns the adapter.
func New(opts Options) *Adapter {
	a := &Adapter{sync: adapter.OrDefault(opts.SyncTimeout, SyncTimeout)}
	a.Init(Name, opts.Common, 0, parseConfig, (*config).public, a.open)
	return a
}

func (a *Adapter) open(c *config) (adapter.Target, error) {
	acc, err := a.account(c)
	if err != nil {
		return nil, err
	}
	return &Target{a: a, acc: acc, cfg: c, room: id.RoomID(c.roomID)}, nil
}

// Probe implements adapter.Prober: the token is valid, the bot is in the room (an invitation is
// accepted), and the room is not encrypted (ximd has no end-to-end encryption).
func (a *Adapter) Probe(ctx context.Context, ch adapter.Channel) error {
	config := ch.Target.Config
	c, err := parseConfig(config)
	if err != nil {
		return err
	}
	acc, err := a.account(c)
	if err != nil {
		return err
	}
	if _, err := acc.user(ctx); err != nil {
		return configInvalid("the access token does not work: %v", mapErr("whoami", err))
	}
	room := id.RoomID(c.roomID)
	joined, err := acc.cli.JoinedRooms(ctx)
	if err != nil {
		return configInvalid("joined rooms: %v", mapErr("joined_rooms", err))
	}
	in := false
	for _, r := range joined.JoinedRooms {
		in = in || r == room
	}
	if !in {
		if _, err := acc.cli.JoinRoomByID(ctx, room); err != nil {
			return configInvalid("the bot is not in room %s and cannot join it: %v", room, mapErr("join", err))
		}
	}
	var enc event.EncryptionEventContent
	err = acc.cli.StateEvent(ctx, room, event.StateEncryption, "", &enc)
	switch {
	case err == nil && enc.Algorithm != "":
		return configInvalid("room %s is encrypted; ximd does not support end-to-end encryption", room)
	case err != nil && !errors.Is(err, mautrix.MNotFound):
		return configInvalid("room %s: %v", room, mapErr("state", err))
	}
	return nil
}

func configInvalid(format string, args ...any) *profile.Error {
	return profile.Errorf(profile.CodeTargetConfigInvalid, format, args...)
}

// account is one bot account's client, shared by its channels.
type account struct {
	cli *mautrix.Client

	mu      sync.Mutex
	userID  id.UserID
	paused  time.Time               // no call before this: the server said M_LIMIT_EXCEEDED
	filters map[string]string       // sync filter ids by their JSON
	direct  map[id.RoomID]bool      // the account's m.direct rooms (bots)
	rooms   map[id.RoomID]*roomInfo // what a bot knows of a room, until it changes
}

func (a *Adapter) account(c *config) (*account, error) {
	sum := sha256.Sum256([]byte(c.accessToken))
	return a.Accounts.TryGet(c.homeserver+"\x00"+hex.EncodeToString(sum[:]), func() (*account, error) {
		cli, err := mautrix.NewClient(c.homeserver, "", c.accessToken)
		if err != nil {
			return nil, &adapter.ConfigError{Field: "homeserver", Problem: err.Error()}
		}
		cli.Client = a.HTTPClient
		cli.UserAgent = "ximd"
		return &account{cli: cli}, nil
	})
}

// user is the bot's user id (whoami, once).
func (acc *account) user(ctx context.Context) (id.UserID, error) {
	acc.mu.Lock()
	u := acc.userID
	acc.mu.Unlock()
	if u != "" {
		return u, nil
	}
	resp, err := acc.cli.Whoami(ctx)
	if err != nil {
		return "", err
	}
	acc.mu.Lock()
	acc.userID = resp.UserID
	acc.cli.UserID = resp.UserID
	acc.mu.Unlock()
	return resp.UserID, nil
}

// wait returns the rate-limit error of a paused account without calling, or nil.
func (acc *account) wait() error {
	acc.mu.Lock()
	left := time.Until(acc.paused)
	acc.mu.Unlock()
	if left <= 0 {
		return nil
	}
	return &adapter.RetryAfterError{After: left, Err: profile.Errorf(profile.CodeTargetRateLimited, "the homeserver rate-limits this account for %s more", left.Round(time.Millisecond))}
}

// call runs one request on the account: not while it is paused; a rate limit pauses it.
func (acc *account) call(op string, do func() error) error {
	if err := acc.wait(); err != nil {
		return err
	}
	err := do()
	if err == nil {
		return nil
	}
	mapped := mapErr(op, err)
	if after, ok := adapter.RetryAfterOf(mapped); ok {
		acc.mu.Lock()
		if at := time.Now().Add(after); at.After(acc.paused) {
			acc.paused = at
		}
		acc.mu.Unlock()
	}
	return mapped
}

// Target is one channel's room.
type Target struct {
	a    *Adapter
	acc  *account
	cfg  *config
	room id.RoomID
}

var (
	_ adapter.Target         = (*Target)(nil)
	_ adapter.Editor         = (*Target)(nil)
	_ adapter.ActivityShower = (*Target)(nil)
	_ adapter.Reconciler     = (*Target)(nil)
	_ adapter.Prober         = (*Adapter)(nil)
)

// Capabilities implements adapter.Target.
func (t *Target) Capabilities() adapter.Capabilities {
	return adapter.Capabilities{
		Streaming: t.cfg.streaming, Activity: t.cfg.activity, Reply: adapter.ReplyNative,
		InDoubt: adapter.InDoubtLookup, MaxTextLength: MaxTextLength, ActivityRenewal: TypingRenewal,
		FirstPreviewWords: t.cfg.firstWords,
	}
}

// Send implements adapter.Sender: the message's first event (its id is the target message id),
// then, for a final, the rest of its parts and its files, each with a transaction id derived
// from the idempotency key, so a repeated send returns the same events.
func (t *Target) Send(ctx context.Context, m adapter.Message) (string, error) {
	evs, err := t.events(ctx, m)
	if err != nil {
		return "", err
	}
	main := evs[0]
	if m.ReplyTo != "" {
		main.content["m.relates_to"] = map[string]any{"m.in_reply_to": map[string]any{"event_id": m.ReplyTo}}
	}
	first, err := t.send(ctx, main)
	if err != nil {
		return "", err
	}
	for _, ev := range evs[1:] {
		if _, err := t.send(ctx, ev); err != nil {
			return "", err
		}
	}
	return first, nil
}

// Edit implements adapter.Editor: an m.replace of the message's first event with the whole text,
// its HTML and plain forms in m.new_content and, for clients that do not apply edits, "* " and
// the start of the plain text as the event's own body (no formatted fallback: a cut HTML could
// be broken). A final sends the rest of its parts and its files first, then the edit that marks it final, so
// a final mark in the room means the whole message is there.
func (t *Target) Edit(ctx context.Context, targetMessageID string, m adapter.Message) error {
	if targetMessageID == "" {
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "edit: empty target message id")
	}
	evs, err := t.events(ctx, m)
	if err != nil {
		return err
	}
	for _, ev := range evs[1:] {
		if _, err := t.send(ctx, ev); err != nil {
			return err
		}
	}
	_, err = t.send(ctx, editOf(targetMessageID, m.Final, evs[0]))
	return err
}

// editOf is the m.replace of event targetMessageID by main: main's content as m.new_content, "* "
// and the start of its plain text as the fallback body, a transaction id derived from the edit.
func editOf(targetMessageID string, final bool, main outEvent) outEvent {
	body, _ := main.content["body"].(string)
	edit := map[string]any{
		"msgtype":       main.content["msgtype"],
		"body":          "* " + truncate(body, fallbackChars),
		"m.new_content": main.content,
		"m.relates_to":  map[string]any{"rel_type": "m.replace", "event_id": targetMessageID},
	}
	// The Markdown shown, not the plain body: two texts that differ only in formatting are two
	// edits.
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%t\x00%s", targetMessageID, final, main.text))
	return outEvent{txn: "ximd-e-" + hex.EncodeToString(sum[:16]), content: edit}
}

// ShowActivity implements adapter.ActivityShower: a typing notification (renewed by the activity
// stage every TypingRenewal), cleared at idle.
func (t *Target) ShowActivity(ctx context.Context, a adapter.Activity) error {
	if _, err := t.acc.user(ctx); err != nil { // the typing path names the bot
		return mapErr("whoami", err)
	}
	typing := a.Status != adapter.StatusIdle
	return t.acc.call("typing", func() error {
		_, err := t.acc.cli.UserTyping(ctx, t.room, typing, TypingTimeout)
		return err
	})
}

// outEvent is one event to send: its transaction id and content (and a text event's Markdown).
type outEvent struct {
	txn     string
	content map[string]any
	text    string
}

// events builds a message's events: its Markdown text cut to MaxTextLength (a final into parts
// between blocks, a streamed preview truncated), each part as HTML with its plain text
// (textContent), then, for a final, one event per file. The first carries the marks Lookup
// reads: the final flag, how many events the message has, the text's digest.
func (t *Target) events(ctx context.Context, m adapter.Message) ([]outEvent, error) {
	key := m.IdempotencyKey
	var texts []string
	switch {
	case !m.Final:
		texts = []string{previewText(m.Text)}
	case m.Text != "" || len(m.Files) == 0:
		texts = splitText(m.Text)
	}
	var evs []outEvent
	for i, txt := range texts {
		evs = append(evs, outEvent{txn: txnID(key, i), content: textContent(txt), text: txt})
	}
	if m.Final {
		for j, f := range m.Files {
			c, err := t.upload(ctx, f)
			if err != nil {
				return nil, err
			}
			evs = append(evs, outEvent{txn: txnID(key, len(texts)+j), content: c})
		}
	}
	for i := range evs {
		if key != "" {
			evs[i].content[keyIdempotency] = key
			evs[i].content[keyPart] = i
		}
	}
	if m.Final {
		sum := sha256.Sum256([]byte(m.Text))
		evs[0].content[keyFinal] = true
		evs[0].content[keyParts] = len(evs)
		evs[0].content[keyTextSHA] = hex.EncodeToString(sum[:])
	}
	return evs, nil
}

// upload copies a stored file into the media repository and returns its event content.
func (t *Target) upload(ctx context.Context, f adapter.File) (map[string]any, error) {
	if t.a.Files == nil {
		return nil, profile.Errorf(profile.CodeTargetDeliveryFailed, "files: this worker has no file store")
	}
	meta, body, err := t.a.Files.Open(ctx, f.FileRef)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	var resp *mautrix.RespMediaUpload
	err = t.acc.call("upload", func() error {
		var err error
		resp, err = t.acc.cli.UploadMedia(ctx, mautrix.ReqUploadMedia{Content: body, ContentLength: meta.ByteSize, ContentType: meta.MimeType, FileName: f.Filename})
		return err
	})
	if err != nil {
		return nil, err
	}
	msgtype := event.MsgFile
	switch f.Type {
	case "image":
		msgtype = event.MsgImage
	case "video":
		msgtype = event.MsgVideo
	case "audio":
		msgtype = event.MsgAudio
	}
	return map[string]any{
		"msgtype": string(msgtype), "body": f.Filename, "filename": f.Filename, "url": resp.ContentURI.String(),
		"info": map[string]any{"mimetype": meta.MimeType, "size": meta.ByteSize},
	}, nil
}

func (t *Target) send(ctx context.Context, ev outEvent) (string, error) {
	var resp *mautrix.RespSendEvent
	err := t.acc.call("send", func() error {
		var err error
		resp, err = t.acc.cli.SendMessageEvent(ctx, t.room, event.EventMessage, ev.content, mautrix.ReqSendEvent{TransactionID: ev.txn})
		return err
	})
	if err != nil {
		return "", err
	}
	return string(resp.EventID), nil
}

// txnID is the transaction id of part i of the message with this idempotency key: the same
// request made again (after a timeout, or a crash) is answered with the same event.
func txnID(key string, i int) string {
	if key == "" {
		return "ximd-" + rand.Text()
	}
	sum := sha256.Sum256([]byte(key + "\x00" + strconv.Itoa(i)))
	return "ximd-" + hex.EncodeToString(sum[:16])
}

func truncate(s string, n int) string { return adapter.Truncate(s, n) }

// mapErr maps a client error to the profile's target codes (edge-api §7.2.1): M_LIMIT_EXCEEDED
// and 429 are target_rate_limited with the server's retry time; 5xx, timeouts and connection
// failures target_unavailable; M_FORBIDDEN, M_UNKNOWN_TOKEN, 401 and 403 target_auth_failed;
// anything else target_delivery_failed.
func mapErr(op string, err error) error {
	var pe *profile.Error
	if errors.As(err, &pe) {
		return err
	}
	var he mautrix.HTTPError
	if !errors.As(err, &he) || he.Response == nil {
		return fmt.Errorf("%w: %w", profile.Errorf(profile.CodeTargetUnavailable, "%s: the homeserver did not answer", op), err)
	}
	status, code, msg := he.Response.StatusCode, "", ""
	if he.RespError != nil {
		code, msg = he.RespError.ErrCode, he.RespError.Err
	}
	detail := strings.TrimSpace(fmt.Sprintf("%s: HTTP %d %s %s", op, status, code, msg))
	switch {
	case code == "M_LIMIT_EXCEEDED" || status == http.StatusTooManyRequests:
		e := profile.Errorf(profile.CodeTargetRateLimited, "%s", detail)
		after, ok := adapter.ParseRetryAfter(he.Response.Header.Get("Retry-After"), time.Now())
		if he.RespError != nil {
			if ms, isNum := he.RespError.ExtraData["retry_after_ms"].(float64); isNum && ms > 0 {
				after, ok = min(time.Duration(ms)*time.Millisecond, adapter.MaxRetryAfter), true
			}
		}
		if !ok {
			after = time.Second
		}
		return &adapter.RetryAfterError{After: after, Err: e}
	case status >= 500:
		return profile.Errorf(profile.CodeTargetUnavailable, "%s", detail)
	case code == "M_FORBIDDEN" || code == "M_UNKNOWN_TOKEN" || code == "M_MISSING_TOKEN" || status == http.StatusUnauthorized || status == http.StatusForbidden:
		return profile.Errorf(profile.CodeTargetAuthFailed, "%s", detail)
	default:
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "%s", detail)
	}
}
