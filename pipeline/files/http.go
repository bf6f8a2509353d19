package files

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/profile"
)

// Form fields of POST /files/uploads.
const (
	FieldChannel  = "connector_channel_id"
	FieldFile     = "file"
	FieldType     = "type"
	FieldFilename = "filename"
	FieldMimeType = "mime_type"
)

// Upload parsing bounds.
const (
	// uploadOverhead is what a request may carry beyond the file: boundaries, part headers and
	// the small text fields.
	uploadOverhead = 64 << 10
	// maxFieldBytes bounds one text field.
	maxFieldBytes = 1 << 10
	// maxParts bounds the number of parts of one upload.
	maxParts = 16
	// cleanupTimeout bounds removing a file an upload must not keep.
	cleanupTimeout = 10 * time.Second
)

// Handler serves the Transfer Plane (edge-api §6) under /files/:
//
//   - POST /files/uploads: multipart/form-data with connector_channel_id and file (required),
//     type, filename and mime_type (optional); needs the bearer token (authorized). The file is
//     streamed into the bucket. 201 with the Meta as JSON. Errors: 401 unauthorized, 400
//     bad_request (not multipart, a missing or repeated field, a bad type or mime_type), 400
//     invalid_channel_id, 404 channel_not_open, 413 file_too_large (nothing is stored).
//   - GET (and HEAD) /files/refs/{ref}: the bytes, with Content-Type, Content-Length,
//     Content-Disposition: attachment (RFC 6266 filename plus RFC 8187 filename*), Cache-Control:
//     private, X-Content-Type-Options: nosniff and a sandbox Content-Security-Policy. Allowed with
//     the bearer token or a valid signed link (?exp&sig of SignedURL). A missing, tampered or
//     expired link without a token is 401 unauthorized, never 404, so a link tells nothing about
//     the file. Unknown or expired refs: 404 file_not_found.
//   - Other methods on these paths: 405 method_not_allowed (401 first without the token); other
//     paths under /files/: 404 not_found (401 first without the token).
//
// Failures of the store are 503 unavailable when NATS cannot be reached in time, else 500
// internal_error (a full bucket included); both are retryable.
//
// Fields may come in any order. When connector_channel_id precedes file (the usual order), the
// channel is checked before any byte is stored; otherwise the file is stored unowned (invisible
// to Stat and Open) and removed again if the channel turns out invalid or closed.
//
// authorized reports whether the request carries the valid bearer token (the edge compares it in
// constant time); channels tells whether a channel is open. Error bodies are JSON {"code",
// "message"} with the HTTP status of the code's entry in the profile error table.
func (s *Store) Handler(authorized func(*http.Request) bool, channels ChannelOpen) http.Handler {
	h := &handler{s: s, authorized: authorized, channels: channels}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /files/uploads", h.upload)
	mux.HandleFunc("GET /files/refs/{ref}", h.download)
	mux.HandleFunc("/files/uploads", h.notAllowed(http.MethodPost))
	mux.HandleFunc("/files/refs/{ref}", h.notAllowed("GET, HEAD"))
	mux.HandleFunc("/files/", h.notFound)
	return mux
}

type handler struct {
	s          *Store
	authorized func(*http.Request) bool
	channels   ChannelOpen
}

// upload handles POST /files/uploads.
func (h *handler) upload(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(r) {
		writeError(w, profile.CodeUnauthorized, "missing or invalid bearer token")
		return
	}
	limit := h.s.cfg.MaxFileBytes + uploadOverhead
	if r.ContentLength > limit {
		writeError(w, profile.CodeFileTooLarge, h.tooLarge())
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	mr, err := r.MultipartReader()
	if err != nil {
		writeError(w, profile.CodeBadRequest, "body must be multipart/form-data")
		return
	}
	u := upload{h: h, w: w, r: r, fields: map[string]string{}}
	defer u.cleanup()
	u.run(mr)
}

// upload is the state of one POST /files/uploads.
type upload struct {
	h      *handler
	w      http.ResponseWriter
	r      *http.Request
	fields map[string]string
	// stored is the file once its part is read; removed again by cleanup unless kept.
	stored   *Meta
	kept     bool
	partName string // the file part's filename parameter
	partType string // the file part's Content-Type, when meaningful
	late     bool   // a descriptive field came after the file part
}

func (u *upload) run(mr *multipart.Reader) {
	for parts := 0; ; parts++ {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			u.bodyError(err)
			return
		}
		if parts == maxParts {
			u.fail(profile.CodeBadRequest, "too many parts")
			return
		}
		if !u.part(part) {
			return
		}
	}
	ch, ok := u.fields[FieldChannel]
	if !ok {
		u.fail(profile.CodeBadRequest, FieldChannel+" is required")
		return
	}
	if !u.channelOK(ch) {
		return
	}
	if u.stored == nil {
		u.fail(profile.CodeBadRequest, FieldFile+" is required")
		return
	}
	m := *u.stored
	if m.ChannelID == "" || u.late {
		d, err := describe(Meta{
			Type:     u.fields[FieldType],
			Filename: first(u.fields[FieldFilename], u.partName),
			MimeType: first(u.fields[FieldMimeType], u.partType, m.MimeType),
		})
		if err != nil {
			u.fail(codeOf(err), err.Error())
			return
		}
		if d.Type == "" {
			d.Type = typeOf(d.MimeType)
		}
		m.ChannelID, m.Type, m.Filename, m.MimeType = ch, d.Type, d.Filename, d.MimeType
		if err := u.h.s.updateMeta(u.r.Context(), m); err != nil {
			u.internal(err)
			return
		}
	}
	// Narrows the race with a concurrent DELETE of the channel, whose purge may have run before
	// the file was stored.
	if !u.channelOK(ch) {
		return
	}
	u.kept = true
	u.h.s.logger.Info("file_uploaded", "channel", ch, "file_ref", m.FileRef, "byte_size", m.ByteSize, "mime_type", m.MimeType)
	writeJSON(u.w, http.StatusCreated, m)
}

// part handles one part; false means the response was written.
func (u *upload) part(p *multipart.Part) bool {
	name := p.FormName()
	switch name {
	case FieldFile:
		return u.file(p)
	case FieldChannel, FieldType, FieldFilename, FieldMimeType:
		b, err := io.ReadAll(io.LimitReader(p, maxFieldBytes+1))
		if err != nil {
			u.bodyError(err)
			return false
		}
		if len(b) > maxFieldBytes {
			u.fail(profile.CodeBadRequest, name+" is too long")
			return false
		}
		if _, dup := u.fields[name]; dup {
			u.fail(profile.CodeBadRequest, name+" is repeated")
			return false
		}
		u.fields[name] = string(b)
		if u.stored != nil && name != FieldChannel {
			u.late = true
		}
	default:
		// Unknown parts are skipped; MaxBytesReader bounds them.
		if _, err := io.Copy(io.Discard, p); err != nil {
			u.bodyError(err)
			return false
		}
	}
	return true
}

// file streams the file part into the store.
func (u *upload) file(p *multipart.Part) bool {
	if u.stored != nil {
		u.fail(profile.CodeBadRequest, FieldFile+" is repeated")
		return false
	}
	ch, haveCh := u.fields[FieldChannel]
	if haveCh && !u.channelOK(ch) {
		return false
	}
	u.partName = p.FileName()
	if ct := p.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/octet-stream") {
		u.partType = ct
	}
	body := &bodyReader{r: p}
	m, err := u.h.s.put(u.r.Context(), Meta{
		ChannelID: ch, // empty when the field comes later: stored unowned until then
		Type:      u.fields[FieldType],
		Filename:  first(u.fields[FieldFilename], u.partName),
		MimeType:  first(u.fields[FieldMimeType], u.partType),
	}, body)
	if err != nil {
		var perr *profile.Error
		switch {
		case body.err != nil:
			u.bodyError(body.err)
		case errors.As(err, &perr):
			u.fail(perr.Code, perr.Message)
		default:
			u.internal(err)
		}
		return false
	}
	u.stored = &m
	return true
}

// channelOK answers invalid_channel_id or channel_not_open and reports false when ch is not an
// open channel.
func (u *upload) channelOK(ch string) bool {
	if !profile.ValidChannelID(ch) {
		u.fail(profile.CodeInvalidChannelID, FieldChannel+" must match ^[A-Za-z0-9_-]{1,128}$")
		return false
	}
	if !u.h.channels.IsOpen(ch) {
		u.fail(profile.CodeChannelNotOpen, "channel is not open")
		return false
	}
	return true
}

// bodyError answers a failure to read the request body.
func (u *upload) bodyError(err error) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		u.fail(profile.CodeFileTooLarge, u.h.tooLarge())
		return
	}
	u.fail(profile.CodeBadRequest, "malformed multipart body")
}

func (u *upload) internal(err error) {
	u.h.s.logger.Error("file_upload_failed", "channel", u.fields[FieldChannel], "err", err)
	u.fail(storeCode(err), "storing the file failed")
}

func (u *upload) fail(code, msg string) { writeError(u.w, code, msg) }

// cleanup removes a stored file the upload did not keep.
func (u *upload) cleanup() {
	if u.stored == nil || u.kept {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(u.r.Context()), cleanupTimeout)
	defer cancel()
	if err := u.h.s.discard(ctx, u.stored.FileRef); err != nil {
		// The bucket's max age removes it later; it is unowned or of a closed channel meanwhile.
		u.h.s.logger.Warn("file_discard_failed", "file_ref", u.stored.FileRef, "err", err)
	}
}

func (h *handler) tooLarge() string {
	return "file exceeds the maximum of " + strconv.FormatInt(h.s.cfg.MaxFileBytes, 10) + " bytes"
}

// download handles GET and HEAD /files/refs/{ref}.
func (h *handler) download(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("ref")
	if !h.mayRead(r, ref) {
		writeError(w, profile.CodeUnauthorized, "missing or invalid bearer token or signed link")
		return
	}
	m, rc, err := h.s.Open(r.Context(), ref)
	if err != nil {
		var perr *profile.Error
		if errors.As(err, &perr) {
			writeError(w, perr.Code, perr.Message)
			return
		}
		h.s.logger.Error("file_open_failed", "file_ref", ref, "err", err)
		writeError(w, storeCode(err), "reading the file failed")
		return
	}
	defer rc.Close()
	hd := w.Header()
	hd.Set("Content-Type", safeContentType(m.MimeType))
	hd.Set("Content-Length", strconv.FormatInt(m.ByteSize, 10))
	hd.Set("Content-Disposition", contentDisposition(m.Filename))
	hd.Set("Cache-Control", "private")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Security-Policy", "sandbox")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	if _, err := io.Copy(w, rc); err != nil {
		// Headers are gone; the client sees a short body. Usually the client went away.
		h.s.logger.Debug("file_download_aborted", "file_ref", ref, "err", err)
	}
}

// mayRead: a valid signed link for this ref, or the bearer token.
func (h *handler) mayRead(r *http.Request, ref string) bool {
	q := r.URL.Query()
	if q.Has("sig") && h.s.VerifyLink(ref, q.Get("exp"), q.Get("sig"), h.s.now()) {
		return true
	}
	return h.authorized(r)
}

func (h *handler) notAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.authorized(r) {
			writeError(w, profile.CodeUnauthorized, "missing or invalid bearer token")
			return
		}
		w.Header().Set("Allow", allow)
		writeError(w, profile.CodeMethodNotAllowed, r.Method+" is not allowed here")
	}
}

func (h *handler) notFound(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(r) {
		writeError(w, profile.CodeUnauthorized, "missing or invalid bearer token")
		return
	}
	writeError(w, profile.CodeNotFound, "no such route")
}

// bodyReader remembers the request body's read error, to tell it from the store's.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.err = err
	}
	return n, err
}

// errorBody is the JSON error body of the HTTP API.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeError answers code with the HTTP status of its profile error table entry.
func writeError(w http.ResponseWriter, code, msg string) {
	status := http.StatusInternalServerError
	if info, ok := profile.Lookup(code); ok && info.HTTPStatus != 0 {
		status = info.HTTPStatus
	}
	writeJSON(w, status, errorBody{Code: code, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// storeCode is the protocol code of a store failure.
func storeCode(err error) string {
	for _, target := range []error{nats.ErrTimeout, nats.ErrConnectionClosed, nats.ErrNoServers,
		nats.ErrNoResponders, jetstream.ErrNoStreamResponse, context.DeadlineExceeded} {
		if errors.Is(err, target) {
			return profile.CodeUnavailable
		}
	}
	return profile.CodeInternal
}

func codeOf(err error) string {
	var perr *profile.Error
	if errors.As(err, &perr) {
		return perr.Code
	}
	return profile.CodeInternal
}

func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// safeContentType is the stored mime type when it still parses, else application/octet-stream.
func safeContentType(v string) string {
	if mt, err := normalizeMime(v); err == nil {
		return mt
	}
	return "application/octet-stream"
}

// contentDisposition is "attachment" with an ASCII fallback filename and the exact name as
// RFC 8187 filename*; every byte that could end the header or the parameter is escaped.
func contentDisposition(name string) string {
	var ascii, ext strings.Builder
	for _, r := range name {
		if r >= 0x20 && r < 0x7f && r != '"' && r != '\\' {
			ascii.WriteRune(r)
		} else {
			ascii.WriteByte('_')
		}
	}
	const hexd = "0123456789ABCDEF"
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$&+-.^_`|~", c) >= 0 {
			ext.WriteByte(c)
		} else {
			ext.WriteByte('%')
			ext.WriteByte(hexd[c>>4])
			ext.WriteByte(hexd[c&15])
		}
	}
	return `attachment; filename="` + ascii.String() + `"; filename*=UTF-8''` + ext.String()
}
