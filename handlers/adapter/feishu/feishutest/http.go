package feishutest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxJSONBody caps an application/json request body (card data may be 3,000,000 characters).
const maxJSONBody = 8 << 20

// Codes the fake answers with. Each is documented where it is used.
const (
	codeOK             = 0
	codeFrequencyLimit = 99991400 // API call guide, "Rate limits"
)

// apiError is a refusal: the HTTP status, the Feishu code and msg, and the rate-limit headers
// when limit or reset is set.
type apiError struct {
	status int
	code   int
	msg    string
	limit  int // x-ogw-ratelimit-limit, 0: header absent
	reset  int // x-ogw-ratelimit-reset in seconds, 0: header absent
}

func (e *apiError) Error() string { return strconv.Itoa(e.code) + " " + e.msg }

// badRequest is an HTTP 400 refusal with a code.
func badRequest(code int, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: code, msg: msg}
}

// frequencyLimit is the documented over-limit answer: HTTP 429, code 99991400 and the
// x-ogw-ratelimit headers ("Rate limits": "Response for limitations").
func frequencyLimit(limit, reset int) *apiError {
	return &apiError{status: http.StatusTooManyRequests, code: codeFrequencyLimit,
		msg: "request trigger frequency limit", limit: limit, reset: reset}
}

// request is a call being served.
type request struct {
	ctx    context.Context
	r      *http.Request
	app    *appState // nil on the token endpoint
	params map[string]string
	body   []byte // the JSON body; nil for multipart routes
	rt     *route
}

// rawAnswer is a successful answer that is not JSON (a downloaded resource).
type rawAnswer struct {
	mime string
	name string
	data []byte
}

// tokenAnswer is the token endpoint's answer, which has no data object.
type tokenAnswer struct {
	token  string
	expire int
}

// Route patterns: the value of Call.Route, and prefixes for FailNext and Hang. A prefix
// matches every route that starts with it, so RouteMessages also covers reply and resources.
const (
	RouteToken        = "/open-apis/auth/v3/tenant_access_token/internal"
	RouteBotInfo      = "/open-apis/bot/v3/info"
	RouteMessages     = "/open-apis/im/v1/messages"
	RouteReply        = "/open-apis/im/v1/messages/:message_id/reply"
	RouteResource     = "/open-apis/im/v1/messages/:message_id/resources/:file_key"
	RouteChat         = "/open-apis/im/v1/chats/:chat_id"
	RouteImages       = "/open-apis/im/v1/images"
	RouteFiles        = "/open-apis/im/v1/files"
	RouteCards        = "/open-apis/cardkit/v1/cards"
	RouteCard         = "/open-apis/cardkit/v1/cards/:card_id"
	RouteCardSettings = "/open-apis/cardkit/v1/cards/:card_id/settings"
	RouteCardElemText = "/open-apis/cardkit/v1/cards/:card_id/elements/:element_id/content"
)

// Path parameter names and headers.
const (
	routeParamCardID   = "card_id"
	routeParamMessage  = "message_id"
	routeParamFileKey  = "file_key"
	routeParamChatID   = "chat_id"
	routeParamElemID   = "element_id"
	headerLogID        = "X-Tt-Logid"
	headerLimit        = "x-ogw-ratelimit-limit"
	headerReset        = "x-ogw-ratelimit-reset"
	contentTypeJSONUTF = "application/json; charset=utf-8"
)

// route is an endpoint: method, path pattern and handler. Handlers take s.mu themselves.
type route struct {
	method    string
	pattern   string // path segments, ":name" for a parameter
	noAuth    bool
	multipart bool
	fn        func(s *Server, q *request) (any, *apiError)
}

var routes = []*route{
	{method: http.MethodPost, pattern: RouteToken, noAuth: true, fn: (*Server).issueToken},
	{method: http.MethodGet, pattern: RouteBotInfo, fn: (*Server).botInfo},
	{method: http.MethodPost, pattern: RouteMessages, fn: (*Server).sendMessage},
	{method: http.MethodPost, pattern: RouteReply, fn: (*Server).replyMessage},
	{method: http.MethodGet, pattern: RouteResource, fn: (*Server).getResource},
	{method: http.MethodGet, pattern: RouteChat, fn: (*Server).getChat},
	{method: http.MethodPost, pattern: RouteImages, multipart: true, fn: (*Server).uploadImage},
	{method: http.MethodPost, pattern: RouteFiles, multipart: true, fn: (*Server).uploadFile},
	{method: http.MethodPost, pattern: RouteCards, fn: (*Server).createCard},
	{method: http.MethodPut, pattern: RouteCard, fn: (*Server).updateCard},
	{method: http.MethodPatch, pattern: RouteCardSettings, fn: (*Server).cardSettings},
	{method: http.MethodPut, pattern: RouteCardElemText, fn: (*Server).streamText},
}

// matchRoute finds the route of a path. It returns the route with the path parameters, or
// nil and whether some route has that path with another method.
func matchRoute(method, path string) (*route, map[string]string, bool) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	pathKnown := false
	for _, rt := range routes {
		pat := strings.Split(strings.Trim(rt.pattern, "/"), "/")
		if len(pat) != len(segs) {
			continue
		}
		params := map[string]string{}
		ok := true
		for i, p := range pat {
			if name, isParam := strings.CutPrefix(p, ":"); isParam {
				if segs[i] == "" {
					ok = false
					break
				}
				params[name] = segs[i]
			} else if p != segs[i] {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		if rt.method != method {
			pathKnown = true
			continue
		}
		return rt, params, true
	}
	return nil, nil, pathKnown
}

// serveHTTP records a call, checks its token, applies injected faults, running reset windows
// and the gateway limit, runs the route, holds the answer if Hang asks, and answers.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	rt, params, pathKnown := matchRoute(r.Method, r.URL.Path)
	var body []byte
	if rt != nil && !rt.multipart {
		body, _ = io.ReadAll(io.LimitReader(r.Body, maxJSONBody))
	}
	defer func() { _, _ = io.Copy(io.Discard, r.Body) }() // let the connection be reused

	s.mu.Lock()
	idx := s.calls.Add(Call{Method: r.Method, Path: r.URL.Path, At: s.Now()})
	var e *apiError
	var app *appState
	hang := time.Duration(0)
	switch {
	case rt == nil && pathKnown:
		// "Generic error codes": 99991301 request method doesn't match. The status is a choice.
		e = &apiError{status: http.StatusMethodNotAllowed, code: 99991301, msg: "request method doesn't match"}
	case rt == nil:
		// "Generic error codes": 99991201 resource not find, "request path error (404)".
		e = &apiError{status: http.StatusNotFound, code: 99991201, msg: "resource not find"}
	default:
		s.calls.At(idx).Route = rt.pattern
		if !rt.noAuth {
			app, e = s.authLocked(r)
			if app != nil {
				s.calls.At(idx).AppID = app.ID
			}
		}
		if e == nil {
			e = s.preflightLocked(idx, rt, app, params)
		}
		hang = s.hangs.OfPrefix(rt.pattern)
	}
	s.mu.Unlock()

	var result any
	if e == nil {
		q := &request{ctx: r.Context(), r: r, app: app, params: params, body: body, rt: rt}
		result, e = rt.fn(s, q)
		if hang > 0 {
			s.life.Sleep(r.Context(), hang)
		}
	}
	status, code := 0, 0
	if r.Context().Err() == nil {
		status, code = writeAnswer(w, result, e)
	}
	s.mu.Lock()
	c := s.calls.At(idx)
	c.Status, c.Code = status, code
	s.mu.Unlock()
}

// authLocked checks the Authorization header ("Generic error codes" 99991661, 99991671,
// 99991663, 99991668). The HTTP status of these is not documented; the API call guide says a
// failed call answers 4xx or 5xx, and the fake answers 400. s.mu is held.
func (s *Server) authLocked(r *http.Request) (*appState, *apiError) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	tok = strings.TrimSpace(tok)
	if !ok || tok == "" {
		return nil, badRequest(99991661, "Need a token")
	}
	switch {
	case strings.HasPrefix(tok, "u-"):
		return nil, badRequest(99991668, "Invalid access token for authorization. Please make a request with token attached.")
	case !strings.HasPrefix(tok, "t-"):
		return nil, badRequest(99991671, "Invalid token: must start with t-/u-")
	}
	t := s.tokens[tok]
	if t == nil || !s.Now().Before(t.expires) {
		return nil, badRequest(99991663, "Invalid access token for authorization. Please make a request with token attached.")
	}
	return t.app, nil
}

// writeAnswer writes a success or an error and returns the HTTP status and code it wrote.
func writeAnswer(w http.ResponseWriter, result any, e *apiError) (int, int) {
	h := w.Header()
	h.Set(headerLogID, randHex(16))
	if e != nil {
		if e.limit > 0 {
			h.Set(headerLimit, strconv.Itoa(e.limit))
		}
		if e.reset > 0 {
			h.Set(headerReset, strconv.Itoa(e.reset))
		}
		writeJSON(w, e.status, wireError{Code: e.code, Msg: e.msg, Error: wireLogID{LogID: h.Get(headerLogID)}})
		return e.status, e.code
	}
	switch v := result.(type) {
	case rawAnswer:
		h.Set("Content-Type", v.mime)
		h.Set("Content-Length", strconv.Itoa(len(v.data)))
		if v.name != "" {
			h.Set("Content-Disposition", `attachment; filename="`+strings.ReplaceAll(v.name, `"`, "")+`"`)
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(v.data) // the client may be gone
	case tokenAnswer:
		writeJSON(w, http.StatusOK, wireToken{Code: codeOK, Msg: "ok", TenantAccessToken: v.token, Expire: v.expire})
	case wireBotData:
		writeJSON(w, http.StatusOK, wireBotInfo{Code: codeOK, Msg: "ok", Bot: v})
	default:
		if result == nil {
			result = struct{}{}
		}
		writeJSON(w, http.StatusOK, wireOK{Code: codeOK, Msg: "success", Data: result})
	}
	return http.StatusOK, codeOK
}

// writeJSON writes a JSON body with a status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"code":1500,"msg":"internal error"}`) // our own types always encode
	}
	w.Header().Set("Content-Type", contentTypeJSONUTF)
	w.WriteHeader(status)
	_, _ = w.Write(b) // the client may be gone
}
