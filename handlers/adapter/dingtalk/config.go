package dingtalk

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/ximd/ximd/handlers/adapter"
)

// Config values (docs/adapters/dingtalk.md).
const (
	// DefaultAPIURL is the open platform's OpenAPI host.
	DefaultAPIURL = "https://api.dingtalk.com"
	// DefaultOAPIURL is the older host of media upload.
	DefaultOAPIURL = "https://oapi.dingtalk.com"
	// DefaultCardTemplate is the public AI card template (parameters flowStatus, msgContent).
	DefaultCardTemplate = "382e4302-551d-4880-bf29-a30acfab2e71.schema"
	// StreamingCard streams an answer into one AI card.
	StreamingCard adapter.Streaming = "card"
	// DefaultUpdatesPerSecond is the app's card update budget: DingTalk publishes no number
	// (claims run from 20 to 60 a second), so the default is well below every claim.
	DefaultUpdatesPerSecond = 10
	// DefaultFirstPreviewWords: a streamed card appears with its first three words.
	DefaultFirstPreviewWords = 3
	// InboundStream takes messages by Stream mode; InboundHTTP by the HTTP callback.
	InboundStream = "stream"
	InboundHTTP   = "http"
)

// config is a validated channel config.
type config struct {
	clientID       string
	clientSecret   string
	robotCode      string
	conversationID string // a group's openConversationId ("" for one-to-one)
	userID         string // a person's staff id ("" for a group)
	apiURL         string
	oapiURL        string
	streaming      adapter.Streaming
	template       string
	inbound        string
	updatesPerSec  int
	firstWords     int
}

// wireConfig is the JSON a channel is bound with.
type wireConfig struct {
	ClientID         string `json:"client_id"`
	ClientSecret     string `json:"client_secret"`
	RobotCode        string `json:"robot_code"`
	ConversationID   string `json:"conversation_id"`
	UserID           string `json:"user_id"`
	APIURL           string `json:"api_url"`
	OAPIURL          string `json:"oapi_url"`
	Streaming        string `json:"streaming"`
	CardTemplateID   string `json:"card_template_id"`
	Inbound          string `json:"inbound"`
	UpdatesPerSecond *int   `json:"card_updates_per_second"`
	FirstWords       *int   `json:"first_preview_words"`
}

// publicConfig is the config the channels API shows: no secret.
type publicConfig struct {
	ClientID         string            `json:"client_id"`
	RobotCode        string            `json:"robot_code"`
	ConversationID   string            `json:"conversation_id,omitempty"`
	UserID           string            `json:"user_id,omitempty"`
	APIURL           string            `json:"api_url"`
	OAPIURL          string            `json:"oapi_url"`
	Streaming        adapter.Streaming `json:"streaming"`
	CardTemplateID   string            `json:"card_template_id"`
	Inbound          string            `json:"inbound"`
	UpdatesPerSecond int               `json:"card_updates_per_second"`
	FirstWords       int               `json:"first_preview_words"`
}

// parseConfig decodes and validates a dingtalk config. Every error is a *profile.Error
// invalid_descriptor naming the field; none contains the secret.
func parseConfig(raw json.RawMessage) (*config, error) {
	w, ck := adapter.CheckConfig[wireConfig](raw)
	c := &config{}
	c.clientID = ck.ID("client_id", w.ClientID, adapter.PathSafe, "required: the app's AppKey (Client ID)")
	c.clientSecret = ck.Required("client_secret", w.ClientSecret, "required: the app's AppSecret (Client Secret)")
	c.robotCode = w.RobotCode
	if c.robotCode == "" {
		c.robotCode = c.clientID
	}
	c.conversationID, c.userID = w.ConversationID, w.UserID
	switch {
	case c.conversationID == "" && c.userID == "":
		ck.Fail("conversation_id", "a group's openConversationId, or user_id", "required: conversation_id (a group's openConversationId) or user_id (a person's staff id)")
	case c.conversationID != "" && c.userID != "":
		ck.Fail("user_id", "absent with conversation_id", "only one of conversation_id and user_id")
	}
	c.apiURL = ck.BaseURL("api_url", w.APIURL, DefaultAPIURL)
	c.oapiURL = ck.BaseURL("oapi_url", w.OAPIURL, DefaultOAPIURL)
	c.streaming = adapter.Enum(ck, "streaming", w.Streaming, StreamingCard, StreamingCard, adapter.StreamingNone)
	c.template = w.CardTemplateID
	if c.template == "" {
		c.template = DefaultCardTemplate
	}
	c.inbound = adapter.Enum(ck, "inbound", w.Inbound, InboundStream, InboundStream, InboundHTTP)
	c.updatesPerSec = ck.Int("card_updates_per_second", w.UpdatesPerSecond, DefaultUpdatesPerSecond, 1, 1000)
	c.firstWords = ck.Int("first_preview_words", w.FirstWords, DefaultFirstPreviewWords, 0, 100)
	return adapter.Checked(c, ck)
}

// appKey names the app (API host and client id, the secret digested): its shared client and
// its Stream connection, the poll key. Never a secret.
func (c *config) appKey() string {
	return "dingtalk." + digest(c.apiURL+"\x00"+c.clientID+"\x00"+c.clientSecret)
}

// group reports whether the channel is a group's.
func (c *config) group() bool { return c.conversationID != "" }

// openSpaceID is the card space of the channel's conversation.
func (c *config) openSpaceID() string {
	if c.group() {
		return "dtv1.card//IM_GROUP." + c.conversationID
	}
	return "dtv1.card//IM_ROBOT." + c.userID
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

func (c *config) public() publicConfig {
	return publicConfig{ClientID: c.clientID, RobotCode: c.robotCode, ConversationID: c.conversationID, UserID: c.userID,
		APIURL: c.apiURL, OAPIURL: c.oapiURL, Streaming: c.streaming, CardTemplateID: c.template, Inbound: c.inbound,
		UpdatesPerSecond: c.updatesPerSec, FirstWords: c.firstWords}
}
