package page

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/webchat"
	"github.com/ximd/ximd/profile"
)

//go:embed assets
var assets embed.FS

var pageTmpl = template.Must(template.ParseFS(assets, "assets/index.html"))

// The page secret travels in the link's fragment (KeyFragment: never sent to a server, so never
// in an access log, a proxy or a Referer), in the KeyHeader of the page's requests, and in the
// HttpOnly KeyCookie that POST /session sets for what cannot send a header (EventSource, <img>).
const (
	KeyFragment = "k"
	KeyHeader   = "X-Webchat-Key"
	KeyCookie   = "ximd_webchat"
)

// Channels looks channels up (the channel registry).
type Channels interface {
	Lookup(ctx context.Context, id string) (adapter.Channel, bool, error)
}

// Files is the part of the Transfer Plane the page uses.
type Files interface {
	Put(ctx context.Context, channelID string, m adapter.StoredFile, r io.Reader) (adapter.StoredFile, error)
	Stat(ctx context.Context, channelID, fileRef string) (adapter.StoredFile, error)
	Open(ctx context.Context, fileRef string) (adapter.StoredFile, io.ReadCloser, error)
}

// Outbox is the send path's pending set (handlers.Outbox).
type Outbox interface {
	Exists(ctx context.Context, channel, messageID string) (bool, error)
	Submit(ctx context.Context, channel string, m profile.Message) (bool, error)
}

// Config configures the page routes.
type Config struct {
	// PublicURL is the absolute base of page links (XIM_PUBLIC_URL). Required.
	PublicURL string
	// MaxBodyBytes bounds a posted message (XIM_MAX_PACKET_BYTES). Default 1 MiB.
	MaxBodyBytes int64
	// MaxFileBytes bounds an upload (XIM_MAX_FILE_BYTES); the file store enforces it too.
	// Default 64 MiB.
	MaxFileBytes int64
	// HistoryLimit is how many of a channel's latest items a page replays. Default 200.
	HistoryLimit int
	// StatusMaxAge: a stored status older than this is not replayed (its worker's own
	// timeout clears it, but it may have died). Default 60s.
	StatusMaxAge time.Duration
	// Heartbeat is the interval of SSE comments that keep idle connections open. Default 15s.
	Heartbeat time.Duration
	// Quotas bound one channel's streams, messages and uploads.
	Quotas Quotas
}

func (c *Config) defaults() {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = 64 << 20
	}
	if c.HistoryLimit <= 0 {
		c.HistoryLimit = 200
	}
	if c.StatusMaxAge <= 0 {
		c.StatusMaxAge = time.Minute
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 15 * time.Second
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
}

// Handler serves the webchat pages (gateway role).
type Handler struct {
	cfg      Config
	channels Channels
	store    *webchat.Store
	secrets  *Secrets
	files    Files
	outbox   Outbox
	catalog  *profile.Catalog
	posted   *prometheus.CounterVec
	logger   *slog.Logger
	mux      *http.ServeMux
	botMux   *http.ServeMux
	bots     Bots
	quotas   *quotas

	// life ends every event stream: Close cancels it (a server's Shutdown waits for open
	// requests, and an event stream never ends by itself).
	life     context.Context
	shutdown context.CancelFunc
}

// New returns the page handler. prom may be nil (metrics not registered).
func New(cfg Config, ch Channels, store *webchat.Store, secrets *Secrets, fs Files, outbox Outbox, cat *profile.Catalog, prom prometheus.Registerer, logger *slog.Logger) *Handler {
	cfg.defaults()
	h := &Handler{cfg: cfg, channels: ch, store: store, secrets: secrets, files: fs, outbox: outbox, catalog: cat, logger: logger, quotas: newQuotas(cfg.Quotas),
		posted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_webchat_messages_total", Help: "User messages posted from webchat pages, by outcome (accepted, duplicate, or the error code).",
		}, []string{"outcome"})}
	if prom != nil {
		prom.MustRegister(h.posted)
	}
	if h.logger == nil {
		h.logger = slog.New(slog.DiscardHandler)
	}
	m := http.NewServeMux()
	m.HandleFunc("GET /webchat/{channel}", h.page)
	m.HandleFunc("POST /webchat/{channel}/session", h.guard(h.session))
	m.HandleFunc("GET /webchat/{channel}/app.js", h.asset("app.js", "text/javascript; charset=utf-8"))
	m.HandleFunc("GET /webchat/{channel}/app.css", h.asset("app.css", "text/css; charset=utf-8"))
	m.HandleFunc("GET /webchat/{channel}/info", h.guard(h.info))
	m.HandleFunc("GET /webchat/{channel}/events", h.guard(h.events))
	m.HandleFunc("POST /webchat/{channel}/messages", h.guard(h.post))
	m.HandleFunc("POST /webchat/{channel}/uploads", h.guard(h.upload))
	m.HandleFunc("GET /webchat/{channel}/files/{ref}", h.guard(h.file))
	m.HandleFunc("/webchat/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, profile.CodeNotFound, "no route "+r.Method+" "+r.URL.Path)
	})
	h.mux = m
	h.botMux = h.botRoutes()
	h.life, h.shutdown = context.WithCancel(context.Background())
	return h
}

// Close ends every open event stream, and every later one at once; call it before the HTTP
// server's Shutdown. Pages reconnect to another gateway (or this one after a restart).
func (h *Handler) Close() { h.shutdown() }

// ServeHTTP serves /webchat/... (mounted without the bearer token: the page secret guards it).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	if strings.HasPrefix(r.URL.Path, "/webchat/bots/") {
		h.botMux.ServeHTTP(w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// Link serves GET /v1/channels/{id}/webchat (behind the bearer token): the page link of a
// webchat channel, the only place its secret leaves ximd.
func (h *Handler) Link(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ch, ok, err := h.lookup(r.Context(), id)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, profile.CodeUnavailable, "channel registry unavailable")
		return
	}
	if !ok || ch.Target.Adapter != webchat.Name {
		writeError(w, http.StatusNotFound, profile.CodeChannelNotOpen, "channel "+id+" is not an open webchat channel")
		return
	}
	secret, err := h.secrets.Of(ch)
	if err != nil {
		writeError(w, http.StatusBadRequest, profile.CodeInvalidDescriptor, "channel config unreadable")
		return
	}
	path := "/webchat/" + url.PathEscape(id) + "#" + KeyFragment + "=" + url.QueryEscape(secret)
	writeJSON(w, http.StatusOK, map[string]string{"connector_channel_id": id, "page_url": h.cfg.PublicURL + path, "page_path": path})
}

// guard admits a request that carries the channel's page secret: none is 401, a wrong one (or
// a channel that is not an open webchat channel, which has no valid secret) is 403. A GET may
// present it by the cookie; a POST only by the header, which another site cannot make a browser
// send (so the cookie cannot be ridden by a forged form).
func (h *Handler) guard(next func(http.ResponseWriter, *http.Request, adapter.Channel)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		got := pageKey(r)
		if got == "" {
			if ch, ok := h.visitorsChannel(r); ok {
				next(w, r, ch)
				return
			}
			writeError(w, http.StatusUnauthorized, profile.CodeUnauthorized, "this page needs its link's secret (the #k=… part of the link)")
			return
		}
		ch, valid, err := h.valid(r.Context(), r.PathValue("channel"), got)
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, profile.CodeUnavailable, "channel registry unavailable")
			return
		}
		if !valid {
			writeError(w, http.StatusForbidden, profile.CodeUnauthorized, "this link is not valid (wrong secret, or the channel was closed)")
			return
		}
		next(w, r, ch)
	}
}

// pageKey is the page secret a request presents: the header, else (a GET) the cookie.
func pageKey(r *http.Request) string {
	if k := r.Header.Get(KeyHeader); k != "" {
		return k
	}
	if c, err := r.Cookie(KeyCookie); err == nil && r.Method == http.MethodGet {
		return c.Value
	}
	return ""
}

// session answers POST /session (the secret in the header) with the HttpOnly cookie that
// carries it on the page's GETs, scoped to this channel's routes.
func (h *Handler) session(w http.ResponseWriter, r *http.Request, ch adapter.Channel) {
	http.SetCookie(w, &http.Cookie{
		Name: KeyCookie, Value: r.Header.Get(KeyHeader), Path: "/webchat/" + url.PathEscape(ch.ID) + "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.HasPrefix(h.cfg.PublicURL, "https://"),
	})
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// valid reports whether key is the page secret of an open webchat channel id.
func (h *Handler) valid(ctx context.Context, id, key string) (adapter.Channel, bool, error) {
	ch, ok, err := h.lookup(ctx, id)
	if err != nil {
		return adapter.Channel{}, false, err
	}
	want := ""
	if ok && ch.Target.Adapter == webchat.Name {
		want, _ = h.secrets.Of(ch)
	}
	return ch, want != "" && equal(key, want), nil
}

func (h *Handler) lookup(ctx context.Context, id string) (adapter.Channel, bool, error) {
	if !profile.ValidChannelID(id) {
		return adapter.Channel{}, false, nil
	}
	return h.channels.Lookup(ctx, id)
}

// page serves the page itself to anyone: it holds nothing of the channel (not even its title,
// which /info gives once the secret is shown), so it tells nobody which channels exist.
func (h *Handler) page(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("channel")
	if !profile.ValidChannelID(id) {
		writeError(w, http.StatusNotFound, profile.CodeNotFound, "no such page")
		return
	}
	h.render(w, map[string]string{"Channel": id, "Base": "/webchat/" + id}, "'none'")
}

// PageCSP is the page's Content-Security-Policy (without its frame-ancestors): its own script
// and style only, no inline code or style, nothing loaded from elsewhere, and markup set only
// through the page's one Trusted Types policy ("ximd-markdown", which sets an assistant
// message's html as ximd rendered it), so no message can bring script or style.
const PageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; " +
	"require-trusted-types-for 'script'; trusted-types ximd-markdown"

// render writes the page with data (Channel, Bot, Base: where its assets are) and the origins
// that may frame it (the CSP's frame-ancestors).
func (h *Handler) render(w http.ResponseWriter, data map[string]string, frameAncestors string) {
	var buf bytes.Buffer
	if err := pageTmpl.Execute(&buf, data); err != nil {
		writeError(w, http.StatusInternalServerError, profile.CodeInternal, "page template")
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Security-Policy", PageCSP+"; frame-ancestors "+frameAncestors)
	if frameAncestors != "'none'" {
		hd.Del("X-Frame-Options") // the CSP names who may frame it
	}
	_, _ = w.Write(buf.Bytes())
}

func (h *Handler) asset(name, ctype string) http.HandlerFunc {
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		panic("webchat page: missing asset " + name)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(b)
	}
}

func (h *Handler) info(w http.ResponseWriter, r *http.Request, ch adapter.Channel) {
	c, _ := webchat.ParseConfig(ch.Target.Config)
	writeJSON(w, http.StatusOK, map[string]any{"connector_channel_id": ch.ID, "title": c.Title,
		"max_file_bytes": h.cfg.MaxFileBytes})
}

// clientIDPattern: the page's id of one message (random, generated once per message).
var clientIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{8,64}$`)

// postBody is what the page posts.
type postBody struct {
	ClientID string   `json:"client_id"`
	Text     string   `json:"text"`
	FileRefs []string `json:"file_refs"`
}

// post makes a page message a user chat.message to xAgent, exactly like the webhook inbound
// route: message_id derived from the page's client_id, pending in the outbox until acked.
func (h *Handler) post(w http.ResponseWriter, r *http.Request, ch adapter.Channel) {
	if retry := h.quotas.message(ch.ID); retry > 0 {
		h.posted.WithLabelValues(profile.CodeRateLimited).Inc()
		tooMany(w, retry, "too many messages from this channel's pages (XIM_WEBCHAT_MESSAGES_PER_MINUTE)")
		return
	}
	status, code, msg := h.accept(w, r, ch, func(ctx context.Context, m profile.Message) error {
		_, err := h.outbox.Submit(ctx, ch.ID, m)
		return err
	}, nil)
	if code != "" {
		h.posted.WithLabelValues(code).Inc()
		writeError(w, status, code, msg)
	}
}

// accept takes a posted message of channel ch: submit makes it pending for xAgent; extra is added
// to the 202 answer.
func (h *Handler) accept(w http.ResponseWriter, r *http.Request, ch adapter.Channel, submit func(context.Context, profile.Message) error, extra map[string]any) (int, string, string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		return http.StatusRequestEntityTooLarge, profile.CodePacketTooLarge, "body exceeds " + strconv.FormatInt(h.cfg.MaxBodyBytes, 10) + " bytes"
	}
	var pb postBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pb); err != nil {
		return http.StatusBadRequest, profile.CodeInvalidPacket, "body: " + err.Error()
	}
	if !clientIDPattern.MatchString(pb.ClientID) {
		return http.StatusBadRequest, profile.CodeInvalidPacket, "client_id: must match ^[A-Za-z0-9_-]{8,64}$"
	}
	ctx := r.Context()
	id, item := webchat.UserMessageID(pb.ClientID), webchat.UserItemID(pb.ClientID)
	exists, err := h.outbox.Exists(ctx, ch.ID, id)
	if err != nil {
		return http.StatusServiceUnavailable, profile.CodeUnavailable, "outbox unavailable"
	}
	if exists {
		// A retry of a message already taken: make sure it is displayed, send nothing again.
		if _, _, found, err := h.store.Get(ctx, ch.ID, item); err == nil && !found {
			h.display(ctx, ch.ID, item, pb, nil)
		}
		h.posted.WithLabelValues(string(adapter.Duplicate)).Inc()
		writeJSON(w, http.StatusAccepted, with(extra, map[string]any{"message_id": id, "id": item, "duplicate": true}))
		return 0, "", ""
	}
	m := profile.Message{MessageID: id, Text: pb.Text, CreatedAt: time.Now().UnixMilli()}
	var shown []webchat.File
	for i, ref := range pb.FileRefs {
		meta, err := h.files.Stat(ctx, ch.ID, ref)
		if err != nil {
			var pe *profile.Error
			if errors.As(err, &pe) {
				return http.StatusUnprocessableEntity, pe.Code, "file_refs[" + strconv.Itoa(i) + "]: " + pe.Message
			}
			return http.StatusServiceUnavailable, profile.CodeUnavailable, "file store unavailable"
		}
		m.Files = append(m.Files, profile.File{Type: meta.Type, FileRef: meta.FileRef, Filename: meta.Filename, MimeType: meta.MimeType,
			ByteSize: meta.ByteSize, ExpiresAt: meta.ExpiresAt, DownloadURL: adapter.RefPath(meta.FileRef)})
		shown = append(shown, webchat.File{Type: meta.Type, FileRef: meta.FileRef, Filename: meta.Filename, MimeType: meta.MimeType, ByteSize: meta.ByteSize})
	}
	raw, _ := json.Marshal(m)
	if _, err := h.catalog.DecodeMessage(raw, profile.ToAgent); err != nil {
		pe := profile.AsError(err)
		return http.StatusBadRequest, pe.Code, pe.Message
	}
	if err := submit(ctx, m); err != nil {
		h.logger.Error("webchat_message_failed", "channel", ch.ID, "message_id", id, "err", err)
		return http.StatusServiceUnavailable, profile.CodeUnavailable, "message could not be stored"
	}
	h.display(ctx, ch.ID, item, pb, shown)
	h.posted.WithLabelValues(string(adapter.Accepted)).Inc()
	h.logger.Info("webchat_message_received", "channel", ch.ID, "message_id", id, "files", len(m.Files))
	writeJSON(w, http.StatusAccepted, with(extra, map[string]any{"message_id": id, "id": item}))
	return 0, "", ""
}

// with is answer with the members of extra added.
func with(extra, answer map[string]any) map[string]any {
	for k, v := range extra {
		answer[k] = v
	}
	return answer
}

// display writes the user's message to the channel's history (best effort: it is already
// pending for xAgent; a page retry writes it again).
func (h *Handler) display(ctx context.Context, channel, item string, pb postBody, fs []webchat.File) {
	now := time.Now().UnixMilli()
	it := webchat.Item{Kind: webchat.KindMessage, ID: item, Role: webchat.RoleUser, Text: pb.Text, Files: fs, Final: true,
		ClientID: pb.ClientID, Created: now, Updated: now}
	if _, err := h.store.Put(ctx, channel, item, it, true); err != nil {
		h.logger.Warn("webchat_display_failed", "channel", channel, "err", err)
	}
}

// upload stores one file from the page (multipart field "file") in the file store.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request, ch adapter.Channel) {
	limit := h.cfg.MaxFileBytes + 64<<10
	if r.ContentLength > limit {
		writeError(w, http.StatusRequestEntityTooLarge, profile.CodeFileTooLarge, "file exceeds the maximum of "+strconv.FormatInt(h.cfg.MaxFileBytes, 10)+" bytes")
		return
	}
	done, retry := h.quotas.upload(ch.ID, r.ContentLength)
	if retry > 0 {
		tooMany(w, retry, "this channel's pages uploaded too much this hour (XIM_WEBCHAT_UPLOAD_BYTES_PER_HOUR)")
		return
	}
	counted := &countingReader{r: http.MaxBytesReader(w, r.Body, limit)}
	defer func() { done(counted.n) }()
	r.Body = counted
	mr, err := r.MultipartReader()
	if err != nil {
		writeError(w, http.StatusBadRequest, profile.CodeBadRequest, "body must be multipart/form-data")
		return
	}
	for {
		p, err := mr.NextPart()
		if err != nil {
			writeError(w, http.StatusBadRequest, profile.CodeBadRequest, "multipart field \"file\" is required")
			return
		}
		if p.FormName() != "file" {
			_ = p.Close()
			continue
		}
		meta, err := h.files.Put(r.Context(), ch.ID, adapter.StoredFile{Filename: p.FileName(), MimeType: p.Header.Get("Content-Type")}, p)
		if err != nil {
			var pe *profile.Error
			var mbe *http.MaxBytesError
			switch {
			case errors.As(err, &pe):
				status := http.StatusBadRequest
				if info, ok := profile.Lookup(pe.Code); ok && info.HTTPStatus != 0 {
					status = info.HTTPStatus
				}
				writeError(w, status, pe.Code, pe.Message)
			case errors.As(err, &mbe):
				writeError(w, http.StatusRequestEntityTooLarge, profile.CodeFileTooLarge, "file exceeds the maximum size")
			default:
				h.logger.Error("webchat_upload_failed", "channel", ch.ID, "err", err)
				writeError(w, http.StatusServiceUnavailable, profile.CodeUnavailable, "file could not be stored")
			}
			return
		}
		writeJSON(w, http.StatusCreated, meta)
		return
	}
}

// file serves a file of the channel: images inline (for <img>), everything else as a download.
func (h *Handler) file(w http.ResponseWriter, r *http.Request, ch adapter.Channel) {
	ref := r.PathValue("ref")
	if _, err := h.files.Stat(r.Context(), ch.ID, ref); err != nil {
		var pe *profile.Error
		if errors.As(err, &pe) {
			writeError(w, http.StatusNotFound, pe.Code, pe.Message)
			return
		}
		writeError(w, http.StatusServiceUnavailable, profile.CodeUnavailable, "file store unavailable")
		return
	}
	m, rc, err := h.files.Open(r.Context(), ref)
	if err != nil {
		writeError(w, http.StatusNotFound, profile.CodeFileNotFound, "file "+ref+" not found")
		return
	}
	defer rc.Close()
	hd := w.Header()
	ctype := "application/octet-stream"
	disp := "attachment"
	switch m.MimeType {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		ctype, disp = m.MimeType, "inline"
	}
	hd.Set("Content-Type", ctype)
	hd.Set("Content-Length", strconv.FormatInt(m.ByteSize, 10))
	hd.Set("Content-Disposition", disp+"; filename*=UTF-8''"+url.PathEscape(m.Filename))
	hd.Set("Cache-Control", "private, max-age=3600")
	hd.Set("Content-Security-Policy", "sandbox")
	_, _ = io.Copy(w, rc)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"code": code, "message": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.ReadCloser
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) Close() error { return c.r.Close() }
