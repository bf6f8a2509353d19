package slack

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/ximd/ximd/handlers/adapter"
)

// Config values (docs/adapters/slack.md).
const (
	// DefaultAPIURL is the public Web API base.
	DefaultAPIURL = "https://slack.com/api/"
	// StreamingStream streams with chat.startStream / appendStream / stopStream.
	StreamingStream adapter.Streaming = "stream"
	// DefaultFirstPreviewWords: a streamed answer appears with its first three words.
	DefaultFirstPreviewWords = 3
)

// config is a validated channel config.
type config struct {
	botToken      string
	channelID     string
	threadTS      string
	apiURL        string // ends with "/"
	appToken      string
	signingSecret string
	streaming     adapter.Streaming    // StreamingStream, adapter.StreamingEdit or adapter.StreamingNone
	activity      adapter.ActivityMode // adapter.ActivityStatus or adapter.ActivityNone
	firstWords    int
}

// wireConfig is the JSON a channel is bound with.
type wireConfig struct {
	BotToken      string `json:"bot_token"`
	ChannelID     string `json:"channel_id"`
	ThreadTS      string `json:"thread_ts"`
	APIURL        string `json:"api_url"`
	AppToken      string `json:"app_token"`
	SigningSecret string `json:"signing_secret"`
	Streaming     string `json:"streaming"`
	Activity      string `json:"activity"`
	FirstWords    *int   `json:"first_preview_words"`
}

// publicConfig is the config the channels API shows: no token, no secret.
type publicConfig struct {
	ChannelID  string               `json:"channel_id"`
	ThreadTS   string               `json:"thread_ts,omitempty"`
	APIURL     string               `json:"api_url"`
	Inbound    string               `json:"inbound"`
	Streaming  adapter.Streaming    `json:"streaming"`
	Activity   adapter.ActivityMode `json:"activity"`
	FirstWords int                  `json:"first_preview_words"`
}

// parseConfig decodes and validates a slack config. Every error is a *profile.Error
// invalid_descriptor naming the field; none contains a token or the secret.
func parseConfig(raw json.RawMessage) (*config, error) {
	w, ck := adapter.CheckConfig[wireConfig](raw)
	c := &config{botToken: w.BotToken, threadTS: w.ThreadTS, appToken: w.AppToken, signingSecret: w.SigningSecret}
	if !strings.HasPrefix(c.botToken, "xoxb-") {
		ck.Fail("bot_token", "a bot token, xoxb-…", "required: the app's bot token, xoxb-…")
	}
	c.channelID = ck.ID("channel_id", w.ChannelID, adapter.PathSafe+":", "required: the conversation's id, like C0123… or D0123…")
	if c.appToken != "" && !strings.HasPrefix(c.appToken, "xapp-") {
		ck.Fail("app_token", "an app-level token, xapp-…", "an app-level token, xapp-… (Socket Mode)")
	}
	c.apiURL = ck.BaseURL("api_url", w.APIURL, DefaultAPIURL) + "/"
	c.streaming = adapter.Enum(ck, "streaming", w.Streaming, StreamingStream, StreamingStream, adapter.StreamingEdit, adapter.StreamingNone)
	activity := adapter.ActivityNone
	if c.threadTS != "" {
		activity = adapter.ActivityStatus // a status needs a thread
	}
	c.activity = adapter.Enum(ck, "activity", w.Activity, activity, adapter.ActivityStatus, adapter.ActivityNone)
	if c.activity == adapter.ActivityStatus && c.threadTS == "" {
		ck.Fail("activity", `"none" without thread_ts`, `"status" needs thread_ts: Slack shows an assistant status in a thread`)
	}
	c.firstWords = ck.Int("first_preview_words", w.FirstWords, DefaultFirstPreviewWords, 0, 100)
	return adapter.Checked(c, ck)
}

// inbound names how the channel's messages come: "socket_mode", "events_api", or "none".
func (c *config) inbound() string {
	switch {
	case c.appToken != "":
		return "socket_mode"
	case c.signingSecret != "":
		return "events_api"
	}
	return "none"
}

// workspaceKey names the bot (API and bot token) without the token: its shared client.
func (c *config) workspaceKey() string { return digest(c.apiURL + "\x00" + c.botToken) }

// appKey names the app's Socket Mode connection (API and app token): the poll key.
func (c *config) appKey() string { return "slack." + digest(c.apiURL+"\x00"+c.appToken) }

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

func (c *config) public() publicConfig {
	return publicConfig{ChannelID: c.channelID, ThreadTS: c.threadTS, APIURL: c.apiURL, Inbound: c.inbound(),
		Streaming: c.streaming, Activity: c.activity, FirstWords: c.firstWords}
}
