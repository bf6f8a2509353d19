package wecom

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"

	"github.com/ximd/ximd/handlers/adapter"
)

// Config values (docs/adapters/wecom.md).
const (
	// DefaultWSURL is WeCom's long-connection endpoint for intelligent robots.
	DefaultWSURL = "wss://openws.work.weixin.qq.com"
	// StreamingStream answers with a stream message: one bubble updated with the whole text and
	// finished at the final.
	StreamingStream adapter.Streaming = "stream"
	// DefaultFirstPreviewWords: a streamed answer appears with its first three words.
	DefaultFirstPreviewWords = 3
)

// config is a validated channel config.
type config struct {
	botID      string
	secret     string
	chatID     string // a group's chatid ("" for a one-to-one binding)
	userID     string // a person's userid ("" for a group binding)
	wsURL      string
	streaming  adapter.Streaming // StreamingStream or adapter.StreamingNone
	botName    string            // the robot's name as people @ it ("" : the leading @word)
	firstWords int
}

// wireConfig is the JSON a channel is bound with.
type wireConfig struct {
	BotID      string `json:"bot_id"`
	Secret     string `json:"secret"`
	ChatID     string `json:"chat_id"`
	UserID     string `json:"user_id"`
	WSURL      string `json:"ws_url"`
	Streaming  string `json:"streaming"`
	BotName    string `json:"bot_name"`
	FirstWords *int   `json:"first_preview_words"`
}

// publicConfig is the config the channels API shows: no secret.
type publicConfig struct {
	BotID      string            `json:"bot_id"`
	ChatID     string            `json:"chat_id,omitempty"`
	UserID     string            `json:"user_id,omitempty"`
	WSURL      string            `json:"ws_url"`
	Streaming  adapter.Streaming `json:"streaming"`
	BotName    string            `json:"bot_name,omitempty"`
	FirstWords int               `json:"first_preview_words"`
}

// parseConfig decodes and validates a wecom config. Every error is a *profile.Error
// invalid_descriptor naming the field; none contains the secret.
func parseConfig(raw json.RawMessage) (*config, error) {
	c, ck := parse(raw)
	switch {
	case c.chatID != "" && c.userID != "":
		ck.Fail("chat_id", "one of chat_id or user_id", "give one of chat_id (a group) or user_id (a person), not both")
	case c.chatID == "" && c.userID == "" && !ck.Failed():
		ck.Fail("chat_id", "one of chat_id or user_id", "required: a group's chat_id or a person's user_id")
	}
	return adapter.Checked(c, ck)
}

func parse(raw json.RawMessage) (*config, *adapter.ConfigCheck) {
	w, ck := adapter.CheckConfig[wireConfig](raw)
	c := &config{botName: w.BotName}
	c.botID = ck.ID("bot_id", w.BotID, adapter.PathSafe, "required: the robot's Bot ID")
	c.secret = ck.Required("secret", w.Secret, "required: the robot's long-connection Secret")
	if w.ChatID != "" {
		c.chatID = ck.ID("chat_id", w.ChatID, adapter.PathSafe, "a group's chatid")
	}
	if w.UserID != "" {
		c.userID = ck.ID("user_id", w.UserID, adapter.PathSafe, "a person's userid")
	}
	c.wsURL = wsURL(ck, w.WSURL)
	c.streaming = adapter.Enum(ck, "streaming", w.Streaming, StreamingStream, StreamingStream, adapter.StreamingNone)
	c.firstWords = ck.Int("first_preview_words", w.FirstWords, DefaultFirstPreviewWords, 0, 100)
	return c, ck
}

// conversation is the conversation the channel binds: the group's chatid or the person's userid,
// as WeCom's callbacks and aibot_send_msg's chatid name it.
func (c *config) conversation() string {
	if c.chatID != "" {
		return c.chatID
	}
	return c.userID
}

// accountKey names the robot's client (endpoint, bot and secret) without the secret.
func (c *config) accountKey() string { return digest(c.wsURL + "\x00" + c.botID + "\x00" + c.secret) }

// pollKey names the robot's one long connection: the poll key.
func (c *config) pollKey() string { return "wecom." + digest(c.wsURL+"\x00"+c.botID) }

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

func (c *config) public() publicConfig {
	return publicConfig{BotID: c.botID, ChatID: c.chatID, UserID: c.userID, WSURL: c.wsURL, Streaming: c.streaming,
		BotName: c.botName, FirstWords: c.firstWords}
}

// wsURL is v, or DefaultWSURL when v is empty, as an absolute ws(s) URL with a host and without
// user or fragment.
func wsURL(ck *adapter.ConfigCheck, v string) string {
	const want = "a ws(s) URL without user or fragment"
	if v == "" {
		v = DefaultWSURL
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "" || u.User != nil || u.Fragment != "" {
		ck.Fail("ws_url", want, "must be "+want)
		return ""
	}
	return strings.TrimRight(u.String(), "/")
}

// config is the channel config p shows, with the robot's secret.
func (p publicConfig) config(secret string) *config {
	return &config{botID: p.BotID, secret: secret, chatID: p.ChatID, userID: p.UserID, wsURL: p.WSURL, streaming: p.Streaming,
		botName: p.BotName, firstWords: p.FirstWords}
}
