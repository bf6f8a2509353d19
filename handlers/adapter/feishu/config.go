package feishu

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/ximd/ximd/handlers/adapter"
)

// Config defaults (docs/adapters/feishu.md).
const (
	// DefaultBaseURL is Feishu's open API; Lark's is https://open.larksuite.com.
	DefaultBaseURL = "https://open.feishu.cn"
	// StreamingCard streams an answer into a CardKit card in streaming mode.
	StreamingCard adapter.Streaming = "card"
	// DefaultFirstPreviewWords: a streamed answer appears with its first three words.
	DefaultFirstPreviewWords = 3
)

// config is a validated channel config.
type config struct {
	appID             string
	appSecret         string
	chatID            string
	baseURL           string            // no trailing slash
	streaming         adapter.Streaming // StreamingCard or adapter.StreamingNone
	verificationToken string
	encryptKey        string
	firstWords        int
}

// wireConfig is the JSON a channel is bound with.
type wireConfig struct {
	AppID             string `json:"app_id"`
	AppSecret         string `json:"app_secret"`
	ChatID            string `json:"chat_id"`
	BaseURL           string `json:"base_url"`
	Streaming         string `json:"streaming"`
	Activity          string `json:"activity"`
	VerificationToken string `json:"verification_token"`
	EncryptKey        string `json:"encrypt_key"`
	FirstWords        *int   `json:"first_preview_words"`
}

// publicConfig is the config the channels API shows: no secret, no token, no key.
type publicConfig struct {
	AppID      string               `json:"app_id"`
	ChatID     string               `json:"chat_id"`
	BaseURL    string               `json:"base_url"`
	Streaming  adapter.Streaming    `json:"streaming"`
	Activity   adapter.ActivityMode `json:"activity"`
	Events     bool                 `json:"events"`
	FirstWords int                  `json:"first_preview_words"`
}

// parseConfig decodes and validates a feishu config. Every error is a *profile.Error
// invalid_descriptor naming the field; none contains a secret.
func parseConfig(raw json.RawMessage) (*config, error) {
	w, ck := adapter.CheckConfig[wireConfig](raw)
	c := &config{verificationToken: w.VerificationToken, encryptKey: w.EncryptKey}
	c.appID = ck.ID("app_id", w.AppID, adapter.PathSafe, "required: the app's App ID, like cli_a1b2c3…")
	c.appSecret = ck.Required("app_secret", w.AppSecret, "required: the app's App Secret")
	c.chatID = ck.ID("chat_id", w.ChatID, adapter.PathSafe, "required: the chat's id, like oc_…")
	c.baseURL = ck.BaseURL("base_url", w.BaseURL, DefaultBaseURL)
	c.streaming = adapter.Enum(ck, "streaming", w.Streaming, StreamingCard, StreamingCard, adapter.StreamingNone)
	if w.Activity != "" && w.Activity != string(adapter.ActivityNone) {
		ck.Fail("activity", `"none"`, `must be "none": Feishu has no typing indicator for bots`)
	}
	c.firstWords = ck.Int("first_preview_words", w.FirstWords, DefaultFirstPreviewWords, 0, 100)
	return adapter.Checked(c, ck)
}

// events reports whether the channel takes Feishu's event calls: they are checked with the
// encrypt key (signature) or the verification token, so one of them is needed.
func (c *config) events() bool { return c.encryptKey != "" || c.verificationToken != "" }

// appKey names the app (API base, id, secret) without the secret: the key of its shared
// client.
func (c *config) appKey() string {
	sum := sha256.Sum256([]byte(c.baseURL + "\x00" + c.appID + "\x00" + c.appSecret))
	return hex.EncodeToString(sum[:16])
}

func (c *config) public() publicConfig {
	return publicConfig{AppID: c.appID, ChatID: c.chatID, BaseURL: c.baseURL, Streaming: c.streaming,
		Activity: adapter.ActivityNone, Events: c.events(), FirstWords: c.firstWords}
}
