package webhook

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/download"
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

// config is a validated webhook config.
type config struct {
	url       *url.URL
	chatID    string
	secret    []byte
	streaming adapter.Streaming
	activity  adapter.ActivityMode
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
	// format is how the agent's Markdown reaches the target (config "format"): FormatMarkdown
	// (text as is) or FormatHTML (every message call also carries "html").
	format string
}

// Values of config "signature".
const (
	SignatureV1 = "v1"
	SignatureV2 = "v2"
)

// Values of config "format" (edge-api §7.3).
const (
	// FormatMarkdown (the default): "text" is the agent's Markdown as it wrote it.
	FormatMarkdown = "markdown"
	// FormatHTML: every POST and PATCH of a message also carries "html", the text rendered as
	// the webchat page shows it (markdown.Web: an allow-list of tags and attributes, every text
	// escaped, raw HTML as text, links http, https and mailto only).
	FormatHTML = "html"
)

// publicConfig is the config as the channels API shows it: defaults filled
// in, no secret.
type publicConfig struct {
	URL       string               `json:"url"`
	ChatID    string               `json:"chat_id"`
	Streaming adapter.Streaming    `json:"streaming"`
	Activity  adapter.ActivityMode `json:"activity"`
	Timeout   string               `json:"timeout"`
	FileHosts []string             `json:"file_hosts,omitempty"`
	Dedupe    bool                 `json:"dedupe"`
	Lookup    bool                 `json:"lookup"`
	Signature string               `json:"signature"`
	Format    string               `json:"format"`
}

// wireConfig is the JSON a channel is bound with. url, chat_id and secret are pointers: absent
// (or null) is refused "required", "" is refused "must not be empty".
type wireConfig struct {
	URL       *string  `json:"url"`
	ChatID    *string  `json:"chat_id"`
	Secret    *string  `json:"secret"`
	Streaming string   `json:"streaming"`
	Activity  string   `json:"activity"`
	Timeout   string   `json:"timeout"`
	FileHosts []string `json:"file_hosts" want:"an array of host names"`
	Dedupe    bool     `json:"dedupe"`
	Lookup    bool     `json:"lookup"`
	Signature string   `json:"signature"`
	Format    string   `json:"format"`
}

// parseConfig decodes and validates a webhook config. Every error is a
// *profile.Error with code invalid_descriptor naming the field; none
// contains the secret.
func parseConfig(raw json.RawMessage) (*config, error) {
	w, ck := adapter.CheckConfig[wireConfig](raw)
	c := &config{dedupe: w.Dedupe, lookup: w.Lookup, fileHosts: w.FileHosts}
	c.url = targetURL(ck, ck.Present("url", w.URL))
	c.chatID = ck.Present("chat_id", w.ChatID)
	c.secret = []byte(ck.Present("secret", w.Secret))
	c.streaming = adapter.Enum(ck, "streaming", w.Streaming, DefaultStreaming, adapter.StreamingEdit, adapter.StreamingNone)
	c.activity = adapter.Enum(ck, "activity", w.Activity, DefaultActivity, adapter.ActivityStatus, adapter.ActivityTyping, adapter.ActivityNone)
	c.signature = adapter.Enum(ck, "signature", w.Signature, SignatureV1, SignatureV1, SignatureV2)
	c.format = adapter.Enum(ck, "format", w.Format, FormatMarkdown, FormatMarkdown, FormatHTML)
	c.timeout = timeout(ck, w.Timeout)
	for i, h := range c.fileHosts {
		if h == "" || strings.ContainsAny(h, "/@ ") || len(h) > 253 || download.Allowed([]string{h}).Validate() != nil {
			ck.Fail(fmt.Sprintf("file_hosts[%d]", i), "a host name or pattern",
				`must be a host such as "files.example.com", "*.example.com" or "10.0.0.5:8443"`)
		}
	}
	return adapter.Checked(c, ck)
}

// timeout is config "timeout", a Go duration up to MaxTimeout, or DefaultTimeout when it is
// empty.
func timeout(ck *adapter.ConfigCheck, s string) time.Duration {
	const field = "timeout"
	if s == "" {
		return DefaultTimeout
	}
	want := "a positive Go duration of at most " + MaxTimeout.String()
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		ck.Fail(field, want, `must be a Go duration such as "10s"`)
	case d <= 0:
		ck.Fail(field, want, "must be positive")
	case d > MaxTimeout:
		ck.Fail(field, want, "must be at most "+MaxTimeout.String())
	}
	return d
}

// targetURL is config "url": an absolute http(s) URL with a host, no user:password and no
// fragment (nil after an earlier refusal).
func targetURL(ck *adapter.ConfigCheck, s string) *url.URL {
	const field, want = "url", "an absolute http(s) URL with a host, without user or fragment"
	if ck.Failed() {
		return nil
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		ck.Fail(field, want, "not a valid URL")
	case u.Scheme != "http" && u.Scheme != "https":
		ck.Fail(field, want, "must be an absolute http or https URL")
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		ck.Fail(field, want, "must be an absolute http or https URL with a host")
	case u.User != nil:
		ck.Fail(field, want, "must not contain user information; use secret")
	case u.Fragment != "" || strings.HasSuffix(s, "#"):
		ck.Fail(field, want, "must not contain a fragment")
	}
	return u
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
		Format:    c.format,
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
