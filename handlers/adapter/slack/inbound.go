package slack

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

var (
	_ adapter.Poller   = (*Adapter)(nil)
	_ adapter.Receiver = (*Adapter)(nil)
)

// MessageIDOf is the message_id of the user message of a Slack message: the conversation and the
// message's ts, so an event Slack sends again (a retry, Socket Mode and the Events API both) is
// one message.
func MessageIDOf(channelID, ts string) string { return "sl_" + digest(channelID+":"+ts) }

// callback is an Events API body, or a Socket Mode envelope's payload.
type callback struct {
	Type      string   `json:"type"`
	Challenge string   `json:"challenge"`
	EventID   string   `json:"event_id"`
	Event     msgEvent `json:"event"`
}

// msgEvent is a message event (docs "message event"), or an app_mention (same fields, no
// channel_type).
type msgEvent struct {
	Type    string `json:"type"`
	Subtype string `json:"subtype"`
	User    string `json:"user"`
	BotID   string `json:"bot_id"`
	Text    string `json:"text"`
	// Blocks are the message's blocks: a person's rich_text, written as Markdown (richtext.go).
	Blocks       json.RawMessage `json:"blocks"`
	TS           string          `json:"ts"`
	ThreadTS     string          `json:"thread_ts"`
	ParentUserID string          `json:"parent_user_id"`
	Channel      string          `json:"channel"`
	ChannelType  string          `json:"channel_type"`
	Files        []struct {
		ID         string `json:"id"`
		Name       string `json:"name"`
		Mimetype   string `json:"mimetype"`
		URLPrivate string `json:"url_private"`
		Size       int64  `json:"size"`
	} `json:"files"`
}

// PollKey implements adapter.Poller: the channels of one app with an app-level token share the
// app's Socket Mode connection; "" without one.
func (a *Adapter) PollKey(ch adapter.Channel) string {
	return a.PollKeyOf(ch, func(c *config) bool { return c.appToken != "" }, (*config).appKey)
}

// Poll implements adapter.Poller: one Socket Mode connection for the app (apps.connections.open
// with the app-level token), for its channels and its bots; each event envelope is acknowledged
// once what it carries is durable (or refused), so Slack sends an envelope again that a crash
// left unacknowledged (the message_id makes it one message). No cursor: Slack keeps the position.
func (a *Adapter) Poll(ctx context.Context, feed adapter.Feed) error {
	chans, bots := feed.Channels(), feed.Bots()
	c, err := a.pollAccount(chans, bots)
	if c == nil {
		return err
	}
	api := slack.New(c.botToken, slack.OptionAPIURL(c.apiURL), slack.OptionAppLevelToken(c.appToken), slack.OptionHTTPClient(a.HTTPClient))
	client := socketmode.New(api)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- client.RunContext(ctx) }()
	sameApp := func(cc *config) bool { return cc.appKey() == c.appKey() }
	for {
		select {
		case <-ctx.Done():
			<-errc
			return ctx.Err()
		case err := <-errc:
			return fmt.Errorf("slack socket mode: %w", err)
		case evt := <-client.Events:
			switch evt.Type {
			case socketmode.EventTypeInvalidAuth:
				cancel()
				<-errc
				return profile.Errorf(profile.CodeTargetAuthFailed, "slack socket mode: the app-level token was refused")
			case socketmode.EventTypeEventsAPI:
				if evt.Request == nil {
					continue
				}
				var cb callback
				if err := json.Unmarshal(evt.Request.Payload, &cb); err != nil {
					_ = client.Ack(*evt.Request) // not an event ximd reads: never again
					continue
				}
				if _, err := a.dispatch(ctx, cb, chans, bots, feed, sameApp); err != nil {
					a.Logger.Warn("slack_event_failed", "event_id", cb.EventID, "err", err)
					continue // not acknowledged: Slack sends it again
				}
				_ = client.Ack(*evt.Request)
			}
		}
	}
}

// pollAccount is the app a poll loop connects as: the config of its first channel, else of its
// first bot; nil when it has neither (nothing to read).
func (a *Adapter) pollAccount(chans []adapter.Channel, bots []adapter.Bot) (*config, error) {
	if len(chans) > 0 {
		return parseConfig(chans[0].Target.Config)
	}
	if len(bots) > 0 {
		return a.botConfig(bots[0])
	}
	return nil, nil
}

// dispatch passes a message event on: to the channels PUT among chans that bind its conversation
// (and thread, for a channel bound to one) and whose config same accepts; when none binds it, to
// bots (those whose account same accepts). Message changes and deletions are not user messages;
// the bot's own messages and messages older than a channel's binding are not passed; other
// bots' messages reach bots only (refused from_bot). An app_mention is the same message as a
// message event of the channel: channels take the message event only.
func (a *Adapter) dispatch(ctx context.Context, cb callback, chans []adapter.Channel, bots []adapter.Bot, in adapter.Inboxes, same func(*config) bool) (adapter.Received, error) {
	ev := cb.Event
	if md, ok := richMarkdown(ev.Blocks); ok {
		ev.Text = md // a person's formatting, as Markdown
	}
	isBot := ev.BotID != "" || ev.Subtype == "bot_message"
	if cb.Type != "event_callback" && cb.Type != "" || (ev.Type != "message" && ev.Type != "app_mention") ||
		(ev.Subtype != "" && ev.Subtype != "file_share" && ev.Subtype != "thread_broadcast" && ev.Subtype != "bot_message") ||
		(ev.User == "" && !isBot) {
		return adapter.Ignored, nil
	}
	outcome, bound := adapter.Ignored, false
	for _, ch := range chans {
		c, err := parseConfig(ch.Target.Config)
		if err != nil || !same(c) || c.channelID != ev.Channel || (c.threadTS != "" && ev.ThreadTS != c.threadTS) {
			continue
		}
		bound = true
		if isBot || ev.Type != "message" {
			continue
		}
		if bot, err := a.workspace(c).user(ctx); err == nil && ev.User == bot {
			continue
		}
		if secs, err := strconv.ParseFloat(ev.TS, 64); err == nil && ch.Predates(int64(secs*1000)) {
			continue
		}
		if outcome, err = a.receive(ctx, c, ev, ch.ID, in.Inbox(ch.ID)); err != nil {
			return "", err
		}
	}
	if bound || len(bots) == 0 {
		return outcome, nil
	}
	return a.toBots(ctx, ev, bots, in, same)
}

// receive submits the user message of one message event: [adapter.Accepted], or [adapter.Duplicate] when it was
// submitted already.
func (a *Adapter) receive(ctx context.Context, c *config, ev msgEvent, channel string, in adapter.Inbox) (adapter.Received, error) {
	msgID := MessageIDOf(ev.Channel, ev.TS)
	if seen, err := in.Seen(ctx, msgID); err != nil || seen {
		return adapter.Duplicate, err
	}
	m := profile.Message{MessageID: msgID, Text: ev.Text, CreatedAt: time.Now().UnixMilli()}
	if secs, err := strconv.ParseFloat(ev.TS, 64); err == nil {
		m.CreatedAt = int64(secs * 1000)
	}
	for _, f := range ev.Files {
		if err := adapter.FileOrNote(ctx, in, &m, f.Name, func() (profile.File, error) {
			return a.fetch(ctx, c, f.URLPrivate, f.Name, f.Mimetype, in)
		}); err != nil {
			return "", err
		}
	}
	return adapter.Submit(ctx, in, m, a.Logger, "slack_message_refused", channel)
}

// fetch copies a file of a message from its url_private (the bot token in the Authorization
// header) into the Transfer Plane.
func (a *Adapter) fetch(ctx context.Context, c *config, url, name, mime string, in adapter.Inbox) (profile.File, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil || (!strings.HasPrefix(url, "https://") && !strings.HasPrefix(url, "http://")) {
		return profile.File{}, profile.Errorf(profile.CodeFileDownloadFailed, "not a file URL")
	}
	req.Header.Set("Authorization", "Bearer "+c.botToken)
	resp, err := a.HTTPClient.Do(req)
	if err != nil {
		return profile.File{}, profile.Errorf(profile.CodeTargetUnavailable, "slack file download: %v", describe(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 500:
		return profile.File{}, profile.Errorf(profile.CodeTargetUnavailable, "slack file download: status %d", resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return profile.File{}, profile.Errorf(profile.CodeFileDownloadFailed, "slack file download: status %d", resp.StatusCode)
	case strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html"):
		return profile.File{}, profile.Errorf(profile.CodeFileDownloadFailed, "slack file download: a login page (the bot token lacks files:read?)")
	}
	if mime == "" {
		mime = "application/octet-stream"
	}
	typ := "file"
	switch {
	case strings.HasPrefix(mime, "image/"):
		typ = "image"
	case strings.HasPrefix(mime, "video/"):
		typ = "video"
	case strings.HasPrefix(mime, "audio/"):
		typ = "audio"
	}
	return in.PutFile(ctx, adapter.StoredFile{Type: typ, Filename: name, MimeType: mime}, resp.Body)
}

// errBadSignature answers an Events API call that fails the signature check, and one for a
// channel that is not open: the same answer, so the route tells nobody which channels exist.
var errBadSignature = profile.Errorf(profile.CodeUnauthorized, "bad or missing X-Slack-Signature")

// Refusal implements adapter.Receiver.
func (a *Adapter) Refusal() error { return errBadSignature }

// eventsRoute is the Events API request URL, for a channel with a signing secret.
var eventsRoute = adapter.Route[*config]{Path: "events", Refusal: errBadSignature,
	Accept: func(_ *http.Request, c *config) bool { return c.signingSecret != "" }}

// Receive implements adapter.Receiver for POST /v1/targets/slack/{channel}/events, the app's
// Events API request URL: the v0 signature (HMAC-SHA256 of "v0:{timestamp}:{body}" with the
// channel's signing_secret) is compared in constant time and the timestamp must be within
// SignatureWindow; url_verification is answered with its challenge; a person's message in one of
// the bot's bound conversations becomes a user message of that conversation's channel, one in a
// conversation no channel binds reaches the bots with the same bot token; 200 once it is durable
// (a failure is 503: Slack sends the event again).
func (a *Adapter) Receive(w http.ResponseWriter, r *http.Request, ch adapter.Channel, in adapter.Inboxes) (adapter.Received, error) {
	c, body, err := a.StartReceive(r, ch, eventsRoute)
	if err != nil {
		return "", err
	}
	var bots []adapter.Bot
	for _, b := range in.Bots() {
		if bc, err := a.botConfig(b); err == nil && bc.workspaceKey() == c.workspaceKey() {
			bots = append(bots, b)
		}
	}
	return a.serveEvents(w, r, body, c, in.Channels(), bots, in, ch.ID)
}

// signed checks an Events API call's v0 signature and its timestamp's freshness.
func (a *Adapter) signed(r *http.Request, body []byte, secret string) bool {
	ts, sig := r.Header.Get("X-Slack-Request-Timestamp"), r.Header.Get("X-Slack-Signature")
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || !strings.HasPrefix(sig, "v0=") {
		return false
	}
	if d := time.Since(time.Unix(secs, 0)); d > a.window || d < -a.window {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + ts + ":"))
	mac.Write(body)
	want := "v0=" + hex.EncodeToString(mac.Sum(nil))
	return hmac.Equal([]byte(want), []byte(sig))
}
