package slacktest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ximd/ximd/handlers/adapter/internal/fakekit"
)

// Size caps of request bodies.
const (
	maxBody   = 8 << 20 // bytes of a Web API request body
	maxUpload = 1 << 30 // bytes of one upload (a choice: 1 GB)
	maxText   = 40_000  // characters of text ("chat.postMessage": msg_too_long)
	maxMD     = 12_000  // characters of markdown_text
	maxLimit  = 999     // conversations.history limit
	defLimit  = 100     // conversations.history and conversations.replies default limit
	maxReplyL = 1000    // conversations.replies limit
)

// tokenKind is the kind of token a method takes ("Token types").
type tokenKind int

const (
	botToken tokenKind = iota // xoxb-
	appToken                  // xapp-
)

// request is a method call being served.
type request struct {
	ctx  context.Context
	bot  *botState
	p    map[string]string
	base string // scheme://host of the fake, for URLs in answers
}

// str returns an argument, "" when absent.
func (q *request) str(name string) string { return q.p[name] }

// bool parses a Boolean argument ("true" or "1").
func (q *request) bool(name string) bool {
	v := strings.ToLower(q.p[name])
	return v == "true" || v == "1"
}

// answer is a method's ok answer (fields besides "ok") or its error string.
type answer struct {
	fields map[string]any
	err    string
}

func okAnswer(fields map[string]any) answer { return answer{fields: fields} }
func errAnswer(e string) answer             { return answer{err: e} }

type methodSpec struct {
	name  string
	fn    func(s *Server, q *request) answer
	class limitClass
	token tokenKind
}

// methods are the Web API methods of the fake by name (method names are case-sensitive).
var methods = func() map[string]methodSpec {
	m := map[string]methodSpec{}
	for _, spec := range []methodSpec{
		{"auth.test", (*Server).authTest, tier4, botToken},
		{"conversations.info", (*Server).conversationsInfo, tier3, botToken},
		{"users.info", (*Server).usersInfo, tier4, botToken},
		{"conversations.history", (*Server).conversationsHistory, tier3, botToken},
		{"conversations.replies", (*Server).conversationsReplies, tier3, botToken},
		{"chat.postMessage", (*Server).chatPostMessage, perChannel, botToken},
		{"chat.update", (*Server).chatUpdate, tier3, botToken},
		{"chat.startStream", (*Server).chatStartStream, perChannel, botToken},
		{"chat.appendStream", (*Server).chatAppendStream, tier4, botToken},
		{"chat.stopStream", (*Server).chatStopStream, tier4, botToken},
		{"assistant.threads.setStatus", (*Server).setStatus, tier4, botToken},
		{"files.getUploadURLExternal", (*Server).getUploadURLExternal, tier4, botToken},
		{"files.completeUploadExternal", (*Server).completeUploadExternal, tier4, botToken},
		{"apps.connections.open", (*Server).appsConnectionsOpen, tier1, appToken},
	} {
		m[spec.name] = spec
	}
	return m
}()

// fault is an answer injected by FailNext.
type fault struct {
	err        string
	status     int
	retryAfter int
}

// FailNext makes the next n calls of method answer HTTP httpStatus (0 means 200) with
// {"ok":false,"error":slackError}, before anything else is checked or applied.
// retryAfter > 0 adds a Retry-After header and, with status 429, starts that method's
// rate-limit window as a real 429 does (calls in it are Early).
func (s *Server) FailNext(method string, n int, slackError string, httpStatus int, retryAfter int) {
	if httpStatus == 0 {
		httpStatus = http.StatusOK
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.FailNext(method, n, fault{err: slackError, status: httpStatus, retryAfter: retryAfter})
}

// Hang makes calls of method hold their answer for d after they were applied, or until the
// client gives up or the server closes: an applied-but-unanswered call for in-doubt tests.
// d = 0 stops it.
func (s *Server) Hang(method string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hangs.Set(method, d)
}

// Calls returns every Web API call so far, in order of arrival.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls.All()
}

// EarlyCalls counts the calls made while a Retry-After given for their budget was running.
func (s *Server) EarlyCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls.Count(func(c Call) bool { return c.Early })
}

// serveHTTP routes the Web API, the Socket Mode link, uploads and file downloads.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	switch {
	case strings.HasPrefix(path, "/api/"):
		s.serveMethod(w, r, strings.TrimPrefix(path, "/api/"))
	case strings.HasPrefix(path, "/link"):
		s.serveLink(w, r)
	case strings.HasPrefix(path, "/upload/v1/"):
		s.serveUpload(w, r, strings.TrimPrefix(path, "/upload/v1/"))
	case strings.HasPrefix(path, "/files-pri/"):
		s.serveDownload(w, r, strings.TrimPrefix(path, "/files-pri/"))
	case path == "/":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, "<!DOCTYPE html><html><head><title>Sign in | Slack</title></head><body>Sign in to your workspace</body></html>")
	default:
		http.NotFound(w, r)
	}
}

// serveMethod records a call, authenticates it, applies injected faults and rate limits,
// runs the method, holds the answer if Hang asks, and answers.
func (s *Server) serveMethod(w http.ResponseWriter, r *http.Request, name string) {
	p, isJSON, perr := parseParams(r)
	_, _ = io.Copy(io.Discard, r.Body) // let the connection be reused
	token := bearer(r)
	if token == "" && !isJSON {
		token = p["token"] // "Tokens should be passed as an HTTP Authorization header or alternatively, as a POST parameter"
	}
	channel := p["channel"]
	if channel == "" {
		channel = p["channel_id"]
	}
	spec, known := methods[name]

	s.mu.Lock()
	idx := s.calls.Add(Call{Method: name, Channel: channel, At: s.Now()})
	b := s.tokens[token]
	var hdr http.Header
	ans, status := s.preflightLocked(idx, token, b, spec, known, name, channel, perr)
	if ra := s.calls.At(idx).retryAfter; ra > 0 {
		hdr = http.Header{"Retry-After": {strconv.Itoa(ra)}}
	}
	hang := s.hangs.Of(name)
	s.mu.Unlock()

	applied := false
	if status == 0 {
		q := &request{ctx: r.Context(), bot: b, p: p, base: s.life.URL()}
		ans = spec.fn(s, q)
		status = http.StatusOK
		applied = true
	}
	if applied && hang > 0 {
		s.life.Sleep(r.Context(), hang)
	}
	wrote := 0
	if r.Context().Err() == nil {
		wrote = writeAnswer(w, status, hdr, ans)
	}
	s.mu.Lock()
	c := s.calls.At(idx)
	c.Status, c.Error = wrote, ans.err
	s.mu.Unlock()
}

// preflightLocked checks the token and method, answers injected faults and running
// rate-limit windows, and spends the call's budget. A zero status lets the method run.
// s.mu is held.
func (s *Server) preflightLocked(idx int, token string, b *botState, spec methodSpec, known bool, name, channel string, perr string) (answer, int) {
	if perr != "" {
		return errAnswer(perr), http.StatusOK
	}
	if !known {
		return errAnswer("unknown_method"), http.StatusOK
	}
	if token == "" {
		return errAnswer("not_authed"), http.StatusOK
	}
	if b == nil {
		return errAnswer("invalid_auth"), http.StatusOK
	}
	isApp := strings.HasPrefix(token, "xapp-")
	if isApp != (spec.token == appToken) {
		return errAnswer("not_allowed_token_type"), http.StatusOK
	}
	now := s.Now()
	key := budgetKey{bot: b.UserID, method: name}
	if spec.class == perChannel {
		key.channel = channel
	}
	call := s.calls.At(idx)
	left := s.windows.Left(key, now)
	call.Early = left > 0
	if f, ok := s.faults.Take(name); ok {
		if f.retryAfter > 0 {
			call.retryAfter = f.retryAfter
			if f.status == http.StatusTooManyRequests {
				s.windows.Open(key, now, f.retryAfter)
			}
		}
		return errAnswer(f.err), f.status
	}
	if left > 0 {
		call.retryAfter = fakekit.Seconds(left)
		return errAnswer("ratelimited"), http.StatusTooManyRequests
	}
	if wait := s.spendLocked(s.budgetLocked(key), spec.class, now); wait > 0 {
		n := fakekit.Seconds(wait)
		s.windows.Open(key, now, n)
		call.retryAfter = n
		return errAnswer("ratelimited"), http.StatusTooManyRequests
	}
	return answer{}, 0
}

// writeAnswer writes {"ok":true,...} or {"ok":false,"error":...} and returns the status.
func writeAnswer(w http.ResponseWriter, status int, hdr http.Header, a answer) int {
	body := map[string]any{}
	for k, v := range a.fields {
		body[k] = v
	}
	if a.err != "" {
		body["ok"] = false
		body["error"] = a.err
	} else {
		body["ok"] = true
	}
	for k, v := range hdr {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body) // the client may be gone
	return status
}

// bearer returns the token of an "Authorization: Bearer" header.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if t, ok := strings.CutPrefix(h, "Bearer "); ok {
		return strings.TrimSpace(t)
	}
	return ""
}

// parseParams reads the query string and an application/x-www-form-urlencoded,
// application/json or multipart/form-data body. In JSON, a value that is not a string is
// kept as its JSON text. perr is a Slack error for a body that does not parse.
func parseParams(r *http.Request) (p map[string]string, isJSON bool, perr string) {
	p = map[string]string{}
	for k, v := range r.URL.Query() {
		p[k] = v[0]
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
		if err != nil {
			return p, true, "invalid_json"
		}
		if len(bytes.TrimSpace(body)) == 0 {
			return p, true, ""
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(body, &obj); err != nil {
			return p, true, "invalid_json"
		}
		for k, raw := range obj {
			switch {
			case string(raw) == "null":
			case len(raw) > 0 && raw[0] == '"':
				var str string
				if err := json.Unmarshal(raw, &str); err != nil {
					return p, true, "invalid_json"
				}
				p[k] = str
			default:
				p[k] = string(raw)
			}
		}
		return p, true, ""
	case "application/x-www-form-urlencoded":
		r.Body = http.MaxBytesReader(nil, r.Body, maxBody)
		if err := r.ParseForm(); err != nil {
			return p, false, "invalid_form_data"
		}
		for k, v := range r.PostForm {
			p[k] = v[0]
		}
	case "multipart/form-data":
		if err := r.ParseMultipartForm(maxBody); err != nil {
			return p, false, "invalid_form_data"
		}
		for k, v := range r.MultipartForm.Value {
			p[k] = v[0]
		}
	}
	return p, false, ""
}
