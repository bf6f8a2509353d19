package download

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ximd/ximd/profile"
)

// Defaults of Config.
const (
	// DefaultMaxBytes (XIM_MAX_FILE_BYTES) is the largest file downloaded: 64 MiB, the same
	// bound as an upload by xAgent.
	DefaultMaxBytes int64 = 64 << 20
	// DefaultTimeout (XIM_FILE_DOWNLOAD_TIMEOUT) bounds one whole download: 30s.
	DefaultTimeout = 30 * time.Second
	// DefaultMaxRedirects is how many redirects one download follows: 3.
	DefaultMaxRedirects = 3
)

// maxHeaderBytes bounds the response headers read by the Fetcher's own client (net/http's
// default is 1 MiB).
const maxHeaderBytes = 64 << 10

// maxMessageURL bounds the redacted URL quoted in an error message.
const maxMessageURL = 200

// maxFilenameBytes bounds Result.Filename.
const maxFilenameBytes = 255

// Config configures a Fetcher. The zero value of every field means its default.
type Config struct {
	// MaxBytes (XIM_MAX_FILE_BYTES) is the largest file accepted, in bytes; a larger one fails
	// with file_too_large (default DefaultMaxBytes).
	MaxBytes int64
	// Timeout (XIM_FILE_DOWNLOAD_TIMEOUT) bounds one download from the first connection to the
	// last body byte, redirects included: past it the request, or the sink's next read, fails
	// (default DefaultTimeout).
	Timeout time.Duration
	// MaxRedirects is how many redirects one download may follow; one more fails
	// (default DefaultMaxRedirects).
	MaxRedirects int
	// AllowPrivate (XIM_DOWNLOAD_ALLOW_PRIVATE) lets downloads reach internal addresses
	// (loopback, private, link-local) that no channel allowed literally: for closed networks
	// and tests only (see guard.go).
	AllowPrivate bool
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxRedirects == 0 {
		c.MaxRedirects = DefaultMaxRedirects
	}
	return c
}

// Validate reports every configuration error at once. It checks c as given: call WithDefaults
// first to accept zero fields.
func (c Config) Validate() error {
	var errs []error
	if c.MaxBytes < 1 {
		errs = append(errs, fmt.Errorf("max file bytes %d: must be positive", c.MaxBytes))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("file download timeout %s: must be positive", c.Timeout))
	}
	if c.MaxRedirects < 1 {
		errs = append(errs, fmt.Errorf("max redirects %d: must be positive", c.MaxRedirects))
	}
	return errors.Join(errs...)
}

// Result describes a downloaded file.
type Result struct {
	// ContentType is the response's Content-Type, normalized by mime.FormatMediaType; "" when
	// absent or malformed.
	ContentType string
	// Filename is the filename parameter of the response's Content-Disposition, else the last
	// element of the requested URL's path, cleaned: no directories, control or format
	// characters, "." or "..", at most 255 bytes. "" when neither gives a name.
	Filename string
	// Bytes is how many body bytes the sink read.
	Bytes int64
}

// Fetcher downloads files that target systems point to. It is safe for concurrent use.
type Fetcher struct {
	cfg    Config
	client *http.Client
}

// New returns a Fetcher. Zero fields of cfg take their defaults, and so does any field
// Validate would refuse (a negative one): New never fails, so check cfg with Validate where it
// is loaded. client is the HTTP client to use (its Transport, proxy and TLS settings); nil gives
// the Fetcher its own. Fetch never uses the client's Jar or CheckRedirect, so cookies are never
// stored or sent and redirects follow the package rules; a client whose Transport adds
// credentials to requests must not be given.
func New(cfg Config, client *http.Client) *Fetcher {
	cfg = cfg.WithDefaults()
	def := Config{}.WithDefaults()
	if cfg.MaxBytes < 1 {
		cfg.MaxBytes = def.MaxBytes
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = def.Timeout
	}
	if cfg.MaxRedirects < 1 {
		cfg.MaxRedirects = def.MaxRedirects
	}
	if client == nil {
		client = newClient(cfg.AllowPrivate)
	}
	return &Fetcher{cfg: cfg, client: client}
}

// newClient is the Fetcher's own client: net/http's defaults, with bounded response headers,
// without transparent decompression (the file is stored as served, and a small compressed body
// cannot expand into work), and the dial guard (guard.go).
func newClient(allowPrivate bool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            guardedDial(&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}, allowPrivate),
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           100,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxHeaderBytes,
	}}
}

// Fetch downloads rawURL and streams its body to sink, for example the object store's Put.
//
// Before any connection, rawURL must be an absolute http or https URL without user
// information whose host is allowed (see [Allowed]); each redirect target is checked the same
// way before it is requested, a redirect from https to http is refused, and more than
// MaxRedirects redirects fail. Only a 2xx answer is a file. A Content-Length above MaxBytes
// fails before sink is called. The request carries no Authorization header, no cookies and no
// Referer. The whole download, the sink's reads included, is bounded by Timeout and by ctx.
//
// sink is called at most once, with the body, the normalized Content-Type ("" if none) and the
// Content-Length (-1 if unknown). It must read r to io.EOF or to an error and return that
// error (wrapped or not): r yields at most MaxBytes bytes, then, if the body is longer, an
// error with code file_too_large instead of io.EOF, so a streaming store aborts instead of
// keeping a truncated file.
//
// Errors are *profile.Error with code file_download_failed, or file_too_large when the size
// cap is hit; the message names the URL as scheme://host/path (see [Redact]) and the reason,
// never the query, fragment or user information. When ctx itself ends, the error also wraps
// ctx's error. An error of sink's own, not caused by reading r, is returned wrapped as it is,
// so that, say, a full store keeps its retryable code.
func (f *Fetcher) Fetch(ctx context.Context, rawURL string, allowed Allowed, sink func(r io.Reader, contentType string, contentLength int64) error) (Result, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse's error quotes the whole URL: never return it.
		return Result{}, profile.Errorf(profile.CodeFileDownloadFailed, "download: malformed URL")
	}
	name := messageURL(u)
	if reason := checkURL(u, allowed); reason != "" {
		return Result{}, failf(name, "%s", reason)
	}

	parent := ctx
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, literalsKey{}, allowed.literals()), f.cfg.Timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Result{}, failf(name, "malformed URL")
	}
	req.Header.Set("User-Agent", "ximd")
	req.Header.Set("Accept", "*/*")

	client := *f.client
	client.Jar = nil
	client.CheckRedirect = f.checkRedirect(allowed)

	resp, err := client.Do(req)
	if err != nil {
		return Result{}, f.failure(parent, ctx, name, err, false)
	}
	defer resp.Body.Close()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Result{}, failf(name, "answered HTTP %d", resp.StatusCode)
	}
	if resp.ContentLength > f.cfg.MaxBytes {
		return Result{}, tooLarge(name, f.cfg.MaxBytes)
	}

	ct := contentType(resp.Header.Get("Content-Type"))
	body := &capReader{r: resp.Body, max: f.cfg.MaxBytes, tooLarge: tooLarge(name, f.cfg.MaxBytes)}
	sinkErr := sink(body, ct, resp.ContentLength)
	switch {
	case body.hitCap:
		return Result{}, body.tooLarge
	case body.err != nil:
		return Result{}, f.failure(parent, ctx, name, body.err, true)
	case sinkErr != nil:
		return Result{}, fmt.Errorf("download %s: sink: %w", name, sinkErr)
	}
	return Result{
		ContentType: ct,
		Filename:    filename(resp.Header.Get("Content-Disposition"), u),
		Bytes:       body.n,
	}, nil
}

// checkURL returns why u may not be requested, or "".
func checkURL(u *url.URL, allowed Allowed) string {
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "only http and https URLs are downloaded"
	case u.Opaque != "" || u.Host == "":
		return "not an absolute URL"
	case u.User != nil:
		return "user information in the URL is not allowed"
	case !allowed.Allows(u):
		return fmt.Sprintf("host %s is not allowed for this channel", shorten(u.Host))
	}
	return ""
}

// redirectError is a redirect refused by checkRedirect.
type redirectError struct{ reason string }

func (e *redirectError) Error() string { return e.reason }

// checkRedirect applies the redirect rules and removes the Referer net/http adds (it would
// carry the previous URL, query included, to the next host).
func (f *Fetcher) checkRedirect(allowed Allowed) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		req.Header.Del("Referer")
		if len(via) > f.cfg.MaxRedirects {
			return &redirectError{fmt.Sprintf("more than %d redirects", f.cfg.MaxRedirects)}
		}
		target := messageURL(req.URL)
		if reason := checkURL(req.URL, allowed); reason != "" {
			return &redirectError{fmt.Sprintf("redirect to %s refused: %s", target, reason)}
		}
		if via[len(via)-1].URL.Scheme == "https" && req.URL.Scheme == "http" {
			return &redirectError{fmt.Sprintf("redirect to %s refused: https to http", target)}
		}
		return nil
	}
}

// failure maps a request or body-read error to file_download_failed. The cause's text is
// never used: net/http's errors quote URLs, queries included.
func (f *Fetcher) failure(parent, ctx context.Context, name string, err error, reading bool) error {
	if perr := parent.Err(); perr != nil {
		return fmt.Errorf("%w: %w", failf(name, "canceled"), perr)
	}
	var re *redirectError
	if errors.As(err, &re) {
		return failf(name, "%s", re.reason)
	}
	var be *blockedError
	if errors.As(err, &be) {
		return failf(name, "%s", be.Error())
	}
	if ctx.Err() != nil {
		return failf(name, "timed out after %s", f.cfg.Timeout)
	}
	var (
		dnsErr  *net.DNSError
		opErr   *net.OpError
		certErr *tls.CertificateVerificationError
		recErr  tls.RecordHeaderError
	)
	switch {
	case reading:
		return failf(name, "connection failed while reading the body")
	case errors.As(err, &dnsErr):
		return failf(name, "host name not resolved")
	case errors.As(err, &certErr):
		return failf(name, "TLS certificate not accepted")
	case errors.As(err, &recErr):
		return failf(name, "not a TLS server")
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return failf(name, "cannot connect")
	}
	return failf(name, "request failed")
}

// failf returns a file_download_failed error about the file at name.
func failf(name, format string, args ...any) *profile.Error {
	return profile.Errorf(profile.CodeFileDownloadFailed, "download %s: %s", name, fmt.Sprintf(format, args...))
}

func tooLarge(name string, limit int64) *profile.Error {
	return profile.Errorf(profile.CodeFileTooLarge, "download %s: larger than %d bytes (XIM_MAX_FILE_BYTES)", name, limit)
}

// capReader passes at most max bytes through; when the body holds more, it returns tooLarge
// instead of io.EOF. It reads one byte past max to tell, and never hands that byte on.
type capReader struct {
	r        io.Reader
	max      int64
	n        int64 // bytes handed on
	hitCap   bool
	err      error // first read error other than io.EOF (tooLarge once hitCap)
	tooLarge error
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if room := c.max - c.n + 1; int64(len(p)) > room {
		p = p[:room]
	}
	m, err := c.r.Read(p)
	if c.n+int64(m) > c.max {
		m = int(c.max - c.n)
		c.n = c.max
		c.hitCap = true
		c.err = c.tooLarge
		return m, c.err
	}
	c.n += int64(m)
	if err != nil && err != io.EOF {
		c.err = err
	}
	return m, err
}

// Redact returns rawURL as scheme://host/path, without user information, query and fragment,
// for logs and messages (a query may hold a token). An opaque URL ("data:...") is reduced to
// its scheme, an unparsable one to "(malformed URL)".
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(malformed URL)"
	}
	return redact(u)
}

func redact(u *url.URL) string {
	if u.Opaque != "" {
		return u.Scheme + ":"
	}
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return r.String()
}

// messageURL is redact(u) bounded for an error message.
func messageURL(u *url.URL) string {
	return shorten(redact(u))
}

// shorten cuts s to maxMessageURL bytes on a rune boundary.
func shorten(s string) string {
	if len(s) <= maxMessageURL {
		return s
	}
	return truncate(s, maxMessageURL) + "..."
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// contentType normalizes a Content-Type header value; "" if absent or malformed.
func contentType(v string) string {
	if v == "" {
		return ""
	}
	mt, params, err := mime.ParseMediaType(v)
	if err != nil {
		return ""
	}
	return mime.FormatMediaType(mt, params)
}

// filename picks Result.Filename from a Content-Disposition value and the requested URL.
func filename(disposition string, u *url.URL) string {
	if disposition != "" {
		if _, params, err := mime.ParseMediaType(disposition); err == nil {
			if name := cleanFilename(params["filename"]); name != "" {
				return name
			}
		}
	}
	p := u.Path
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		p = p[i+1:]
	}
	return cleanFilename(p)
}

// cleanFilename keeps the last path element of name (either separator), drops invalid UTF-8,
// control and format characters (bidi overrides included), trims spaces, refuses "." and "..",
// and bounds the result to maxFilenameBytes.
func cleanFilename(name string) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(name, ""))
	name = strings.TrimSpace(name)
	if name == "." || name == ".." {
		return ""
	}
	return strings.TrimSpace(truncate(name, maxFilenameBytes))
}
