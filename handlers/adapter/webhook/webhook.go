package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/download"
	"github.com/ximd/ximd/handlers/adapter/markdown"
	"github.com/ximd/ximd/profile"
)

// Name is the adapter name, the value of `target.adapter`.
const Name = "webhook"

// Wire constants of edge-api §7.1.
const (
	// SignatureHeader carries "sha256=<hex HMAC-SHA256 of the raw body>".
	SignatureHeader = "X-Xim-Signature"
	// TimestampHeader and SignatureV2Header carry the replay-proof signature: the unix seconds
	// of the call and "sha256=<hex HMAC-SHA256 of "<timestamp>.<raw body>">" (SignV2).
	TimestampHeader   = "X-Xim-Timestamp"
	SignatureV2Header = "X-Xim-Signature-V2"
	// IdempotencyKeyHeader repeats the body's idempotency_key on
	// POST {url}/messages (an addition to §7.1).
	IdempotencyKeyHeader = "Idempotency-Key"
	// MaxResponseBytes is the most of an answer's body that is read.
	MaxResponseBytes = 64 << 10
	// MaxConnsPerHost of the default transport: the most connections (and so
	// calls at once) to one target host, enough for a busy target shared by
	// many channels. Each may stay open as an idle keep-alive connection, so
	// a burst of calls never dials and closes connections by the hundred;
	// calls past it wait for one.
	MaxConnsPerHost = 256
)

// Options configure an [Adapter].
type Options struct {
	// Client makes the HTTP calls. Optional: nil means a client owned by
	// the adapter with keep-alives, at most MaxConnsPerHost connections
	// per host (all of them kept alive when idle) and no redirect following. A given client is used as is;
	// per-call timeouts are applied through the request context either way.
	Client *http.Client
	// Logger receives a debug record per call (method, path, status,
	// duration; never a secret or a body). Optional: nil discards.
	Logger *slog.Logger
	// Fetcher downloads the files of user messages the target posts (Receive), from the
	// channel's hosts only. Optional: nil refuses posts with files (file_download_failed).
	Fetcher *download.Fetcher
}

// Adapter is the webhook [adapter.Opener]. It is safe for concurrent use;
// all targets it opens share its HTTP client. Its Name is "webhook"; its Public is the config
// with defaults filled in and the secret removed: {"url","chat_id","streaming","activity","timeout",
// "dedupe","lookup","signature","format"} and "file_hosts" when set.
type Adapter struct {
	adapter.Kit[*config, publicConfig]
	client *http.Client
	owned  bool // client was built by New; Close may close its connections
	log    *slog.Logger
	fetch  *download.Fetcher
}

var _ adapter.Opener = (*Adapter)(nil)

// New returns the webhook adapter.
func New(opts Options) *Adapter {
	a := &Adapter{client: opts.Client, log: adapter.OrDiscard(opts.Logger), fetch: opts.Fetcher}
	if a.client == nil {
		a.client = newClient()
		a.owned = true
	}
	a.Kit = adapter.NewKit(Name, parseConfig, (*config).public, a.open)
	return a
}

// newClient is the default client: pooled keep-alive connections, no
// overall Timeout (each call has its own, from the config, through its
// context), redirects answered as they are rather than followed, so a
// signed POST is never replayed elsewhere or turned into a GET.
func newClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxConnsPerHost = MaxConnsPerHost
	tr.MaxIdleConnsPerHost = MaxConnsPerHost
	tr.MaxIdleConns = 4 * MaxConnsPerHost
	tr.IdleConnTimeout = 90 * time.Second
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// open returns a target bound to a validated config.
func (a *Adapter) open(c *config) (adapter.Target, error) {
	base := strings.TrimSuffix(c.url.EscapedPath(), "/")
	w := &webhookTarget{
		a:           a,
		cfg:         c,
		messagesURL: withPath(c.url, base+"/messages"),
		activityURL: withPath(c.url, base+"/activity"),
		messageBase: base + "/messages/",
	}
	return w, nil
}

// Close closes the idle connections of a client built by New. A client
// given in Options is left alone. Targets stay usable; they dial again.
func (a *Adapter) Close() error {
	if a.owned {
		a.client.CloseIdleConnections()
	}
	return nil
}

// withPath returns u with the given escaped path; the query is kept.
func withPath(u *url.URL, escapedPath string) string {
	v := *u
	v.RawPath = escapedPath
	p, err := url.PathUnescape(escapedPath)
	if err != nil { // cannot happen: built from EscapedPath and PathEscape
		p = escapedPath
	}
	v.Path = p
	return v.String()
}

// escapeID path-escapes a target message id as one segment; "." and ".."
// are escaped too, so no server or proxy resolves them as dot-segments.
func escapeID(id string) string {
	switch id {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(id)
}

// webhookTarget is a channel's webhook binding. Its capabilities (from the config) say which of
// its methods the stages call.
type webhookTarget struct {
	a           *Adapter
	cfg         *config
	messagesURL string // {url}/messages
	activityURL string // {url}/activity
	messageBase string // escaped path prefix of {url}/messages/{id}
}

// Wire bodies of §7.1.
type (
	wireFile struct {
		Type     string `json:"type"`
		FileRef  string `json:"file_ref"`
		Filename string `json:"filename"`
		MimeType string `json:"mime_type"`
		ByteSize int64  `json:"byte_size"`
		URL      string `json:"url"`
	}
	createBody struct {
		ChatID         string     `json:"chat_id"`
		Text           string     `json:"text"`
		HTML           *string    `json:"html,omitempty"`
		Files          []wireFile `json:"files"`
		Final          bool       `json:"final"`
		IdempotencyKey string     `json:"idempotency_key"`
		// ReplyTo is im.reply_message's reply_to_target_message_id (edge-api §8).
		ReplyTo string `json:"reply_to_target_message_id,omitempty"`
		// System marks a message of ximd's own (a bot's pairing answer, edge-api §7.1).
		System bool `json:"system,omitempty"`
	}
	editBody struct {
		ChatID string     `json:"chat_id"`
		Text   string     `json:"text"`
		HTML   *string    `json:"html,omitempty"`
		Files  []wireFile `json:"files"`
		Final  bool       `json:"final"`
	}
	activityBody struct {
		ChatID   string         `json:"chat_id"`
		Status   adapter.Status `json:"status"`
		ToolName string         `json:"tool_name,omitempty"`
	}
	createAnswer struct {
		MessageID json.RawMessage `json:"message_id"`
	}
	lookupAnswer struct {
		MessageID json.RawMessage `json:"message_id"`
		Final     bool            `json:"final"`
		Text      string          `json:"text"`
	}
)

// wireFiles is never nil, so "files" is always an array.
func wireFiles(files []adapter.File) []wireFile {
	out := make([]wireFile, 0, len(files))
	for _, f := range files {
		out = append(out, wireFile{
			Type: f.Type, FileRef: f.FileRef, Filename: f.Filename,
			MimeType: f.MimeType, ByteSize: f.ByteSize, URL: f.URL,
		})
	}
	return out
}

// html is the "html" of a message call: with config format "html", text rendered by
// markdown.Parse(text).HTML(markdown.Web) (present even when empty); nil otherwise (no key).
func (t *webhookTarget) html(text string) *string {
	if t.cfg.format != FormatHTML {
		return nil
	}
	h := markdown.Parse(text).HTML(markdown.Web)
	return &h
}

// Capabilities implements adapter.Target.
func (t *webhookTarget) Capabilities() adapter.Capabilities { return t.cfg.capabilities() }

var (
	_ adapter.Target         = (*webhookTarget)(nil)
	_ adapter.Editor         = (*webhookTarget)(nil)
	_ adapter.ActivityShower = (*webhookTarget)(nil)
	_ adapter.Reconciler     = (*webhookTarget)(nil)
)

// Send implements adapter.Sender: POST {url}/messages.
func (t *webhookTarget) Send(ctx context.Context, m adapter.Message) (string, error) {
	body, err := json.Marshal(createBody{
		ChatID:         t.cfg.chatID,
		Text:           m.Text,
		HTML:           t.html(m.Text),
		Files:          wireFiles(m.Files),
		Final:          m.Final,
		IdempotencyKey: m.IdempotencyKey,
		ReplyTo:        m.ReplyTo,
		System:         m.System,
	})
	if err != nil {
		return "", failed("POST /messages: encode body")
	}
	var id string
	err = t.call(ctx, http.MethodPost, t.messagesURL, "POST /messages", body, m.IdempotencyKey, func(status int, answer []byte) error {
		var a createAnswer
		if json.Unmarshal(answer, &a) != nil {
			return failed(fmt.Sprintf("POST /messages: HTTP %d answer is not {\"message_id\": ...}", status))
		}
		id = decodeID(a.MessageID)
		if id == "" {
			return failed(fmt.Sprintf("POST /messages: HTTP %d answer has no message_id", status))
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return id, nil
}

// Lookup implements adapter.Reconciler (called with config "lookup"): GET
// {url}/messages?idempotency_key=K, answered 200 {"message_id","final","text"} or 404.
func (t *webhookTarget) Lookup(ctx context.Context, idempotencyKey string) (adapter.Shown, bool, error) {
	u, err := url.Parse(t.messagesURL)
	if err != nil {
		return adapter.Shown{}, false, failed("GET /messages: build URL")
	}
	q := u.Query()
	q.Set("idempotency_key", idempotencyKey)
	u.RawQuery = q.Encode()
	var shown adapter.Shown
	err = t.call(ctx, http.MethodGet, u.String(), "GET /messages?idempotency_key", nil, "", func(status int, answer []byte) error {
		var a lookupAnswer
		if json.Unmarshal(answer, &a) != nil {
			return failed(fmt.Sprintf("GET /messages: HTTP %d answer is not {\"message_id\", \"final\", \"text\"}", status))
		}
		if shown.ID = decodeID(a.MessageID); shown.ID == "" {
			return failed(fmt.Sprintf("GET /messages: HTTP %d answer has no message_id", status))
		}
		shown.Final, shown.Text = a.Final, a.Text
		return nil
	})
	switch {
	case errors.Is(err, errLookupNotFound):
		return adapter.Shown{}, false, nil
	case err != nil:
		return adapter.Shown{}, false, err
	}
	return shown, true, nil
}

// errLookupNotFound is a lookup answered 404: no message has the key.
var errLookupNotFound = errors.New("GET /messages: 404, no such message")

// decodeID reads message_id as a JSON string or, leniently, a JSON number
// (its literal); anything else is "".
func decodeID(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return ""
		}
		return s
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return ""
		}
		return n.String()
	}
	return ""
}

// Edit implements adapter.Editor (called with streaming "edit"): PATCH {url}/messages/{id} with
// the whole text.
func (t *webhookTarget) Edit(ctx context.Context, id string, m adapter.Message) error {
	if id == "" {
		return failed("PATCH /messages/{id}: empty target message id")
	}
	body, err := json.Marshal(editBody{
		ChatID: t.cfg.chatID,
		Text:   m.Text,
		HTML:   t.html(m.Text),
		Files:  wireFiles(m.Files),
		Final:  m.Final,
	})
	if err != nil {
		return failed("PATCH /messages/{id}: encode body")
	}
	u := withPath(t.cfg.url, t.messageBase+escapeID(id))
	return t.call(ctx, http.MethodPatch, u, "PATCH /messages/{id}", body, "", nil)
}

// ShowActivity implements adapter.ActivityShower (called with activity other than "none"): POST
// {url}/activity, degraded as the activity capability says.
func (t *webhookTarget) ShowActivity(ctx context.Context, a adapter.Activity) error {
	b := activityBody{ChatID: t.cfg.chatID}
	switch a.Status {
	case adapter.StatusIdle:
		b.Status = adapter.StatusIdle
	case adapter.StatusThinking, adapter.StatusTool, adapter.StatusTyping:
		switch {
		case t.cfg.activity == adapter.ActivityTyping:
			b.Status = adapter.StatusTyping
		case a.Status == adapter.StatusTool:
			b.Status, b.ToolName = adapter.StatusTool, a.ToolName
		default:
			b.Status = a.Status
		}
	default:
		return failed(fmt.Sprintf("POST /activity: unknown status %q", a.Status))
	}
	body, err := json.Marshal(b)
	if err != nil {
		return failed("POST /activity: encode body")
	}
	return t.call(ctx, http.MethodPost, t.activityURL, "POST /activity", body, "", nil)
}

// call makes one signed HTTP call and maps its outcome to a *profile.Error
// (edge-api §7.1). onOK, if not nil, reads the body of a 2xx answer.
// op names the call in errors and logs, without ids or query strings.
func (t *webhookTarget) call(ctx context.Context, method, u, op string, body []byte, idemKey string, onOK func(status int, answer []byte) error) error {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return failed(op + ": build request")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set(SignatureHeader, Sign(t.cfg.secret, body))
	ts, v2 := SignV2(t.cfg.secret, body, time.Now())
	req.Header.Set(TimestampHeader, ts)
	req.Header.Set(SignatureV2Header, v2)
	if idemKey != "" {
		req.Header.Set(IdempotencyKeyHeader, idemKey)
	}

	start := time.Now()
	resp, err := t.a.client.Do(req)
	if err != nil {
		t.a.log.LogAttrs(ctx, slog.LevelDebug, "webhook_call_failed",
			slog.String("op", op), slog.Duration("duration", time.Since(start)))
		return transportError(op, err)
	}
	defer resp.Body.Close()
	answer, readErr := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	t.a.log.LogAttrs(ctx, slog.LevelDebug, "webhook_call",
		slog.String("op", op), slog.Int("status", resp.StatusCode),
		slog.Duration("duration", time.Since(start)))

	if method == http.MethodGet && resp.StatusCode == http.StatusNotFound {
		return errLookupNotFound
	}
	if perr := statusError(op, resp.StatusCode); perr != nil {
		if after, ok := adapter.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok && perr.Retryable {
			return &adapter.RetryAfterError{After: after, Err: perr}
		}
		return perr
	}
	if onOK == nil {
		return nil
	}
	if readErr != nil {
		return transportError(op, readErr)
	}
	if len(answer) > MaxResponseBytes {
		return failed(fmt.Sprintf("%s: HTTP %d answer larger than %d bytes", op, resp.StatusCode, MaxResponseBytes))
	}
	return onOK(resp.StatusCode, answer)
}

// statusError maps a non-2xx HTTP status to its target code; nil for 2xx.
// Retryable comes from the profile's code table.
func statusError(op string, status int) *profile.Error {
	var code string
	switch {
	case status >= 200 && status <= 299:
		return nil
	case status == http.StatusTooManyRequests:
		code = profile.CodeTargetRateLimited
	case status >= 500:
		code = profile.CodeTargetUnavailable
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		code = profile.CodeTargetAuthFailed
	default:
		code = profile.CodeTargetDeliveryFailed
	}
	return profile.Errorf(code, "%s: HTTP %d", op, status)
}

// transportError maps a failed call (no HTTP answer) to its target code and
// wraps the cause (without the URL) so errors.Is finds context errors.
func transportError(op string, err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err // its text would repeat the URL
	}
	var (
		certErr    *tls.CertificateVerificationError
		unknownCA  x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		invalidErr x509.CertificateInvalidError
	)
	if errors.As(err, &certErr) || errors.As(err, &unknownCA) || errors.As(err, &hostErr) || errors.As(err, &invalidErr) {
		return fmt.Errorf("%w: %w", failed(op+": TLS certificate not accepted"), err)
	}
	reason := "connection failed"
	var nerr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &nerr) && nerr.Timeout()):
		reason = "timeout"
	case errors.Is(err, context.Canceled):
		reason = "canceled"
	}
	return fmt.Errorf("%w: %w", profile.Errorf(profile.CodeTargetUnavailable, "%s: %s", op, reason), err)
}

// failed is a target_delivery_failed error (not retryable).
func failed(msg string) *profile.Error {
	return profile.Errorf(profile.CodeTargetDeliveryFailed, "%s", msg)
}

// Inbound is what the inbound route (POST /v1/targets/webhook/{channel}/messages) needs of a
// channel's webhook config.
type Inbound struct {
	secret    []byte
	requireV2 bool
	// FileHosts are the hosts user files may be downloaded from: the host (and port, if it has
	// one) of config.url and the entries of config.file_hosts.
	FileHosts []string
}

// Verify reports whether a request's headers sign body under the channel's secret (edge-api §7.1):
// with X-Xim-Timestamp or X-Xim-Signature-V2 present, the V2 signature must hold and its
// timestamp be within MaxSkew of now; otherwise X-Xim-Signature must hold, unless the channel
// is configured "signature": "v2". Constant-time comparisons.
func (in Inbound) Verify(body []byte, h http.Header, now time.Time) bool {
	ts, v2 := h.Get(TimestampHeader), h.Get(SignatureV2Header)
	if ts != "" || v2 != "" {
		return VerifyV2(in.secret, body, ts, v2, now)
	}
	return !in.requireV2 && Verify(in.secret, body, h.Get(SignatureHeader))
}

// InboundOf reads a channel's config for the inbound route.
func (a *Adapter) InboundOf(config json.RawMessage) (Inbound, error) {
	c, err := parseConfig(config)
	if err != nil {
		return Inbound{}, err
	}
	return Inbound{secret: c.secret, requireV2: c.signature == SignatureV2, FileHosts: append([]string{c.url.Host}, c.fileHosts...)}, nil
}
