// Package slack is the `slack` target adapter (edge-api §7.2.4): a channel bound to one Slack
// conversation (optionally one thread of it) through an app's bot, on github.com/slack-go/slack.
//
// Out: a streamed answer is a native stream (chat.startStream, chat.appendStream with what is
// new, chat.stopStream) where Slack allows it, falling back to edit streaming (chat.postMessage,
// then chat.update) in a conversation whose type does not support streams, remembered per
// conversation; streaming "none" posts once at the final. Thinking and tools show as the
// assistant status of the thread (assistant.threads.setStatus). Every message carries metadata
// {"event_type":"ximd_message","event_payload":{"idempotency_key",...}}, so a delivery a crash
// left in doubt is settled by finding it in the conversation (conversations.history or
// conversations.replies with include_all_metadata) instead of being answered
// delivery_outcome_unknown. The agent's Markdown is sent as Slack's markdown_text (streams) and a
// markdown block with the plain form as text (posts, updates), plain text alone when Slack
// refuses the block (render.go); a person's rich_text comes in as Markdown (richtext.go). Finals
// whose Markdown is longer than MaxTextLength are split between blocks; files go out through
// files.getUploadURLExternal and files.completeUploadExternal; replies in the replied-to
// message's thread.
//
// In: Socket Mode (an app-level token; one connection per app across all workers, a poll loop
// keyed by the app) or the Events API at POST /v1/targets/slack/{channel}/events (v0 signatures,
// 5-minute window, url_verification); a person's message becomes a user message of the channel
// of its conversation, its files fetched from url_private with the bot token. The message_id is
// derived from the conversation and the message's ts, so an event Slack sends again is a
// duplicate.
//
// Bots (edge-api §4.1): a bot's config is a channel's without channel_id and thread_ts (Bind
// names them); the PUT probes the bot token (auth.test). Its messages come on the app's Socket
// Mode connection, shared with the app's channels, or by the Events API at
// POST /v1/targets/slack/bots/{bot_id}/events (the bot's signing_secret). A message of a
// conversation no channel PUT binds reaches the bot: an im is direct; channels and mpims are
// group; with scope "thread" a reply in a channel's thread is a thread, keyed
// "<channel>_<thread_ts with . as _>". A mention is an app_mention, <@BOTID> in the text
// (removed), or a reply in a thread the bot's message started; under scope "thread" a thread the
// bot has a message in (remembered, else read with conversations.replies) passes without one.
// The app_mention and message events of one channel message are one message; other bots'
// messages are refused from_bot, the bot's own skipped. Titles and names come from
// conversations.info and users.info.
package slack

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// Name is the adapter's name in a channel's target binding.
const Name = "slack"

// Limits (docs/adapters/slack.md).
const (
	// MetadataEventType marks ximd's messages.
	MetadataEventType = "ximd_message"
	// LookupMessages bounds how far back Lookup reads the conversation.
	LookupMessages = 1000
	// EditInterval spaces chat.update calls on one message (Tier 3: about 50 a minute).
	EditInterval = time.Second
)

// Options configure the adapter.
type Options struct {
	// Common: the logger, the HTTP client (default: keep-alive, a 30 s timeout) and the file
	// source of a final's files (required for files out).
	adapter.Common
	// SignatureWindow bounds how far an Events API call's timestamp may be from now. Default 5
	// minutes (Slack's advice).
	SignatureWindow time.Duration
}

// Adapter binds channels to Slack conversations. One client per bot (API and bot token) is
// shared by every channel of that bot. Its Public shows a config without tokens and the signing
// secret; Open makes no call (Probe checks the config against Slack).
type Adapter struct {
	adapter.Platform[*config, publicConfig, *workspace]
	window  time.Duration   // Options.SignatureWindow
	handled *adapter.Recent // events bots took already
}

// New returns the adapter.
func New(opts Options) *Adapter {
	a := &Adapter{window: adapter.OrDefault(opts.SignatureWindow, adapter.DefaultSignatureWindow), handled: adapter.NewRecent(4096)}
	a.Init(Name, opts.Common, 30*time.Second, parseConfig, (*config).public, a.open)
	return a
}

func (a *Adapter) open(c *config) (adapter.Target, error) {
	return &Target{a: a, ws: a.workspace(c), cfg: c}, nil
}

// workspace is one bot's client, shared by its channels.
type workspace struct {
	api  *slack.Client
	http *http.Client
	tok  string

	mu       sync.Mutex
	me       identity             // the bot's identity (auth.test), zero until known
	until    map[string]time.Time // conversation -> no call before (a 429's Retry-After)
	noStream map[string]bool      // conversations whose type does not take streams
	shown    map[string]string    // streamed message ts -> the markdown_text it shows so far
	parts    map[string][]string  // idempotency key -> ts of the parts of a split final sent
	lookups  *lookups             // what its bots remember of Slack
}

func (a *Adapter) workspace(c *config) *workspace {
	return a.Accounts.Get(c.workspaceKey(), func() *workspace {
		hc := a.HTTPClient
		return &workspace{api: slack.New(c.botToken, slack.OptionAPIURL(c.apiURL), slack.OptionHTTPClient(hc)), http: hc, tok: c.botToken,
			until: map[string]time.Time{}, noStream: map[string]bool{}, shown: map[string]string{}, parts: map[string][]string{},
			lookups: newLookups()}
	})
}

// call runs one Web API method for a conversation: none while a 429's Retry-After runs for it
// (a RetryAfterError instead), and its failure mapped to an ack code.
func (ws *workspace) call(ctx context.Context, method, channel string, fn func(ctx context.Context) error) error {
	ws.mu.Lock()
	wait := time.Until(ws.until[channel])
	ws.mu.Unlock()
	if wait > 0 {
		return &adapter.RetryAfterError{After: wait, Err: profile.Errorf(profile.CodeTargetRateLimited, "slack %s: rate-limited", method)}
	}
	err := fn(ctx)
	var pe *profile.Error
	if err == nil || errors.As(err, &pe) {
		return err // done, or ximd's own refusal (a file gone)
	}
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		after := max(rl.RetryAfter, time.Second)
		ws.mu.Lock()
		if until := time.Now().Add(after); until.After(ws.until[channel]) {
			ws.until[channel] = until
		}
		ws.mu.Unlock()
		return &adapter.RetryAfterError{After: after, Err: profile.Errorf(profile.CodeTargetRateLimited, "slack %s: rate limited, retry after %s", method, after)}
	}
	return mapErr(ctx, method, err)
}

// slackCode is the `error` of a refusal (Slack answers 200 {"ok":false,"error":...}).
func slackCode(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	return ""
}

// mapErr maps a failed call to its ack code (edge-api §7.2.4).
func mapErr(ctx context.Context, method string, err error) error {
	var sc slack.StatusCodeError
	switch code := slackCode(err); {
	case code == "invalid_auth" || code == "not_authed" || code == "account_inactive" || code == "token_revoked" || code == "token_expired" || code == "missing_scope" || code == "not_allowed_token_type":
		return profile.Errorf(profile.CodeTargetAuthFailed, "slack %s: %s", method, code)
	case code == "internal_error" || code == "fatal_error" || code == "service_unavailable" || code == "request_timeout" || code == "ratelimited":
		return profile.Errorf(profile.CodeTargetUnavailable, "slack %s: %s", method, code)
	case code != "":
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "slack %s: %s", method, code)
	case errors.As(err, &sc) && sc.Code == http.StatusUnauthorized || errors.As(err, &sc) && sc.Code == http.StatusForbidden:
		return profile.Errorf(profile.CodeTargetAuthFailed, "slack %s: status %d", method, sc.Code)
	case errors.As(err, &sc) && sc.Code < 500:
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "slack %s: status %d", method, sc.Code)
	case ctx.Err() != nil:
		return &adapter.AmbiguousError{Err: profile.Errorf(profile.CodeTargetUnavailable, "slack %s: no answer: %v", method, ctx.Err())}
	default:
		return profile.Errorf(profile.CodeTargetUnavailable, "slack %s: %v", method, describe(err))
	}
}

// describe is an error's text without a URL (slack-go's network errors carry the method URL,
// never the token).
func describe(err error) string {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) && ue.Unwrap() != nil {
		return ue.Unwrap().Error()
	}
	return err.Error()
}

var (
	_ adapter.Target         = (*Target)(nil)
	_ adapter.Editor         = (*Target)(nil)
	_ adapter.ActivityShower = (*Target)(nil)
	_ adapter.Reconciler     = (*Target)(nil)
	_ adapter.Prober         = (*Adapter)(nil)
)

// Probe implements adapter.Prober: the bot token works (auth.test) and the bot is in the
// conversation (conversations.info).
func (a *Adapter) Probe(ctx context.Context, ch adapter.Channel) error {
	c, err := parseConfig(ch.Target.Config)
	if err != nil {
		return err
	}
	ws := a.workspace(c)
	if _, err := ws.user(ctx); err != nil {
		return profile.Errorf(profile.CodeTargetConfigInvalid, "slack refused the bot token: %s", profile.AsError(err).Message)
	}
	if err := ws.call(ctx, "conversations.info", "", func(ctx context.Context) error {
		_, err := ws.api.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: c.channelID})
		return err
	}); err != nil {
		return profile.Errorf(profile.CodeTargetConfigInvalid, "slack refused the conversation (is the bot in it?): %s", profile.AsError(err).Message)
	}
	return nil
}

// identity is who the bot is (auth.test): its user, its bot id and its workspace.
type identity struct {
	user, bot, team string
}

// user is the bot's user id (auth.test, once).
func (ws *workspace) user(ctx context.Context) (string, error) {
	me, err := ws.identity(ctx)
	return me.user, err
}

// identity is the bot's identity (auth.test, once).
func (ws *workspace) identity(ctx context.Context) (identity, error) {
	ws.mu.Lock()
	me := ws.me
	ws.mu.Unlock()
	if me.user != "" {
		return me, nil
	}
	return ws.authTest(ctx)
}

// authTest calls auth.test and keeps the bot's identity.
func (ws *workspace) authTest(ctx context.Context) (identity, error) {
	var resp *slack.AuthTestResponse
	if err := ws.call(ctx, "auth.test", "", func(ctx context.Context) (err error) { resp, err = ws.api.AuthTestContext(ctx); return err }); err != nil {
		return identity{}, err
	}
	me := identity{user: resp.UserID, bot: resp.BotID, team: resp.TeamID}
	ws.mu.Lock()
	ws.me = me
	ws.mu.Unlock()
	return me, nil
}

// Target is one channel's conversation.
type Target struct {
	a   *Adapter
	ws  *workspace
	cfg *config
}

// Capabilities implements adapter.Target.
func (t *Target) Capabilities() adapter.Capabilities {
	c := adapter.Capabilities{Streaming: adapter.StreamingEdit, Activity: t.cfg.activity, Reply: adapter.ReplyNative,
		InDoubt: adapter.InDoubtLookup, MaxTextLength: MaxTextLength, FirstPreviewWords: t.cfg.firstWords}
	switch t.cfg.streaming {
	case adapter.StreamingNone:
		c.Streaming = adapter.StreamingNone
	case adapter.StreamingEdit:
		c.MinEditInterval = EditInterval
	}
	return c
}

// metadata is the metadata every message of ximd carries: the idempotency key and part, and on
// a message's first part whether its final is applied, with the final text's digest.
func metadata(key string, part int, final bool, text string) slack.SlackMetadata {
	p := map[string]any{"idempotency_key": key, "part": part, "final": final}
	if final && part == 0 {
		sum := sha256.Sum256([]byte(text))
		p["text_sha256"] = hex.EncodeToString(sum[:])
	}
	return slack.SlackMetadata{EventType: MetadataEventType, EventPayload: p}
}

// thread is the thread a message goes to: the replied-to message's, else the channel's.
func (t *Target) thread(replyTo string) string {
	if replyTo != "" {
		return replyTo
	}
	return t.cfg.threadTS
}

// streams reports whether the conversation takes native streams.
func (t *Target) streams() bool {
	if t.cfg.streaming != StreamingStream {
		return false
	}
	t.ws.mu.Lock()
	defer t.ws.mu.Unlock()
	return !t.ws.noStream[t.cfg.channelID]
}

// Send implements adapter.Sender: the first streamed part (a stream, or a posted message), or a
// final (split, its files after it, its first part marked final last).
func (t *Target) Send(ctx context.Context, m adapter.Message) (string, error) {
	if !m.Final {
		if t.streams() {
			ts, err := t.startStream(ctx, m)
			if !notSupported(err) {
				return ts, err
			}
			t.ws.mu.Lock()
			t.ws.noStream[t.cfg.channelID] = true // edit streaming from now on
			t.ws.mu.Unlock()
			t.a.Logger.Info("slack_stream_not_supported", "channel_id", t.cfg.channelID)
		}
		return t.post(ctx, preview(m.Text), t.thread(m.ReplyTo), metadata(m.IdempotencyKey, 0, false, ""))
	}
	parts := split(m.Text)
	whole := len(parts) == 1 && len(m.Files) == 0
	ts, err := t.post(ctx, parts[0], t.thread(m.ReplyTo), metadata(m.IdempotencyKey, 0, whole, m.Text))
	if err != nil || whole {
		return ts, err
	}
	return ts, t.finish(ctx, ts, m, parts)
}

// notSupported reports whether a stream call was refused because the conversation does not
// take streams.
func notSupported(err error) bool {
	return err != nil && strings.Contains(err.Error(), "channel_type_not_supported")
}

// finish sends a final's further parts and files, then marks its first part final (so a final
// mark means the whole message is there).
func (t *Target) finish(ctx context.Context, ts string, m adapter.Message, parts []string) error {
	sent := t.ws.sentParts(m.IdempotencyKey)
	for i := 1; i < len(parts); i++ {
		if i-1 < len(sent) {
			continue // sent by an earlier attempt of this process
		}
		pts, err := t.post(ctx, parts[i], t.thread(m.ReplyTo), metadata(m.IdempotencyKey, i, false, ""))
		if err != nil {
			return err
		}
		t.ws.recordPart(m.IdempotencyKey, pts)
	}
	for j, f := range m.Files {
		if len(parts)-1+j < len(sent) {
			continue
		}
		id, err := t.upload(ctx, f, t.thread(m.ReplyTo))
		if err != nil {
			return err
		}
		t.ws.recordPart(m.IdempotencyKey, id)
	}
	return t.update(ctx, ts, parts[0], metadata(m.IdempotencyKey, 0, true, m.Text))
}

// Edit implements adapter.Editor: a stream gets what is new (and is stopped at the final); an
// edit-streamed message is updated with the whole text.
func (t *Target) Edit(ctx context.Context, ts string, m adapter.Message) error {
	t.ws.mu.Lock()
	_, streamed := t.ws.shown[ts]
	t.ws.mu.Unlock()
	if streamed || t.streams() {
		if done, err := t.editStream(ctx, ts, m); done || err != nil {
			return err
		}
	}
	if !m.Final {
		return t.update(ctx, ts, preview(m.Text), metadata(m.IdempotencyKey, 0, false, ""))
	}
	parts := split(m.Text)
	if len(parts) == 1 && len(m.Files) == 0 {
		return t.update(ctx, ts, parts[0], metadata(m.IdempotencyKey, 0, true, m.Text))
	}
	return t.finish(ctx, ts, m, parts)
}

// ShowActivity implements adapter.ActivityShower: the thread's assistant status ("is thinking…",
// "is using <tool>…"); idle clears it.
func (t *Target) ShowActivity(ctx context.Context, a adapter.Activity) error {
	status := ""
	switch a.Status {
	case adapter.StatusThinking, adapter.StatusTyping:
		status = "is thinking…"
	case adapter.StatusTool:
		status = "is using " + a.ToolName + "…"
	}
	return t.ws.call(ctx, "assistant.threads.setStatus", t.cfg.channelID, func(ctx context.Context) error {
		return t.ws.api.SetAssistantThreadsStatusContext(ctx, slack.AssistantThreadsSetStatusParameters{ChannelID: t.cfg.channelID, ThreadTS: t.cfg.threadTS, Status: status})
	})
}

// post sends text (the agent's Markdown) as a message: a markdown block and the plain text, or
// the plain text alone when Slack refuses the block.
func (t *Target) post(ctx context.Context, text, thread string, md slack.SlackMetadata) (string, error) {
	f := formOf(text)
	var ts string
	err := t.rich(ctx, func(plain bool) error {
		opts := append(f.options(plain), slack.MsgOptionMetadata(md))
		if thread != "" {
			opts = append(opts, slack.MsgOptionTS(thread))
		}
		return t.ws.call(ctx, "chat.postMessage", t.cfg.channelID, func(ctx context.Context) (err error) {
			_, ts, err = t.ws.api.PostMessageContext(ctx, t.cfg.channelID, opts...)
			return err
		})
	})
	return ts, err
}

// update replaces a message's text (the agent's Markdown) as post sends it.
func (t *Target) update(ctx context.Context, ts, text string, md slack.SlackMetadata) error {
	f := formOf(text)
	return t.rich(ctx, func(plain bool) error {
		opts := append(f.options(plain), slack.MsgOptionMetadata(md))
		return t.ws.call(ctx, "chat.update", t.cfg.channelID, func(ctx context.Context) error {
			_, _, _, err := t.ws.api.UpdateMessageContext(ctx, t.cfg.channelID, ts, opts...)
			return err
		})
	})
}

func (ws *workspace) sentParts(key string) []string {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return append([]string(nil), ws.parts[key]...)
}

func (ws *workspace) recordPart(key, ts string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(ws.parts) > 4096 {
		clear(ws.parts) // bounded; a retry after this only re-sends parts
	}
	ws.parts[key] = append(ws.parts[key], ts)
}
