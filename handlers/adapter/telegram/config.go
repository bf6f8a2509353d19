package telegram

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
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
	apiURL         string // no trailing slash
	streaming      string
	activity       string
	inbound        string
	webhookSecret  string
	firstWords     int
	editsPerMinute int
}

// wireConfig is the JSON a channel is bound with.
type wireConfig struct {
	Token          string          `json:"token"`
	ChatID         json.RawMessage `json:"chat_id"`
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
	ChatID         int64  `json:"chat_id"`
	APIURL         string `json:"api_url"`
	Streaming      string `json:"streaming"`
	Activity       string `json:"activity"`
	Inbound        string `json:"inbound"`
	FirstWords     int    `json:"first_preview_words"`
	EditsPerMinute int    `json:"edits_per_minute"`
}

// parseConfig decodes and validates a telegram config. Every error is a *profile.Error
// invalid_descriptor naming the field; none contains the token or the secret.
func parseConfig(raw json.RawMessage) (*config, error) {
	var w wireConfig
	if err := adapter.DecodeConfig(raw, &w); err != nil {
		return nil, err
	}
	c := &config{token: w.Token, streaming: w.Streaming, activity: w.Activity, inbound: w.Inbound, webhookSecret: w.WebhookSecret}
	if id, secret, sep := strings.Cut(c.token, ":"); !sep || id == "" || secret == "" || strings.ContainsAny(c.token, "/?# ") {
		return nil, invalid("target.config.token", "required: the bot token from @BotFather, like 123456:ABC-DEF…")
	} else if _, err := strconv.ParseInt(id, 10, 64); err != nil {
		return nil, invalid("target.config.token", "required: the bot token from @BotFather, like 123456:ABC-DEF…")
	}
	id, err := strconv.ParseInt(strings.Trim(string(bytes.TrimSpace(w.ChatID)), `"`), 10, 64)
	if err != nil || id == 0 {
		return nil, invalid("target.config.chat_id", "required: the chat's numeric id (a private chat's is the person's user id; a group's is negative)")
	}
	c.chatID = id
	if w.APIURL == "" {
		w.APIURL = DefaultAPIURL
	}
	u, err := url.Parse(w.APIURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, invalid("target.config.api_url", "must be an http(s) URL without user, query or fragment")
	}
	c.apiURL = strings.TrimRight(u.String(), "/")
	if c.streaming == "" {
		c.streaming = adapter.StreamingEdit
		if c.private() {
			c.streaming = adapter.StreamingDraft
		}
	}
	switch c.streaming {
	case adapter.StreamingEdit, adapter.StreamingNone:
	case adapter.StreamingDraft:
		if !c.private() {
			return nil, invalid("target.config.streaming", `"draft" works in private chats only (a positive chat_id); use "edit" in groups`)
		}
	default:
		return nil, invalid("target.config.streaming", `must be "draft", "edit" or "none"`)
	}
	if c.activity == "" {
		c.activity = DefaultActivity
	}
	if c.activity != adapter.ActivityTyping && c.activity != adapter.ActivityNone {
		return nil, invalid("target.config.activity", `must be "typing" or "none"`)
	}
	if c.inbound == "" {
		c.inbound = InboundPolling
	}
	switch c.inbound {
	case InboundPolling:
		if c.webhookSecret != "" {
			return nil, invalid("target.config.webhook_secret", `only with "inbound": "webhook"`)
		}
	case InboundWebhook:
		if !validSecret(c.webhookSecret) {
			return nil, invalid("target.config.webhook_secret", `required with "inbound": "webhook": 16-256 characters of A-Z, a-z, 0-9, _ and -`)
		}
	default:
		return nil, invalid("target.config.inbound", `must be "polling" or "webhook"`)
	}
	c.firstWords = DefaultFirstPreviewWords
	if w.FirstWords != nil {
		if *w.FirstWords < 0 || *w.FirstWords > 100 {
			return nil, invalid("target.config.first_preview_words", "must be 0..100")
		}
		c.firstWords = *w.FirstWords
	}
	c.editsPerMinute = DefaultGroupEditsPerMinute
	if c.private() {
		c.editsPerMinute = DefaultPrivateEditsPerMinute
	}
	if w.EditsPerMinute != 0 {
		if w.EditsPerMinute < 1 || w.EditsPerMinute > 600 {
			return nil, invalid("target.config.edits_per_minute", "must be 1..600")
		}
		c.editsPerMinute = w.EditsPerMinute
	}
	return c, nil
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
	return publicConfig{ChatID: c.chatID, APIURL: c.apiURL, Streaming: c.streaming, Activity: c.activity, Inbound: c.inbound,
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

func invalid(field, problem string) *profile.Error {
	return profile.Errorf(profile.CodeInvalidDescriptor, "%s: %s", field, problem)
}
