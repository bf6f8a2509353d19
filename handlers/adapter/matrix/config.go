package matrix

import (
	"encoding/json"
	"net/url"
	"strings"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
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
	streaming   string
	activity    string
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
	Homeserver string `json:"homeserver"`
	RoomID     string `json:"room_id"`
	Streaming  string `json:"streaming"`
	Activity   string `json:"activity"`
	FirstWords int    `json:"first_preview_words"`
}

// parseConfig decodes and validates a matrix config. Every error is a *profile.Error
// invalid_descriptor naming the field; none contains the token.
func parseConfig(raw json.RawMessage) (*config, error) {
	var w wireConfig
	if err := adapter.DecodeConfig(raw, &w); err != nil {
		return nil, err
	}
	c := &config{accessToken: w.AccessToken, roomID: w.RoomID, streaming: w.Streaming, activity: w.Activity}
	u, err := url.Parse(w.Homeserver)
	switch {
	case w.Homeserver == "":
		return nil, invalid("target.config.homeserver", "required")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, invalid("target.config.homeserver", "must be an http(s) URL without user, query or fragment")
	}
	c.homeserver = strings.TrimRight(u.String(), "/")
	if c.accessToken == "" {
		return nil, invalid("target.config.access_token", "required")
	}
	if !strings.HasPrefix(c.roomID, "!") || !strings.Contains(c.roomID, ":") {
		return nil, invalid("target.config.room_id", "required: a room id like !abc:example.org")
	}
	if c.streaming == "" {
		c.streaming = DefaultStreaming
	}
	if c.streaming != adapter.StreamingEdit && c.streaming != adapter.StreamingNone {
		return nil, invalid("target.config.streaming", `must be "edit" or "none"`)
	}
	if c.activity == "" {
		c.activity = DefaultActivity
	}
	if c.activity != adapter.ActivityTyping && c.activity != adapter.ActivityNone {
		return nil, invalid("target.config.activity", `must be "typing" or "none"`)
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

func (c *config) public() publicConfig {
	return publicConfig{Homeserver: c.homeserver, RoomID: c.roomID, Streaming: c.streaming, Activity: c.activity, FirstWords: c.firstWords}
}

func invalid(field, problem string) *profile.Error {
	return profile.Errorf(profile.CodeInvalidDescriptor, "%s: %s", field, problem)
}
