package webchat

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// Config limits.
const (
	// DefaultTitle is the page title when the config has none.
	DefaultTitle = "ximd webchat"
	// MaxTitleBytes bounds "title".
	MaxTitleBytes = 200
	// MinSecretBytes is the least length of an explicit "secret".
	MinSecretBytes = 16
	// MaxSecretBytes bounds an explicit "secret".
	MaxSecretBytes = 256
)

// ChannelKey is the config key ximd stamps with the channel id before a worker opens the target
// ([WithChannelIDs]); a value given in PUT /v1/channels/{id} is replaced.
const ChannelKey = "channel"

// Config is a validated webchat config.
type Config struct {
	// Title is shown as the page's title.
	Title string
	// Secret, when set, is the page secret itself; empty means ximd derives one per channel
	// opening (see package page). Never logged or returned.
	Secret string
	// Channel is the channel id stamped by [WithChannelIDs] ("" when not stamped).
	Channel string
}

// publicConfig is the config as the channels API shows it: no secret.
type publicConfig struct {
	Title        string `json:"title"`
	SecretSource string `json:"secret"`
}

// wireConfig is the JSON a channel is bound with.
type wireConfig struct {
	Title   string `json:"title"`
	Secret  string `json:"secret"`
	Channel string `json:"channel"` // ChannelKey
}

// ParseConfig decodes and validates a webchat config; no config (empty or null) is the defaults.
// Every error is a *profile.Error with code invalid_descriptor naming the field; none contains
// the secret.
func ParseConfig(raw json.RawMessage) (Config, error) {
	if adapter.NoConfig(raw) {
		return Config{Title: DefaultTitle}, nil
	}
	w, ck := adapter.CheckConfig[wireConfig](raw)
	if ce := ck.Refusal(); ce != nil && ce.Kind == adapter.ConfigUnknownField {
		ce.Problem = `unknown field (known: "title", "secret")` // the channel key is ximd's own
	}
	c := Config{Title: DefaultTitle, Secret: w.Secret, Channel: w.Channel}
	if len(w.Title) > MaxTitleBytes || !utf8.ValidString(w.Title) {
		ck.Fail("title", "UTF-8 of at most 200 bytes", "must be valid UTF-8 of at most 200 bytes")
	}
	if w.Title != "" {
		c.Title = w.Title
	}
	if c.Secret != "" && (len(c.Secret) < MinSecretBytes || len(c.Secret) > MaxSecretBytes) {
		ck.Fail("secret", "16 to 256 bytes", "must be 16 to 256 bytes (omit it to have ximd generate one)")
	}
	if c.Channel != "" && !profile.ValidChannelID(c.Channel) {
		ck.Fail(ChannelKey, "a channel id", "must be a channel id")
	}
	return adapter.Checked(c, ck)
}

func (c Config) public() publicConfig {
	p := publicConfig{Title: c.Title, SecretSource: "generated"}
	if c.Secret != "" {
		p.SecretSource = "configured"
	}
	return p
}
