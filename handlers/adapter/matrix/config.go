package matrix

import (
	"encoding/json"
	"strings"

	"github.com/ximd/ximd/handlers/adapter"
)

// Config keys' defaults (edge-api §7.2.1).
const (
	DefaultStreaming = adapter.StreamingEdit
	DefaultActivity  = adapter.ActivityTyping
	// DefaultFirstPreviewWords: a streamed answer appears (and notifies) with its first three
	// words, not its first fragment.
	DefaultFirstPreviewWords = 3
)

// config is a validated channel config.
type config struct {
	homeserver  string // base URL, no trailing slash
	accessToken string
	roomID      string
	streaming   adapter.Streaming
	activity    adapter.ActivityMode
	firstWords  int
}

// wireConfig is the JSON a channel is bound with.
type wireConfig struct {
	Homeserver  string `json:"homeserver"`
	AccessToken string `json:"access_token"`
	RoomID      string `json:"room_id"`
	Streaming   string `json:"streaming"`
	Activity    string `json:"activity"`
	FirstWords  *int   `json:"first_preview_words"`
}

// publicConfig is the config the channels API shows: defaults filled in, no access token.
type publicConfig struct {
	Homeserver string               `json:"homeserver"`
	RoomID     string               `json:"room_id"`
	Streaming  adapter.Streaming    `json:"streaming"`
	Activity   adapter.ActivityMode `json:"activity"`
	FirstWords int                  `json:"first_preview_words"`
}

// parseConfig decodes and validates a matrix config. Every error is a *profile.Error
// invalid_descriptor naming the field; none contains the token.
func parseConfig(raw json.RawMessage) (*config, error) {
	w, ck := adapter.CheckConfig[wireConfig](raw)
	c := &config{roomID: w.RoomID}
	c.homeserver = ck.BaseURL("homeserver", w.Homeserver, "")
	c.accessToken = ck.Required("access_token", w.AccessToken, "required")
	if !strings.HasPrefix(c.roomID, "!") || !strings.Contains(c.roomID, ":") {
		ck.Fail("room_id", "a room id, !…:…", "required: a room id like !abc:example.org")
	}
	c.streaming = adapter.Enum(ck, "streaming", w.Streaming, DefaultStreaming, adapter.StreamingEdit, adapter.StreamingNone)
	c.activity = adapter.Enum(ck, "activity", w.Activity, DefaultActivity, adapter.ActivityTyping, adapter.ActivityNone)
	c.firstWords = ck.Int("first_preview_words", w.FirstWords, DefaultFirstPreviewWords, 0, 100)
	return adapter.Checked(c, ck)
}

func (c *config) public() publicConfig {
	return publicConfig{Homeserver: c.homeserver, RoomID: c.roomID, Streaming: c.streaming, Activity: c.activity, FirstWords: c.firstWords}
}
