package webchat

import (
	"encoding/json"
	"fmt"
	"regexp"
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
	// FrameAncestors are the origins whose pages may embed a bot's public page in a frame
	// (its Content-Security-Policy frame-ancestors); none: it cannot be framed.
	FrameAncestors []string
}

// publicConfig is the config as the channels API shows it: no secret.
type publicConfig struct {
	Title          string   `json:"title"`
	SecretSource   string   `json:"secret"`
	FrameAncestors []string `json:"frame_ancestors,omitempty"`
}

// wireConfig is the JSON a channel is bound with.
type wireConfig struct {
	Title          string   `json:"title"`
	Secret         string   `json:"secret"`
	Channel        string   `json:"channel"` // ChannelKey
	FrameAncestors []string `json:"frame_ancestors" want:"an array of origins"`
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
		ce.Problem = `unknown field (known: "title", "secret", "frame_ancestors")` // the channel key is ximd's own
	}
	c := Config{Title: DefaultTitle, Secret: w.Secret, Channel: w.Channel, FrameAncestors: w.FrameAncestors}
	for i, o := range c.FrameAncestors {
		if !originPattern.MatchString(o) {
			ck.Fail(fmt.Sprintf("frame_ancestors[%d]", i), "an origin", `must be an origin such as "https://www.example.com" or "http://localhost:3000"`)
		}
	}
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

// originPattern is a web origin: scheme, host, optional port, nothing else.
var originPattern = regexp.MustCompile(`^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?$`)

func (c Config) public() publicConfig {
	p := publicConfig{Title: c.Title, SecretSource: "generated", FrameAncestors: c.FrameAncestors}
	if c.Secret != "" {
		p.SecretSource = "configured"
	}
	return p
}
