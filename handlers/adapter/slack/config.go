package slack

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// Config values (docs/adapters/slack.md).
const (
	// DefaultAPIURL is the public Web API base.
	DefaultAPIURL = "https://slack.com/api/"
	// StreamingStream streams with chat.startStream / appendStream / stopStream.
	StreamingStream = "stream"
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
	streaming     string // StreamingStream, adapter.StreamingEdit or adapter.StreamingNone
	activity      string // adapter.ActivityStatus or adapter.ActivityNone
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
	ChannelID  string `json:"channel_id"`
	ThreadTS   string `json:"thread_ts,omitempty"`
	APIURL     string `json:"api_url"`
	Inbound    string `json:"inbound"`
	Streaming  string `json:"streaming"`
	Activity   string `json:"activity"`
	FirstWords int    `json:"first_preview_words"`
}

// parseConfig decodes and validates a slack config. Every error is a *profile.Error
// invalid_descriptor naming the field; none contains a token or the secret.
func parseConfig(raw json.RawMessage) (*config, error) {
	var w wireConfig
	if err := adapter.DecodeConfig(raw, &w); err != nil {
		return nil, err
	}
	c := &config{botToken: w.BotToken, channelID: w.ChannelID, threadTS: w.ThreadTS, appToken: w.AppToken,
		signingSecret: w.SigningSecret, streaming: w.Streaming, activity: w.Activity}
	switch {
	case !strings.HasPrefix(c.botToken, "xoxb-"):
		return nil, invalid("target.config.bot_token", "required: the app's bot token, xoxb-…")
	case c.channelID == "" || strings.ContainsAny(c.channelID, " /?#:"):
		return nil, invalid("target.config.channel_id", "required: the conversation's id, like C0123… or D0123…")
	case c.appToken != "" && !strings.HasPrefix(c.appToken, "xapp-"):
		return nil, invalid("target.config.app_token", "an app-level token, xapp-… (Socket Mode)")
	}
	if w.APIURL == "" {
		w.APIURL = DefaultAPIURL
	}
	u, err := url.Parse(w.APIURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, invalid("target.config.api_url", "must be an http(s) URL without user, query or fragment")
	}
	c.apiURL = strings.TrimRight(u.String(), "/") + "/"
	if c.streaming == "" {
		c.streaming = StreamingStream
	}
	switch c.streaming {
	case StreamingStream, adapter.StreamingEdit, adapter.StreamingNone:
	default:
		return nil, invalid("target.config.streaming", `must be "stream", "edit" or "none"`)
	}
	if c.activity == "" {
		c.activity = adapter.ActivityNone
		if c.threadTS != "" {
			c.activity = adapter.ActivityStatus // a status needs a thread
		}
	}
	switch {
	case c.activity == adapter.ActivityStatus && c.threadTS == "":
		return nil, invalid("target.config.activity", `"status" needs thread_ts: Slack shows an assistant status in a thread`)
	case c.activity != adapter.ActivityStatus && c.activity != adapter.ActivityNone:
		return nil, invalid("target.config.activity", `must be "status" or "none"`)
	}
	c.firstWords = DefaultFirstPreviewWords
	if w.FirstWords != nil {
		if *w.FirstWords < 0 || *w.FirstWords > 100 {
			return nil, invalid("target.config.first_preview_words", "must be 0..100")
		}
		c.firstWords = *w.FirstWords
	}
	return c, nil
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

func invalid(field, problem string) *profile.Error {
	return profile.Errorf(profile.CodeInvalidDescriptor, "%s: %s", field, problem)
}
