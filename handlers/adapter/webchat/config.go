package webchat

import (
	"bytes"
	"encoding/json"
	"sort"
	"unicode/utf8"

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

// fieldPrefix names config fields in errors as they appear in the body of PUT /v1/channels/{id}.
const fieldPrefix = "target.config."

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

// ParseConfig decodes and validates a webchat config. Every error is a *profile.Error with code
// invalid_descriptor naming the field; none contains the secret.
func ParseConfig(raw json.RawMessage) (Config, error) {
	c := Config{Title: DefaultTitle}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return c, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return Config{}, invalid("target.config", "must be a JSON object")
	}
	var unknown []string
	for k := range fields {
		switch k {
		case "title", "secret", ChannelKey:
		default:
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Config{}, invalid(fieldPrefix+unknown[0], `unknown field (known: "title", "secret")`)
	}
	var err error
	if s, ok, e := stringField(fields, "title"); e != nil {
		return Config{}, e
	} else if ok {
		if len(s) > MaxTitleBytes || !utf8.ValidString(s) {
			return Config{}, invalid(fieldPrefix+"title", "must be valid UTF-8 of at most 200 bytes")
		}
		if s != "" {
			c.Title = s
		}
	}
	if c.Secret, _, err = stringField(fields, "secret"); err != nil {
		return Config{}, err
	}
	if c.Secret != "" && (len(c.Secret) < MinSecretBytes || len(c.Secret) > MaxSecretBytes) {
		return Config{}, invalid(fieldPrefix+"secret", "must be 16 to 256 bytes (omit it to have ximd generate one)")
	}
	if c.Channel, _, err = stringField(fields, ChannelKey); err != nil {
		return Config{}, err
	}
	if c.Channel != "" && !profile.ValidChannelID(c.Channel) {
		return Config{}, invalid(fieldPrefix+ChannelKey, "must be a channel id")
	}
	return c, nil
}

func (c Config) public() publicConfig {
	p := publicConfig{Title: c.Title, SecretSource: "generated"}
	if c.Secret != "" {
		p.SecretSource = "configured"
	}
	return p
}

// stringField reads fields[name] as a JSON string; absent or null is ("", false).
func stringField(fields map[string]json.RawMessage, name string) (string, bool, error) {
	raw, ok := fields[name]
	if !ok || bytes.Equal(raw, []byte("null")) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, invalid(fieldPrefix+name, "must be a string")
	}
	return s, true, nil
}

func invalid(field, problem string) *profile.Error {
	return profile.Errorf(profile.CodeInvalidDescriptor, "%s: %s", field, problem)
}
