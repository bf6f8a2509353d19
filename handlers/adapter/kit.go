package adapter

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"time"
)

// Kit is an adapter's [Opener] made from one parse function: Name, Open and Public, which every
// adapter would otherwise write again. An adapter embeds it and gives [NewKit] its name, its
// config decoder (the validated config C), the public form of a config (P, with every secret
// removed) and how a validated config opens a target. It is immutable and safe for concurrent use.
type Kit[C, P any] struct {
	name   string
	parse  func(json.RawMessage) (C, error)
	public func(C) P
	open   func(C) (Target, error)
}

// NewKit returns the Opener skeleton of the adapter called name. parse decodes and validates a
// channel's target.config (a bad one is a *profile.Error invalid_descriptor naming the field);
// public is what the channels API shows of a valid config; open binds a valid config to a
// target, with no call to the platform (an adapter that checks the binding is a [Prober]).
func NewKit[C, P any](name string, parse func(json.RawMessage) (C, error), public func(C) P, open func(C) (Target, error)) Kit[C, P] {
	return Kit[C, P]{name: name, parse: parse, public: public, open: open}
}

// Name implements [Opener]: the value of `target.adapter` that selects the adapter.
func (k Kit[C, P]) Name() string { return k.name }

// Open implements [Opener]: the config parsed, then opened.
func (k Kit[C, P]) Open(config json.RawMessage) (Target, error) {
	c, err := k.parse(config)
	if err != nil {
		return nil, err
	}
	return k.open(c)
}

// Public implements [Opener]: the config parsed, and its public form as JSON.
func (k Kit[C, P]) Public(config json.RawMessage) (json.RawMessage, error) {
	c, err := k.parse(config)
	if err != nil {
		return nil, err
	}
	return json.Marshal(k.public(c))
}

// Common are the options every platform adapter takes: where its events go, how it calls the
// platform, and where a final's files are read. An adapter copies them from its Options and
// applies [Common.Defaults], so its New defaults only its own options.
type Common struct {
	// Logger receives the adapter's events (never a secret). Default: discard.
	Logger *slog.Logger
	// HTTPClient makes the platform calls. Default: NewHTTPClient with the adapter's timeout.
	HTTPClient *http.Client
	// Files gives the bytes of a final's files; nil: no files out.
	Files FileSource
	// Renders counts the formats a platform refused (edge-api §7.3); nil: not counted.
	Renders RenderFallbacks
	// Relay runs an account's calls in the process holding its one connection, for adapters
	// whose account takes one at a time (WeCom); nil: in this process.
	Relay Relay
}

// RenderFallbacks counts a message sent in a simpler form than the adapter's first, because the
// platform refused that one (ximd_render_fallbacks_total{adapter,reason}).
type RenderFallbacks interface {
	Fallback(adapter, reason string)
}

// Fallback counts one fall-back of the adapter (a nil c counts nothing) and logs it as
// render_fallback with the reason (a short name: "rich_refused", "html_refused", …).
func (c Common) Fallback(adapter, reason string) {
	if c.Renders != nil {
		c.Renders.Fallback(adapter, reason)
	}
	OrDiscard(c.Logger).Warn("render_fallback", "adapter", adapter, "reason", reason)
}

// Defaults returns c with its defaults filled in: a discarding Logger and
// NewHTTPClient(timeout) (0: no overall bound, for adapters whose long polls set their own).
func (c Common) Defaults(timeout time.Duration) Common {
	c.Logger = OrDiscard(c.Logger)
	if c.HTTPClient == nil {
		c.HTTPClient = NewHTTPClient(timeout)
	}
	return c
}

// OrDiscard is log, or a logger that discards everything when log is nil.
func OrDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

// Platform is what a platform adapter (one that calls a chat platform's API for its accounts)
// embeds: its [Kit], its [Common] options with their defaults, and its per-account [Clients].
// The adapter's New sets Kit and Common; what the adapter writes itself is its config, its calls,
// and, where it has them, its poll or receive part.
type Platform[C, P, A any] struct {
	Kit[C, P]
	Common
	// Accounts holds one client per account, shared by the account's channels.
	Accounts Clients[A]
}

// Close forgets every account's client ([Clients.Close]); targets opened before keep theirs.
func (p *Platform[C, P, A]) Close() error { return p.Accounts.Close() }

// Init sets p up for the adapter called name: its options with their defaults (timeout bounds
// each platform call, 0 none: see [Common.Defaults]) and its Opener from parse, public and open
// (see [NewKit]). An adapter's New calls it once, before the adapter is used.
func (p *Platform[C, P, A]) Init(name string, opts Common, timeout time.Duration, parse func(json.RawMessage) (C, error), public func(C) P, open func(C) (Target, error)) {
	p.Common = opts.Defaults(timeout)
	p.Kit = NewKit(name, parse, public, open)
}

// DefaultSignatureWindow is how far the timestamp of a platform's signed call (Feishu's events,
// Slack's Events API) may be from now unless the adapter is told otherwise: replays older than
// this are refused.
const DefaultSignatureWindow = 5 * time.Minute

// OrDefault is d, or def when d is not positive: an option's default.
func OrDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
