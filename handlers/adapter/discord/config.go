package discord

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
)

// Config values and platform limits (docs/adapters/discord.md).
const (
	// DefaultAPIURL is Discord's REST API base (API v10).
	DefaultAPIURL = "https://discord.com/api/v10"
	// MaxTextLength is the most characters a message's content holds.
	MaxTextLength = 2000
	// DefaultFirstPreviewWords: a streamed answer appears with its first three words.
	DefaultFirstPreviewWords = 3
	// TypingRenewal: Discord shows typing for 10 s; it is posted again every 8 s.
	TypingRenewal = 8 * time.Second
	// NonceWindow is how long Discord answers a create with an enforced nonce already used by
	// the message made then (Discord documents "the past few minutes").
	NonceWindow = 5 * time.Minute
	// EditInterval is the least time between two edits (or creates) of a streamed answer in one
	// channel, and EditBurst of them fit in five seconds (Discord's observed 5 in 5 s per channel).
	EditInterval = time.Second
	EditBurst    = 5
	// MaxFileSize is the largest file Discord takes by default (10 MiB); MaxFilesPerMessage the
	// most attachments of one message.
	MaxFileSize        = 10 << 20
	MaxFilesPerMessage = 10
)

// config is a validated channel config.
type config struct {
	botToken   string
	channelID  string
	apiURL     string // without a trailing "/"
	gatewayURL string // "": what GET {api}/gateway/bot answers
	streaming  adapter.Streaming
	activity   adapter.ActivityMode
	firstWords int
}

// wireConfig is the JSON a channel is bound with.
type wireConfig struct {
	BotToken   string `json:"bot_token"`
	ChannelID  string `json:"channel_id"`
	APIURL     string `json:"api_url"`
	GatewayURL string `json:"gateway_url"`
	Streaming  string `json:"streaming"`
	Activity   string `json:"activity"`
	FirstWords *int   `json:"first_preview_words"`
}

// publicConfig is the config the channels API shows: no token.
type publicConfig struct {
	ChannelID  string               `json:"channel_id"`
	APIURL     string               `json:"api_url"`
	GatewayURL string               `json:"gateway_url,omitempty"`
	Streaming  adapter.Streaming    `json:"streaming"`
	Activity   adapter.ActivityMode `json:"activity"`
	FirstWords int                  `json:"first_preview_words"`
}

// parseConfig decodes and validates a discord config. Every error is a *profile.Error
// invalid_descriptor naming the field; none contains the token.
func parseConfig(raw json.RawMessage) (*config, error) {
	w, ck := adapter.CheckConfig[wireConfig](raw)
	c := &config{botToken: strings.TrimPrefix(w.BotToken, "Bot ")}
	if c.botToken == "" || strings.ContainsAny(c.botToken, " \t\r\n") {
		ck.Fail("bot_token", "the bot's token", "required: the bot's token (Developer Portal, Bot, Reset Token)")
	}
	c.channelID = ck.ID("channel_id", w.ChannelID, adapter.PathSafe, "required: the channel's id (a guild text channel, a thread or a DM channel)")
	if c.channelID != "" && !snowflake(c.channelID) {
		ck.Fail("channel_id", "a snowflake id", "must be a channel id (digits)")
	}
	c.apiURL = ck.BaseURL("api_url", w.APIURL, DefaultAPIURL)
	if w.GatewayURL != "" {
		u, err := url.Parse(w.GatewayURL)
		if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" || u.User != nil || u.Fragment != "" {
			ck.Fail("gateway_url", "a ws(s) URL", "must be a ws:// or wss:// URL")
		}
		c.gatewayURL = w.GatewayURL
	}
	c.streaming = adapter.Enum(ck, "streaming", w.Streaming, adapter.StreamingEdit, adapter.StreamingEdit, adapter.StreamingNone)
	c.activity = adapter.Enum(ck, "activity", w.Activity, adapter.ActivityTyping, adapter.ActivityTyping, adapter.ActivityNone)
	c.firstWords = ck.Int("first_preview_words", w.FirstWords, DefaultFirstPreviewWords, 0, 100)
	return adapter.Checked(c, ck)
}

// snowflake reports whether s is a Discord id: digits only.
func snowflake(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// accountKey names the bot (API and token) without the token: its shared client and its one
// gateway connection, the poll key.
func (c *config) accountKey() string { return "discord." + digest(c.apiURL+"\x00"+c.botToken) }

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

func (c *config) public() publicConfig {
	return publicConfig{ChannelID: c.channelID, APIURL: c.apiURL, GatewayURL: c.gatewayURL,
		Streaming: c.streaming, Activity: c.activity, FirstWords: c.firstWords}
}
