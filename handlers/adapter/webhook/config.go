package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/download"
	"github.com/ximd/ximd/profile"
)

// Config defaults and bounds (see the package documentation).
const (
	// DefaultStreaming is used when the config has no "streaming".
	DefaultStreaming = adapter.StreamingEdit
	// DefaultActivity is used when the config has no "activity".
	DefaultActivity = adapter.ActivityTyping
	// DefaultTimeout bounds each HTTP call when the config has no "timeout".
	DefaultTimeout = 10 * time.Second
	// MaxTimeout is the largest accepted "timeout": a stuck target must not
	// hold a channel's delivery for longer.
	MaxTimeout = 5 * time.Minute
)

// fieldPrefix names config fields in errors as they appear in the body of
// PUT /v1/channels/{id}.
const fieldPrefix = "target.config."

// config is a validated webhook config.
type config struct {
	url       *url.URL
	chatID    string
	secret    []byte
	streaming string
	activity  string
	timeout   time.Duration
	// fileHosts are the hosts files of user input may be downloaded from, besides url's host.
	fileHosts []string
	// dedupe: the target shows at most one message per idempotency_key (config "dedupe").
	dedupe bool
	// lookup: the target answers GET {url}/messages?idempotency_key=K (config "lookup").
	lookup bool
	// signature is what user input must carry (config "signature"): SignatureV1 (V1 or V2)
	// or SignatureV2 (V2 only: replays of old bodies are refused).
	signature string
}

// Values of config "signature".
const (
	SignatureV1 = "v1"
	SignatureV2 = "v2"
)

// publicConfig is the config as the channels API shows it: defaults filled
// in, no secret.
type publicConfig struct {
	URL       string   `json:"url"`
	ChatID    string   `json:"chat_id"`
	Streaming string   `json:"streaming"`
	Activity  string   `json:"activity"`
	Timeout   string   `json:"timeout"`
	FileHosts []string `json:"file_hosts,omitempty"`
	Dedupe    bool     `json:"dedupe"`
	Lookup    bool     `json:"lookup"`
	Signature string   `json:"signature"`
}

// parseConfig decodes and validates a webhook config. Every error is a
// *profile.Error with code invalid_descriptor naming the field; none
// contains the secret.
func parseConfig(raw json.RawMessage) (*config, error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, invalid("target.config", "required")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, invalid("target.config", "must be a JSON object")
	}
	var unknown []string
	for k := range fields {
		switch k {
		case "url", "chat_id", "secret", "streaming", "activity", "timeout", "file_hosts", "dedupe", "lookup", "signature":
		default:
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, invalid(fieldPrefix+unknown[0], "unknown field")
	}

	c := &config{streaming: DefaultStreaming, activity: DefaultActivity, timeout: DefaultTimeout, signature: SignatureV1}

	rawURL, err := stringField(fields, "url", true)
	if err != nil {
		return nil, err
	}
	if c.url, err = parseTargetURL(rawURL); err != nil {
		return nil, err
	}
	if c.chatID, err = stringField(fields, "chat_id", true); err != nil {
		return nil, err
	}
	secret, err := stringField(fields, "secret", true)
	if err != nil {
		return nil, err
	}
	c.secret = []byte(secret)

	if s, err := stringField(fields, "streaming", false); err != nil {
		return nil, err
	} else if s != "" {
		switch s {
		case adapter.StreamingEdit, adapter.StreamingNone:
			c.streaming = s
		default:
			return nil, invalid(fieldPrefix+"streaming", `must be "edit" or "none"`)
		}
	}
	if s, err := stringField(fields, "activity", false); err != nil {
		return nil, err
	} else if s != "" {
		switch s {
		case adapter.ActivityStatus, adapter.ActivityTyping, adapter.ActivityNone:
			c.activity = s
		default:
			return nil, invalid(fieldPrefix+"activity", `must be "status", "typing" or "none"`)
		}
	}
	if s, err := stringField(fields, "signature", false); err != nil {
		return nil, err
	} else if s != "" {
		if s != SignatureV1 && s != SignatureV2 {
			return nil, invalid(fieldPrefix+"signature", `must be "v1" or "v2"`)
		}
		c.signature = s
	}
	if s, err := stringField(fields, "timeout", false); err != nil {
		return nil, err
	} else if s != "" {
		d, perr := time.ParseDuration(s)
		switch {
		case perr != nil:
			return nil, invalid(fieldPrefix+"timeout", `must be a Go duration such as "10s"`)
		case d <= 0:
			return nil, invalid(fieldPrefix+"timeout", "must be positive")
		case d > MaxTimeout:
			return nil, invalid(fieldPrefix+"timeout", "must be at most "+MaxTimeout.String())
		}
		c.timeout = d
	}
	for name, dst := range map[string]*bool{"dedupe": &c.dedupe, "lookup": &c.lookup} {
		if raw, ok := fields[name]; ok && !bytes.Equal(raw, []byte("null")) {
			if err := json.Unmarshal(raw, dst); err != nil {
				return nil, invalid(fieldPrefix+name, "must be true or false")
			}
		}
	}
	if raw, ok := fields["file_hosts"]; ok && !bytes.Equal(raw, []byte("null")) {
		if err := json.Unmarshal(raw, &c.fileHosts); err != nil {
			return nil, invalid(fieldPrefix+"file_hosts", "must be an array of host names")
		}
		for i, h := range c.fileHosts {
			if h == "" || strings.ContainsAny(h, "/@ ") || len(h) > 253 || download.Allowed([]string{h}).Validate() != nil {
				return nil, invalid(fmt.Sprintf("%sfile_hosts[%d]", fieldPrefix, i), `must be a host such as "files.example.com", "*.example.com" or "10.0.0.5:8443"`)
			}
		}
	}
	return c, nil
}

// stringField reads fields[name] as a JSON string. A required field must be
// present and non-empty; an optional one that is absent, null or "" reads
// as "".
func stringField(fields map[string]json.RawMessage, name string, required bool) (string, error) {
	raw, ok := fields[name]
	if !ok || bytes.Equal(raw, []byte("null")) {
		if required {
			return "", invalid(fieldPrefix+name, "required")
		}
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", invalid(fieldPrefix+name, "must be a string")
	}
	if required && s == "" {
		return "", invalid(fieldPrefix+name, "must not be empty")
	}
	return s, nil
}

// parseTargetURL accepts an absolute http(s) URL with a host, no
// user:password and no fragment.
func parseTargetURL(s string) (*url.URL, error) {
	const field = fieldPrefix + "url"
	u, err := url.Parse(s)
	if err != nil {
		return nil, invalid(field, "not a valid URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, invalid(field, "must be an absolute http or https URL")
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		return nil, invalid(field, "must be an absolute http or https URL with a host")
	case u.User != nil:
		return nil, invalid(field, "must not contain user information; use secret")
	case u.Fragment != "" || strings.HasSuffix(s, "#"):
		return nil, invalid(field, "must not contain a fragment")
	}
	return u, nil
}

// public is the config as the channels API shows it.
func (c *config) public() publicConfig {
	return publicConfig{
		URL:       redactQuery(c.url),
		ChatID:    c.chatID,
		Streaming: c.streaming,
		Activity:  c.activity,
		Timeout:   c.timeout.String(),
		FileHosts: c.fileHosts,
		Dedupe:    c.dedupe,
		Lookup:    c.lookup,
		Signature: c.signature,
	}
}

// redactQuery is u with every query value replaced by "redacted": a query string may carry a
// credential (…?token=…), and the channels API never shows one.
func redactQuery(u *url.URL) string {
	if u.RawQuery == "" {
		return u.String()
	}
	v := *u
	q := v.Query()
	for k := range q {
		q[k] = []string{"redacted"}
	}
	v.RawQuery = q.Encode()
	return v.String()
}

// capabilities of a target opened with c.
func (c *config) capabilities() adapter.Capabilities {
	caps := adapter.Capabilities{Streaming: c.streaming, Activity: c.activity, Reply: adapter.ReplyNative}
	switch {
	case c.lookup:
		caps.InDoubt = adapter.InDoubtLookup
	case c.dedupe:
		caps.InDoubt = adapter.InDoubtDedupe
	}
	caps.InDoubt = caps.InDoubtRule()
	return caps
}

// invalid is the invalid_descriptor error for field.
func invalid(field, problem string) *profile.Error {
	return profile.Errorf(profile.CodeInvalidDescriptor, "%s: %s", field, problem)
}
