package telegram

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
)

// Config defaults (docs/adapters/telegram.md).
const (
	// DefaultAPIURL is the public Bot API server.
	DefaultAPIURL = "https://api.telegram.org"
	// DefaultActivity shows thinking and tools as "typing".
	DefaultActivity = adapter.ActivityTyping
	// DefaultFirstPreviewWords: a streamed answer appears (and notifies) with its first three
	// words, not a fragment.
	DefaultFirstPreviewWords = 3
	// DefaultPrivateEditsPerMinute and DefaultGroupEditsPerMinute are the per-chat budgets of
	// messages and edits (Bot FAQ: about one message a second in a chat, 20 a minute in a group).
	DefaultPrivateEditsPerMinute = 60
	DefaultGroupEditsPerMinute   = 20

	// InboundPolling takes user messages by getUpdates long polling; InboundWebhook by
	// Telegram's calls to POST /v1/targets/telegram/{channel}/updates.
	InboundPolling = "polling"
	InboundWebhook = "webhook"
)

// config is a validated channel config.
type config struct {
	token          string
	chatID         int64
	threadID       int    // a forum topic's message_thread_id; 0: none (the chat's main timeline)
	apiURL         string // no trailing slash
	streaming      adapter.Streaming
	activity       adapter.ActivityMode
	inbound        string
	webhookSecret  string
	firstWords     int
	editsPerMinute int
}

// wireConfig is the JSON a channel is bound with.
type wireConfig struct {
	Token          string          `json:"token"`
	ChatID         json.RawMessage `json:"chat_id"`
	ThreadID       *int            `json:"message_thread_id"`
	APIURL         string          `json:"api_url"`
	Streaming      string          `json:"streaming"`
	Activity       string          `json:"activity"`
	Inbound        string          `json:"inbound"`
	WebhookSecret  string          `json:"webhook_secret"`
	FirstWords     *int            `json:"first_preview_words"`
	EditsPerMinute int             `json:"edits_per_minute"`
}

// publicConfig is the config the channels API shows: defaults filled in, no token, no secret.
type publicConfig struct {
	ChatID         int64                `json:"chat_id"`
	ThreadID       int                  `json:"message_thread_id,omitempty"`
	APIURL         string               `json:"api_url"`
	Streaming      adapter.Streaming    `json:"streaming"`
	Activity       adapter.ActivityMode `json:"activity"`
	Inbound        string               `json:"inbound"`
	FirstWords     int                  `json:"first_preview_words"`
	EditsPerMinute int                  `json:"edits_per_minute"`
}

// parseConfig decodes and validates a telegram config. Every error is a *profile.Error
// invalid_descriptor naming the field; none contains the token or the secret.
func parseConfig(raw json.RawMessage) (*config, error) {
	w, ck := adapter.CheckConfig[wireConfig](raw)
	c := &config{token: w.Token, webhookSecret: w.WebhookSecret}
	if !validToken(c.token) {
		ck.Fail("token", "a bot token, <bot id>:<secret>", "required: the bot token from @BotFather, like 123456:ABC-DEF…")
	}
	id, err := strconv.ParseInt(strings.Trim(string(bytes.TrimSpace(w.ChatID)), `"`), 10, 64)
	if err != nil || id == 0 {
		ck.Fail("chat_id", "a non-zero integer", "required: the chat's numeric id (a private chat's is the person's user id; a group's is negative)")
	}
	c.chatID = id
	if w.ThreadID != nil {
		c.threadID = ck.Int("message_thread_id", w.ThreadID, 0, 1, math.MaxInt32)
	}
	c.apiURL = ck.BaseURL("api_url", w.APIURL, DefaultAPIURL)
	streaming := adapter.StreamingEdit
	if c.private() {
		streaming = adapter.StreamingDraft
	}
	c.streaming = adapter.Enum(ck, "streaming", w.Streaming, streaming, adapter.StreamingDraft, adapter.StreamingEdit, adapter.StreamingNone)
	if c.streaming == adapter.StreamingDraft && !c.private() {
		ck.Fail("streaming", `"edit" or "none" in a group`, `"draft" works in private chats only (a positive chat_id); use "edit" in groups`)
	}
	c.activity = adapter.Enum(ck, "activity", w.Activity, DefaultActivity, adapter.ActivityTyping, adapter.ActivityNone)
	c.inbound = adapter.Enum(ck, "inbound", w.Inbound, InboundPolling, InboundPolling, InboundWebhook)
	switch {
	case ck.Failed():
	case c.inbound == InboundPolling && c.webhookSecret != "":
		ck.Fail("webhook_secret", "nothing", `only with "inbound": "webhook"`)
	case c.inbound == InboundWebhook && !validSecret(c.webhookSecret):
		ck.Fail("webhook_secret", "16-256 characters of A-Z, a-z, 0-9, _ and -",
			`required with "inbound": "webhook": 16-256 characters of A-Z, a-z, 0-9, _ and -`)
	}
	c.firstWords = ck.Int("first_preview_words", w.FirstWords, DefaultFirstPreviewWords, 0, 100)
	var editsPerMinute *int // 0 is the default, as absent is
	if w.EditsPerMinute != 0 {
		editsPerMinute = &w.EditsPerMinute
	}
	c.editsPerMinute = ck.Int("edits_per_minute", editsPerMinute, DefaultGroupEditsPerMinute, 1, 600)
	if editsPerMinute == nil && c.private() {
		c.editsPerMinute = DefaultPrivateEditsPerMinute
	}
	return adapter.Checked(c, ck)
}

// validToken: a bot token is "<bot id>:<secret>", the id a number, nothing that breaks a URL
// path (the token is a path segment of every call).
func validToken(token string) bool {
	id, secret, sep := strings.Cut(token, ":")
	if !sep || id == "" || secret == "" || strings.ContainsAny(token, adapter.PathSafe) {
		return false
	}
	_, err := strconv.ParseInt(id, 10, 64)
	return err == nil
}

// private reports whether the chat is a private chat (a user id; groups and channels have
// negative ids).
func (c *config) private() bool { return c.chatID > 0 }

// interval is the least time between two messages or edits in the chat (its budget).
func (c *config) interval() time.Duration { return time.Minute / time.Duration(c.editsPerMinute) }

// botKey names the bot (its API server and token) without the token: the poll key of every
// channel of the bot, and the key of its shared client.
func (c *config) botKey() string {
	sum := sha256.Sum256([]byte(c.apiURL + "\x00" + c.token))
	return "telegram." + hex.EncodeToString(sum[:16])
}

// botID is the bot's user id, the token's first part.
func (c *config) botID() int64 {
	id, _, _ := strings.Cut(c.token, ":")
	n, _ := strconv.ParseInt(id, 10, 64)
	return n
}

func (c *config) public() publicConfig {
	return publicConfig{ChatID: c.chatID, ThreadID: c.threadID, APIURL: c.apiURL, Streaming: c.streaming, Activity: c.activity, Inbound: c.inbound,
		FirstWords: c.firstWords, EditsPerMinute: c.editsPerMinute}
}

// validSecret: Telegram's secret_token is 1-256 characters of A-Z, a-z, 0-9, _ and -; ximd asks
// for at least 16, so it cannot be guessed.
func validSecret(s string) bool {
	if len(s) < 16 || len(s) > 256 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
