package telegramtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/ximd/ximd/handlers/adapter/internal/fakekit"
)

// Size caps of request bodies ("Sending files": 50 MB for uploads other than photos).
const (
	maxUpload     = 50 << 20 // bytes of one uploaded file
	maxValue      = 1 << 20  // bytes of one non-file multipart value
	maxJSONBody   = 8 << 20  // bytes of an application/json body
	maxPhotoBytes = 10 << 20 // bytes of an uploaded photo
)

// request is a method call being served.
type request struct {
	ctx    context.Context
	bot    *botState
	p      *params
	chatID int64
	desc   string // description added to an ok answer
}

// handlerFunc serves a method; it takes s.mu itself.
type handlerFunc func(s *Server, q *request) (any, *apiError)

type methodSpec struct {
	name string // canonical, as documented
	fn   handlerFunc
}

// methods maps lower-cased method names ("All methods in the Bot API are case-insensitive").
var methods = func() map[string]methodSpec {
	m := map[string]methodSpec{}
	for _, spec := range []methodSpec{
		{"getMe", (*Server).getMe},
		{"getChat", (*Server).getChat},
		{"sendMessage", (*Server).sendMessage},
		{"editMessageText", (*Server).editMessageText},
		{"sendMessageDraft", (*Server).sendMessageDraft},
		{"sendRichMessage", (*Server).sendRichMessage},
		{"sendRichMessageDraft", (*Server).sendRichMessageDraft},
		{"sendChatAction", (*Server).sendChatAction},
		{"sendPhoto", mediaSender("photo")},
		{"sendDocument", mediaSender("document")},
		{"sendVideo", mediaSender("video")},
		{"sendAudio", mediaSender("audio")},
		{"getFile", (*Server).getFile},
		{"getUpdates", (*Server).getUpdates},
		{"setWebhook", (*Server).setWebhook},
		{"deleteWebhook", (*Server).deleteWebhook},
		{"getWebhookInfo", (*Server).getWebhookInfo},
	} {
		m[strings.ToLower(spec.name)] = spec
	}
	return m
}()

// canonicalMethod is the key of a method in faults and hangs.
func canonicalMethod(name string) string { return strings.ToLower(name) }

// serveHTTP routes {URL}/bot<token>/<method> and {URL}/file/bot<token>/<file_path>.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if rest, ok := strings.CutPrefix(r.URL.Path, "/file/bot"); ok {
		s.serveDownload(w, r, rest)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/bot")
	token, name, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || name == "" || strings.Contains(name, "/") {
		writeAnswer(w, nil, "", &apiError{code: http.StatusNotFound, desc: "Not Found"})
		return
	}
	s.serveMethod(w, r, token, name)
}

// serveMethod records a call, applies injected faults and a running retry_after window, runs
// the method, holds the answer if Hang asks, and answers.
func (s *Server) serveMethod(w http.ResponseWriter, r *http.Request, token, name string) {
	key := canonicalMethod(name)
	spec, known := methods[key]
	method := name
	if known {
		method = spec.name
	}
	p, perr := parseParams(r)
	_, _ = io.Copy(io.Discard, r.Body) // let the connection be reused
	chatID, _ := p.int64("chat_id")

	s.mu.Lock()
	idx := s.calls.Add(Call{Method: method, ChatID: chatID, At: s.Now()})
	b := s.tokens[token]
	e := s.preflightLocked(idx, token, b, known, key, chatID, perr)
	hang := s.hangs.Of(key)
	s.mu.Unlock()

	var result any
	var desc string
	if e == nil {
		q := &request{ctx: r.Context(), bot: b, p: p, chatID: chatID}
		result, e = spec.fn(s, q)
		desc = q.desc
		if hang > 0 {
			s.life.Sleep(r.Context(), hang)
		}
	}
	status := 0
	if r.Context().Err() == nil {
		status = writeAnswer(w, result, desc, e)
	}
	s.mu.Lock()
	s.calls.At(idx).Status = status
	s.mu.Unlock()
}

// preflightLocked checks the token and the method, sets the call's Early flag, and answers an
// injected fault or a running retry_after window. s.mu is held.
func (s *Server) preflightLocked(idx int, token string, b *botState, known bool, key string, chatID int64, perr *apiError) *apiError {
	if _, ok := tokenID(token); !ok {
		return &apiError{code: http.StatusUnauthorized, desc: "Unauthorized: invalid token specified"}
	}
	if b == nil {
		return &apiError{code: http.StatusUnauthorized, desc: "Unauthorized"}
	}
	if !known {
		return &apiError{code: http.StatusNotFound, desc: "Not Found"}
	}
	now := s.Now()
	bk := budgetKey{bot: b.ID, chat: chatID}
	left := s.windows.Left(bk, now)
	s.calls.At(idx).Early = left > 0
	if f, ok := s.faults.Take(key); ok {
		if f.code == http.StatusTooManyRequests && f.retryAfter > 0 {
			s.windows.Open(bk, now, f.retryAfter)
		}
		return &apiError{code: f.code, desc: f.desc, retryAfter: f.retryAfter}
	}
	if left > 0 {
		return tooManyRequests(fakekit.Seconds(left))
	}
	return perr
}

// serveDownload serves {URL}/file/bot<token>/<file_path> ("getFile": the link is
// https://api.telegram.org/file/bot<token>/<file_path>).
func (s *Server) serveDownload(w http.ResponseWriter, r *http.Request, rest string) {
	token, path, _ := strings.Cut(rest, "/")
	s.mu.Lock()
	b := s.tokens[token]
	f := s.paths[path]
	s.mu.Unlock()
	if b == nil || f == nil {
		writeAnswer(w, nil, "", &apiError{code: http.StatusNotFound, desc: "Not Found"})
		return
	}
	w.Header().Set("Content-Type", f.mime)
	w.Header().Set("Content-Length", strconv.Itoa(len(f.data)))
	if r.Method != http.MethodHead {
		_, _ = w.Write(f.data) // stored bytes are never changed; the client may be gone
	}
}

// params are a call's parameters, every value as a string as the Bot API takes them, and its
// uploaded files by form field name.
type params struct {
	vals  map[string]string
	files map[string]*upload
}

// upload is a file part of a multipart/form-data body.
type upload struct {
	filename    string
	contentType string
	data        []byte // nil when size > maxUpload
	size        int64
}

// str returns a parameter, "" when absent.
func (p *params) str(name string) string { return p.vals[name] }

// int64 parses an integer parameter; ok is false when it is absent or not an integer.
func (p *params) int64(name string) (int64, bool) {
	v, err := strconv.ParseInt(strings.TrimSpace(p.vals[name]), 10, 64)
	return v, err == nil
}

// bool parses a Boolean parameter as the Bot API does: "true", "yes" or "1".
func (p *params) bool(name string) bool {
	switch strings.ToLower(strings.TrimSpace(p.vals[name])) {
	case "true", "yes", "1":
		return true
	}
	return false
}

// parseParams reads the query string and an application/json,
// application/x-www-form-urlencoded or multipart/form-data body ("Making requests"). Body
// values override query values. It always returns non-nil params.
func parseParams(r *http.Request) (*params, *apiError) {
	p := &params{vals: map[string]string{}, files: map[string]*upload{}}
	for k, v := range r.URL.Query() {
		p.vals[k] = v[0]
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		body, err := io.ReadAll(io.LimitReader(r.Body, maxJSONBody))
		if err != nil {
			return p, badRequest("can't read request body")
		}
		if err := decodeJSONParams(body, p.vals); err != nil {
			return p, badRequest("can't parse JSON object")
		}
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			return p, badRequest("can't parse form")
		}
		for k, v := range r.PostForm {
			p.vals[k] = v[0]
		}
	case "multipart/form-data":
		if err := readMultipart(r, p); err != nil {
			return p, badRequest("can't parse multipart/form-data body")
		}
	}
	return p, nil
}

// decodeJSONParams flattens a JSON object into parameters: a string value as itself, any other
// value as its JSON text, null as absent. An empty body has no parameters.
func decodeJSONParams(body []byte, vals map[string]string) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return fmt.Errorf("decode JSON parameters: %w", err)
	}
	for k, raw := range obj {
		switch {
		case string(raw) == "null":
		case len(raw) > 0 && raw[0] == '"':
			var str string
			if err := json.Unmarshal(raw, &str); err != nil {
				return fmt.Errorf("decode JSON parameter %s: %w", k, err)
			}
			vals[k] = str
		default:
			vals[k] = string(raw)
		}
	}
	return nil
}

// readMultipart reads form values and file parts; a file over maxUpload is drained and kept
// with its size only.
func readMultipart(r *http.Request, p *params) error {
	mr, err := r.MultipartReader()
	if err != nil {
		return fmt.Errorf("multipart reader: %w", err)
	}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("next part: %w", err)
		}
		name := part.FormName()
		if part.FileName() == "" {
			v, err := io.ReadAll(io.LimitReader(part, maxValue))
			if err != nil {
				return fmt.Errorf("read field %s: %w", name, err)
			}
			p.vals[name] = string(v)
			continue
		}
		data, err := io.ReadAll(io.LimitReader(part, maxUpload+1))
		if err != nil {
			return fmt.Errorf("read file %s: %w", name, err)
		}
		up := &upload{filename: part.FileName(), contentType: part.Header.Get("Content-Type"), data: data, size: int64(len(data))}
		if up.size > maxUpload {
			rest, err := io.Copy(io.Discard, part)
			if err != nil {
				return fmt.Errorf("read file %s: %w", name, err)
			}
			up.size += rest
			up.data = nil
		}
		p.files[name] = up
	}
}

// tooManyRequests is the 429 answer ("Too Many Requests: retry after N", parameters.retry_after).
func tooManyRequests(retryAfter int) *apiError {
	return &apiError{
		code:       http.StatusTooManyRequests,
		desc:       "Too Many Requests: retry after " + strconv.Itoa(retryAfter),
		retryAfter: retryAfter,
	}
}
