// Package dingtalktest is an in-process fake of the DingTalk open platform for the dingtalk
// adapter's tests: access tokens, AI card instances and streaming, robot sends, media upload,
// message file download and the Stream mode gateway, each following DingTalk's published
// documentation (README.md names the page behind each behaviour and what the fake assumes where
// the docs are silent). Tests drive it as the people in the conversations (Post, PostFile) and
// read what they see (Cards, Messages).
package dingtalktest

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/ximd/ximd/handlers/adapter/internal/fakekit"
)

// Error codes the fake answers (DingTalk's).
const (
	CodeBadCredentials = "invalidClientIdOrSecret"
	CodeInvalidAuth    = "InvalidAuthentication"
	CodeMissingToken   = "AuthenticationFailed.MissingParameter"
	CodeQPS            = "Forbidden.AccessDenied.QpsLimitForApi"
	// CodeCardNotFound answers an update of an unknown outTrackId (the code is the fake's: the
	// docs name none).
	CodeCardNotFound = "param.cardNotExist"
	// CodeCardExists answers a create with an outTrackId in use (the fake's code).
	CodeCardExists = "param.outTrackIdDuplicated"
)

// App is an enterprise internal app with its robot.
type App struct {
	ClientID      string
	ClientSecret  string
	RobotCode     string
	ChatbotUserID string
}

// User is a person of the organisation.
type User struct {
	StaffID    string // the organisation's userid (senderStaffId)
	DingtalkID string // senderId
	Nick       string
}

// Card is an AI card as a person sees it.
type Card struct {
	OutTrackID string
	App        string // its app's ClientID
	Space      string // openSpaceId
	Params     map[string]string
	// Statuses are the flowStatus values it went through, in order.
	Statuses []string
	// Streams counts its streaming calls; Finalized reports an isFinalize one.
	Streams   int
	Finalized bool
	// GUIDs are the guid of each streaming call.
	GUIDs   []string
	Created time.Time
}

// Text is what the card shows: its msgContent.
func (c Card) Text() string { return c.Params["msgContent"] }

// Status is its flowStatus now.
func (c Card) Status() string { return c.Params["flowStatus"] }

// Message is a robot message (groupMessages/send, oToMessages/batchSend) as a person sees it.
type Message struct {
	App      string
	Space    string // "dtv1.card//IM_GROUP.{cid}" or "dtv1.card//IM_ROBOT.{staffId}", as cards
	MsgKey   string
	Param    map[string]string
	FileName string
	Data     []byte
}

// Call is one API call the fake answered.
type Call struct {
	Method, Path string
	Status       int
	At           time.Time
}

// Server is the fake. Its methods are safe for concurrent use.
type Server struct {
	life  *fakekit.Lifecycle
	clock fakekit.Clock

	mu       sync.Mutex
	n        int
	apps     map[string]*App // by ClientID
	tokens   map[string]token
	cards    map[string]*Card
	order    []string
	messages []Message
	media    map[string]media
	files    map[string]media // downloadCode -> file
	calls    fakekit.Calls[Call]
	faults   fakekit.Faults[fault]
	hangs    fakekit.Hangs // by path prefix
	holding  int           // calls applied whose answer is held now
	qps      int           // card streaming calls per second per app (0: unlimited)
	window   map[string][]time.Time
	tickets  map[string]ticket
	conns    map[string]*conn // by ClientID: the newest
	queue    map[string][]*pending
	allGroup bool
	expireIn int
}

type token struct {
	app     string
	expires time.Time
}

type media struct {
	name string
	mime string
	data []byte
}

type fault struct {
	status int
	code   string
}

// New starts a fake.
func New() *Server {
	s := &Server{apps: map[string]*App{}, tokens: map[string]token{}, cards: map[string]*Card{}, media: map[string]media{},
		files: map[string]media{}, window: map[string][]time.Time{}, tickets: map[string]ticket{}, conns: map[string]*conn{},
		queue: map[string][]*pending{}, expireIn: 7200}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1.0/oauth2/accessToken", s.accessToken)
	mux.HandleFunc("POST /v1.0/card/instances/createAndDeliver", s.authed(s.createAndDeliver))
	mux.HandleFunc("PUT /v1.0/card/instances", s.authed(s.updateCard))
	mux.HandleFunc("PUT /v1.0/card/streaming", s.authed(s.streaming))
	mux.HandleFunc("POST /v1.0/robot/groupMessages/send", s.authed(s.groupSend))
	mux.HandleFunc("POST /v1.0/robot/oToMessages/batchSend", s.authed(s.otoSend))
	mux.HandleFunc("POST /v1.0/robot/messageFiles/download", s.authed(s.fileDownload))
	mux.HandleFunc("GET /download/{code}", s.download)
	mux.HandleFunc("POST /media/upload", s.upload)
	mux.HandleFunc("POST /v1.0/gateway/connections/open", s.openConnection)
	mux.HandleFunc("GET /connect", s.connect)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		hang := s.hangs.OfPrefix(r.URL.Path)
		s.mu.Unlock()
		if hang <= 0 || r.URL.Path == "/connect" {
			rec := &statusRecorder{ResponseWriter: w, status: 200}
			mux.ServeHTTP(rec, r)
			s.mu.Lock()
			s.calls.Add(Call{Method: r.Method, Path: r.URL.Path, Status: rec.status, At: s.clock.Now()})
			s.mu.Unlock()
			return
		}
		// Applied now, answered after the hold (or never, when the caller is gone first).
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, r)
		s.mu.Lock()
		s.holding++
		s.mu.Unlock()
		s.life.Sleep(r.Context(), hang)
		s.mu.Lock()
		s.holding--
		status := rec.Code
		if r.Context().Err() != nil {
			status = 0
		}
		s.calls.Add(Call{Method: r.Method, Path: r.URL.Path, Status: status, At: s.clock.Now()})
		s.mu.Unlock()
		if status == 0 {
			return
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	s.life = fakekit.NewLifecycle(ts)
	return s
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) { r.status = code; r.ResponseWriter.WriteHeader(code) }

// Hijack lets the WebSocket upgrade through.
func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return r.ResponseWriter.(http.Hijacker).Hijack()
}

// URL is the fake's base URL: api_url and oapi_url both.
func (s *Server) URL() string { return s.life.URL() }

// Close ends the fake, its connections first.
func (s *Server) Close() {
	s.life.Close(&s.mu, func() {
		s.mu.Lock()
		var cs []*conn
		for _, c := range s.conns {
			cs = append(cs, c)
		}
		s.mu.Unlock()
		for _, c := range cs {
			c.close()
		}
	})
}

// AddApp registers an app with its robot.
func (s *Server) AddApp() App {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	a := &App{ClientID: fmt.Sprintf("dingapp%d", s.n), ClientSecret: fmt.Sprintf("secret-%d-xyz", s.n), ChatbotUserID: fmt.Sprintf("$:LWCP_v1:$bot%d", s.n)}
	a.RobotCode = a.ClientID
	s.apps[a.ClientID] = a
	return *a
}

// AddUser returns a new person.
func (s *Server) AddUser(nick string) User {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return User{StaffID: fmt.Sprintf("staff%d", s.n), DingtalkID: fmt.Sprintf("$:LWCP_v1:$user%d", s.n), Nick: nick}
}

// AddGroup returns a new group's openConversationId (DingTalk's "cid…==" form).
func (s *Server) AddGroup() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return "cid" + base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("group-%d", s.n)))
}

// GroupSpace and DirectSpace are the openSpaceId of a group and of a person's one-to-one chat.
func GroupSpace(cid string) string      { return "dtv1.card//IM_GROUP." + cid }
func DirectSpace(staffID string) string { return "dtv1.card//IM_ROBOT." + staffID }

// SetCardQPS limits card streaming calls to n a second per app (0: unlimited); over it DingTalk
// answers 403 Forbidden.AccessDenied.QpsLimitForApi.
func (s *Server) SetCardQPS(n int) {
	s.mu.Lock()
	s.qps = n
	s.mu.Unlock()
}

// SetAllGroupMessages makes the fake push a group's messages that do not @-mention the robot
// too (isInAtList false), which DingTalk does not: the adapter's own gating is then tested.
func (s *Server) SetAllGroupMessages(on bool) {
	s.mu.Lock()
	s.allGroup = on
	s.mu.Unlock()
}

// ExpireTokens makes every access token given so far invalid (InvalidAuthentication).
func (s *Server) ExpireTokens() {
	s.mu.Lock()
	s.tokens = map[string]token{}
	s.mu.Unlock()
}

// FailNext answers the next n calls of path (e.g. "/v1.0/card/streaming") with status and code.
func (s *Server) FailNext(path string, n, status int, code string) {
	s.mu.Lock()
	s.faults.FailNext(path, n, fault{status: status, code: code})
	s.mu.Unlock()
}

// Hang makes the calls whose path starts with prefix (e.g. "/v1.0/card/") hold their answer
// for d after they were applied, or until the caller gives up or the fake closes: an
// applied-but-unanswered call for in-doubt tests. d = 0 stops it; calls held go on waiting.
func (s *Server) Hang(prefix string, d time.Duration) {
	s.mu.Lock()
	s.hangs.Set(prefix, d)
	s.mu.Unlock()
}

// Holding counts the calls applied whose answer is held now.
func (s *Server) Holding() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holding
}

// Calls are the calls answered so far (a held call whose caller left is Status 0).
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls.All()
}

// Cards are the cards of a space, oldest first.
func (s *Server) Cards(space string) []Card {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Card
	for _, id := range s.order {
		if c := s.cards[id]; c.Space == space {
			out = append(out, copyCard(c))
		}
	}
	return out
}

// AllCards are every card, oldest first.
func (s *Server) AllCards() []Card {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Card
	for _, id := range s.order {
		out = append(out, copyCard(s.cards[id]))
	}
	return out
}

func copyCard(c *Card) Card {
	cc := *c
	cc.Params = map[string]string{}
	for k, v := range c.Params {
		cc.Params[k] = v
	}
	cc.Statuses = append([]string(nil), c.Statuses...)
	cc.GUIDs = append([]string(nil), c.GUIDs...)
	return cc
}

// Messages are the robot messages of a space, oldest first.
func (s *Server) Messages(space string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.messages {
		if m.Space == space {
			out = append(out, m)
		}
	}
	return out
}

// ---- HTTP helpers

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"requestid": "fake", "code": code, "message": msg})
}

// authed checks the x-acs-dingtalk-access-token header (and an injected fault) before h, which
// gets the caller's app and the decoded JSON body.
func (s *Server) authed(h func(w http.ResponseWriter, app *App, body map[string]any)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok := r.Header.Get("x-acs-dingtalk-access-token")
		s.mu.Lock()
		f, faulted := s.faults.Take(r.URL.Path)
		t, ok := s.tokens[tok]
		app := s.apps[t.app]
		s.mu.Unlock()
		switch {
		case tok == "":
			writeErr(w, 400, CodeMissingToken, "missing x-acs-dingtalk-access-token")
			return
		case !ok || s.clock.Now().After(t.expires) || app == nil:
			writeErr(w, 400, CodeInvalidAuth, "不合法的access_token")
			return
		case faulted:
			writeErr(w, f.status, f.code, "injected")
			return
		}
		var body map[string]any
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil {
			writeErr(w, 400, "invalidParameter", "body is not JSON")
			return
		}
		h(w, app, body)
	}
}

func str(m map[string]any, k string) string {
	v, _ := m[k].(string)
	return v
}

func obj(m map[string]any, k string) map[string]any {
	v, _ := m[k].(map[string]any)
	return v
}

func (s *Server) accessToken(w http.ResponseWriter, r *http.Request) {
	var in struct{ AppKey, AppSecret string }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.AppKey == "" {
		writeErr(w, 400, "MissingappKey", "appKey is mandatory for this action.")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	app := s.apps[in.AppKey]
	if app == nil || app.ClientSecret != in.AppSecret {
		writeErr(w, 400, CodeBadCredentials, "无效的clientId或者clientSecret")
		return
	}
	s.n++
	tok := fmt.Sprintf("tok%d%s", s.n, strings.Repeat("x", 8))
	s.tokens[tok] = token{app: app.ClientID, expires: s.clock.Now().Add(time.Duration(s.expireIn) * time.Second)}
	writeJSON(w, 200, map[string]any{"accessToken": tok, "expireIn": s.expireIn})
}

// tokenApp is the app of an oapi call's access_token query parameter.
func (s *Server) tokenApp(r *http.Request) *App {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tokens[r.URL.Query().Get("access_token")]
	if !ok || s.clock.Now().After(t.expires) {
		return nil
	}
	return s.apps[t.app]
}
