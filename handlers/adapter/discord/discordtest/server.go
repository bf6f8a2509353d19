// Package discordtest is a fake of the Discord API for tests: the REST calls the discord adapter
// makes (Create Message with nonce and enforce_nonce, multipart files, Edit Message, Trigger
// Typing Indicator, Get Channel Messages, Get Channel, Get Current User, Get Gateway Bot) and a
// Gateway WebSocket that github.com/bwmarrin/discordgo accepts (HELLO, IDENTIFY, READY,
// heartbeats, MESSAGE_CREATE, close code 4004 for a bad token), following Discord's published
// documentation method by method (README.md names the page behind each behaviour): per-route
// buckets with X-RateLimit-* headers and 429 retry_after, nonce dedupe within a window, the error
// body {"code", "message"}, attachments at signed URLs.
package discordtest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

const epoch = 1420070400000

// Limits are the fake's rate limits: messages (creates and edits together) and typing per
// channel and bot, each Window.
type Limits struct {
	Messages int
	Typing   int
	Window   time.Duration
}

// DefaultLimits are Discord's observed 5 messages in 5 s per channel.
var DefaultLimits = Limits{Messages: 5, Typing: 5, Window: 5 * time.Second}

// User is a person or a bot account.
type User struct {
	ID    string
	Name  string
	Bot   bool
	Token string // a bot's
}

// Channel kinds.
const (
	GuildText    = 0
	DM           = 1
	PublicThread = 11
)

// File is an attachment.
type File struct {
	ID          string
	Name        string
	ContentType string
	Data        []byte
}

// Message is a message as the channel shows it.
type Message struct {
	ID        string
	ChannelID string
	Author    User
	Content   string
	Type      int // 0, or 19 for a reply
	ReplyTo   string
	Files     []File
	Mentions  []string
	Nonce     string
	Edits     int
}

type channel struct {
	id, guild, parent, name string
	kind                    int
	members                 map[string]bool // user ids that see it
}

type nonceKey struct{ author, channel, nonce string }

type nonceHit struct {
	id string
	at time.Time
}

// Server is the fake.
type Server struct {
	ts       *httptest.Server
	mu       sync.Mutex
	users    map[string]*User
	tokens   map[string]*User
	channels map[string]*channel
	messages map[string][]*Message // channel -> oldest first
	nonces   map[nonceKey]nonceHit
	typing   map[string]time.Time // channel -> last typing of a bot
	buckets  map[string][]time.Time
	limits   Limits
	faults   map[string][]int // route -> statuses to answer next
	last     uint64
	conns    map[*conn]bool
	calls    []Call
	revoked  map[string]bool // tokens the gateway refuses (close code 4004)
	dials    int

	// NonceWindow is how long a nonce is remembered (default 5 minutes).
	NonceWindow time.Duration
	// TypingFor is how long typing shows (Discord: 10 s).
	TypingFor time.Duration
}

// Call is one REST call the fake answered.
type Call struct {
	Method, Path string
	Status       int
	Body         string
	At           time.Time
}

// New starts a fake.
func New() *Server {
	s := &Server{users: map[string]*User{}, tokens: map[string]*User{}, channels: map[string]*channel{},
		messages: map[string][]*Message{}, nonces: map[nonceKey]nonceHit{}, typing: map[string]time.Time{},
		buckets: map[string][]time.Time{}, limits: DefaultLimits, faults: map[string][]int{}, conns: map[*conn]bool{},
		NonceWindow: 5 * time.Minute, TypingFor: 10 * time.Second}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v10/users/@me", s.me)
	mux.HandleFunc("GET /api/v10/gateway/bot", s.gatewayBot)
	mux.HandleFunc("GET /api/v10/channels/{id}", s.getChannel)
	mux.HandleFunc("GET /api/v10/channels/{id}/messages", s.listMessages)
	mux.HandleFunc("POST /api/v10/channels/{id}/messages", s.createMessage)
	mux.HandleFunc("PATCH /api/v10/channels/{id}/messages/{mid}", s.editMessage)
	mux.HandleFunc("POST /api/v10/channels/{id}/typing", s.trigger)
	mux.HandleFunc("GET /attachments/{mid}/{fid}/{name}", s.attachment)
	mux.HandleFunc("GET /gateway", s.gateway)
	mux.HandleFunc("GET /gateway/", s.gateway) // discordgo adds a "/" before its query
	s.ts = httptest.NewServer(mux)
	return s
}

// URL is the REST API base (api_url).
func (s *Server) URL() string { return s.ts.URL + "/api/v10" }

// Close ends the server and every gateway connection.
func (s *Server) Close() {
	s.mu.Lock()
	for c := range s.conns {
		c.ws.Close()
	}
	s.mu.Unlock()
	s.ts.Close()
}

// SetLimits replaces the rate limits.
func (s *Server) SetLimits(l Limits) { s.mu.Lock(); s.limits = l; s.mu.Unlock() }

// FailNext makes the next n calls of route ("POST messages", "PATCH messages", "POST typing")
// answer status (429: with retry_after).
func (s *Server) FailNext(route string, n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.faults[route] = append(s.faults[route], status)
	}
}

// Calls are the REST calls answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// nextID is a new snowflake of now, above every one before.
func (s *Server) nextID() string {
	id := uint64(time.Now().UnixMilli()-epoch) << 22
	if id <= s.last {
		id = s.last + 1
	}
	s.last = id
	return strconv.FormatUint(id, 10)
}

// AddBot adds a bot account with token.
func (s *Server) AddBot(token, name string) User {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := &User{ID: s.nextID(), Name: name, Bot: true, Token: token}
	s.users[u.ID], s.tokens[token] = u, u
	return *u
}

// AddUser adds a person.
func (s *Server) AddUser(name string) User {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := &User{ID: s.nextID(), Name: name}
	s.users[u.ID] = u
	return *u
}

// AddChannel adds a guild text channel (guild != "") or a DM channel (guild "") seen by members.
func (s *Server) AddChannel(guild string, members ...User) string {
	kind := GuildText
	if guild == "" {
		kind = DM
	}
	return s.addChannel(kind, guild, "", members)
}

// AddThread adds a public thread of parent, seen by parent's members.
func (s *Server) AddThread(parent string) string {
	s.mu.Lock()
	p := s.channels[parent]
	var members []User
	for id := range p.members {
		members = append(members, *s.users[id])
	}
	guild := p.guild
	s.mu.Unlock()
	return s.addChannel(PublicThread, guild, parent, members)
}

func (s *Server) addChannel(kind int, guild, parent string, members []User) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &channel{id: s.nextID(), guild: guild, parent: parent, kind: kind, members: map[string]bool{}}
	c.name = "chan-" + c.id[len(c.id)-4:]
	for _, m := range members {
		c.members[m.ID] = true
	}
	s.channels[c.id] = c
	return c.id
}

// Post writes text as u in channel (mentioning the users in mentions) and returns its id.
func (s *Server) Post(channelID string, u User, text string, mentions ...User) string {
	return s.post(channelID, u, text, "", nil, mentions)
}

// PostReply writes a reply to message replyTo.
func (s *Server) PostReply(channelID string, u User, text, replyTo string) string {
	return s.post(channelID, u, text, replyTo, nil, nil)
}

// PostFile writes text with a file as u.
func (s *Server) PostFile(channelID string, u User, text, name string, data []byte) string {
	return s.post(channelID, u, text, "", []File{{Name: name, ContentType: http.DetectContentType(data), Data: data}}, nil)
}

func (s *Server) post(channelID string, u User, text, replyTo string, files []File, mentions []User) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := &Message{ID: s.nextID(), ChannelID: channelID, Author: *s.users[u.ID], Content: text, ReplyTo: replyTo, Files: files}
	if replyTo != "" {
		m.Type = 19
	}
	for _, x := range mentions {
		m.Mentions = append(m.Mentions, x.ID)
	}
	for i := range m.Files {
		m.Files[i].ID = s.nextID()
	}
	s.add(m)
	return m.ID
}

// add stores m and dispatches MESSAGE_CREATE to the gateway connections of the bots that see
// its channel. Called with s.mu held.
func (s *Server) add(m *Message) {
	s.messages[m.ChannelID] = append(s.messages[m.ChannelID], m)
	if m.Author.Bot {
		delete(s.typing, m.ChannelID) // a bot's message ends its typing
	}
	c := s.channels[m.ChannelID]
	ev := s.wire(m)
	for cn := range s.conns {
		if !c.members[cn.bot.ID] || !cn.ready {
			continue
		}
		if c.guild != "" && cn.intents&(1<<15) == 0 && m.Author.ID != cn.bot.ID && !slices.Contains(m.Mentions, cn.bot.ID) {
			blank := maps.Clone(ev) // without MESSAGE_CONTENT: no content, no attachments
			blank["content"], blank["attachments"] = "", []any{}
			cn.dispatch("MESSAGE_CREATE", blank)
			continue
		}
		cn.dispatch("MESSAGE_CREATE", ev)
	}
}

// Messages are channel's messages, oldest first.
func (s *Server) Messages(channelID string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.messages[channelID] {
		out = append(out, *m)
	}
	return out
}

// Typing reports whether a bot's typing shows in channel now.
func (s *Server) Typing(channelID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.typing[channelID]
	return ok && time.Since(at) < s.TypingFor
}

// RevokeGateway makes the gateway refuse token with close code 4004 (the REST API keeps it).
func (s *Server) RevokeGateway(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.revoked == nil {
		s.revoked = map[string]bool{}
	}
	s.revoked[token] = true
}

// GatewayDials is the number of gateway connections made so far.
func (s *Server) GatewayDials() int { s.mu.Lock(); defer s.mu.Unlock(); return s.dials }

// Disconnect closes every gateway connection (a network cut; the client reconnects).
func (s *Server) Disconnect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.ws.Close()
	}
}

// Connections is the number of open gateway connections of the bot with token.
func (s *Server) Connections(token string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		if c.bot.Token == token {
			n++
		}
	}
	return n
}

// --- REST ---

// apiError writes Discord's error body {"code", "message"} with status.
func apiError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": code, "message": msg})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// auth is the bot of the request's "Authorization: Bot <token>", or nil after a 401.
func (s *Server) auth(w http.ResponseWriter, r *http.Request) *User {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bot ")
	s.mu.Lock()
	u := s.tokens[tok]
	s.mu.Unlock()
	if !ok || u == nil {
		apiError(w, http.StatusUnauthorized, 0, "401: Unauthorized")
		return nil
	}
	return u
}

// access is the channel of the path if bot sees it; else 404 10003 or 403 50001 is written.
// Called with s.mu held.
func (s *Server) access(w http.ResponseWriter, r *http.Request, bot *User) *channel {
	c := s.channels[r.PathValue("id")]
	switch {
	case c == nil:
		apiError(w, http.StatusNotFound, 10003, "Unknown Channel")
		return nil
	case !c.members[bot.ID]:
		apiError(w, http.StatusForbidden, 50001, "Missing Access")
		return nil
	}
	return c
}

// onChannel serves a REST call on the path's channel {id}: the request's bot is authenticated
// (else 401); read, when not nil, reads the request's body before the channel is looked up
// (false: it wrote the error); then, with s.mu held, serve runs if the bot sees the channel
// (else 404 10003 or 403 50001, by access).
func (s *Server) onChannel(w http.ResponseWriter, r *http.Request, read func() bool, serve func(bot *User, c *channel)) {
	bot := s.auth(w, r)
	if bot == nil {
		return
	}
	if read != nil && !read() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.access(w, r, bot); c != nil {
		serve(bot, c)
	}
}

// limit takes a slot of the bucket (bot, channel, route) and writes its X-RateLimit-* headers;
// false after a 429 (with retry_after) or a queued fault was written. Called with s.mu held.
func (s *Server) limit(w http.ResponseWriter, bot *User, channelID, route string, max int) bool {
	if fs := s.faults[route]; len(fs) > 0 {
		s.faults[route] = fs[1:]
		if fs[0] == http.StatusTooManyRequests {
			tooMany(w, 0.25, route)
		} else {
			apiError(w, fs[0], 0, http.StatusText(fs[0]))
		}
		return false
	}
	key := bot.ID + " " + channelID + " " + route
	now := time.Now()
	win := s.limits.Window
	times := s.buckets[key]
	for len(times) > 0 && now.Sub(times[0]) >= win {
		times = times[1:]
	}
	if len(times) >= max {
		s.buckets[key] = times
		tooMany(w, times[0].Add(win).Sub(now).Seconds(), route)
		return false
	}
	times = append(times, now)
	s.buckets[key] = times
	reset := times[0].Add(win)
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(max))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(max-len(times)))
	h.Set("X-RateLimit-Reset", strconv.FormatFloat(float64(reset.UnixMilli())/1000, 'f', 3, 64))
	h.Set("X-RateLimit-Reset-After", strconv.FormatFloat(reset.Sub(now).Seconds(), 'f', 3, 64))
	h.Set("X-RateLimit-Bucket", route)
	return true
}

func tooMany(w http.ResponseWriter, after float64, bucket string) {
	after = max(after, 0.001)
	h := w.Header()
	h.Set("Retry-After", strconv.Itoa(int(after+0.999)))
	h.Set("X-RateLimit-Limit", "5")
	h.Set("X-RateLimit-Remaining", "0")
	h.Set("X-RateLimit-Reset-After", strconv.FormatFloat(after, 'f', 3, 64))
	h.Set("X-RateLimit-Bucket", bucket)
	h.Set("X-RateLimit-Scope", "user")
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	_ = json.NewEncoder(w).Encode(map[string]any{"message": "You are being rate limited.", "retry_after": after, "global": false})
}

func (s *Server) record(r *http.Request, status int, body string) {
	s.calls = append(s.calls, Call{Method: r.Method, Path: r.URL.Path, Status: status, Body: body, At: time.Now()})
}

func (s *Server) me(w http.ResponseWriter, r *http.Request) {
	u := s.auth(w, r)
	if u == nil {
		return
	}
	writeJSON(w, userJSON(*u))
}

func (s *Server) gatewayBot(w http.ResponseWriter, r *http.Request) {
	if s.auth(w, r) == nil {
		return
	}
	writeJSON(w, map[string]any{"url": "ws" + strings.TrimPrefix(s.ts.URL, "http") + "/gateway", "shards": 1,
		"session_start_limit": map[string]int{"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}})
}

func (s *Server) getChannel(w http.ResponseWriter, r *http.Request) {
	s.onChannel(w, r, nil, func(_ *User, c *channel) {
		v := map[string]any{"id": c.id, "type": c.kind, "name": c.name}
		if c.guild != "" {
			v["guild_id"] = c.guild
		}
		if c.parent != "" {
			v["parent_id"] = c.parent
		}
		writeJSON(w, v)
	})
}

func (s *Server) listMessages(w http.ResponseWriter, r *http.Request) {
	s.onChannel(w, r, nil, func(_ *User, c *channel) {
		limit, err := strconv.Atoi(r.URL.Query().Get("limit"))
		if err != nil || limit < 1 || limit > 100 {
			limit = 50
		}
		after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
		var out []any
		for _, m := range s.messages[c.id] { // oldest first: the first limit after "after"
			if id, _ := strconv.ParseUint(m.ID, 10, 64); id > after && len(out) < limit {
				out = append(out, s.wire(m))
			}
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
		if out == nil {
			out = []any{}
		}
		writeJSON(w, out)
	})
}

// createBody is what Create Message reads.
type createBody struct {
	Content         *string `json:"content"`
	Nonce           any     `json:"nonce"`
	EnforceNonce    bool    `json:"enforce_nonce"`
	AllowedMentions *struct {
		Parse []string `json:"parse"`
	} `json:"allowed_mentions"`
	MessageReference *struct {
		MessageID string `json:"message_id"`
	} `json:"message_reference"`
}

func (s *Server) createMessage(w http.ResponseWriter, r *http.Request) {
	var body createBody
	var files []File
	read := func() bool {
		mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if mt == "multipart/form-data" {
			mr := multipart.NewReader(r.Body, params["boundary"])
			for {
				p, err := mr.NextPart()
				if err != nil {
					break
				}
				data, _ := io.ReadAll(io.LimitReader(p, 25<<20))
				switch name := p.FormName(); {
				case name == "payload_json":
					_ = json.Unmarshal(data, &body)
				case strings.HasPrefix(name, "files["):
					files = append(files, File{Name: p.FileName(), ContentType: p.Header.Get("Content-Type"), Data: data})
				}
			}
		} else if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			apiError(w, http.StatusBadRequest, 50109, "The request body contains invalid JSON.")
			return false
		}
		return true
	}
	s.onChannel(w, r, read, func(bot *User, c *channel) {
		content := ""
		if body.Content != nil {
			content = *body.Content
		}
		nonce := ""
		if body.Nonce != nil {
			nonce = fmt.Sprint(body.Nonce)
		}
		if len([]rune(content)) > 2000 || len(nonce) > 25 {
			apiError(w, http.StatusBadRequest, 50035, "Invalid Form Body")
			return
		}
		if content == "" && len(files) == 0 {
			apiError(w, http.StatusBadRequest, 50006, "Cannot send an empty message")
			return
		}
		nk := nonceKey{bot.ID, c.id, nonce}
		if hit, ok := s.nonces[nk]; ok && body.EnforceNonce && nonce != "" && time.Since(hit.at) < s.NonceWindow {
			for _, m := range s.messages[c.id] {
				if m.ID == hit.id {
					s.record(r, 200, content)
					writeJSON(w, s.wire(m))
					return
				}
			}
			apiError(w, http.StatusNotFound, 10008, "Unknown Message")
			return
		}
		if !s.limit(w, bot, c.id, "messages", s.limits.Messages) {
			s.record(r, 429, content)
			return
		}
		m := &Message{ID: s.nextID(), ChannelID: c.id, Author: *bot, Content: content, Nonce: nonce, Files: files}
		for i := range m.Files {
			m.Files[i].ID = s.nextID()
		}
		if body.MessageReference != nil && body.MessageReference.MessageID != "" {
			m.Type, m.ReplyTo = 19, body.MessageReference.MessageID
		}
		if body.AllowedMentions == nil || body.AllowedMentions.Parse == nil || len(body.AllowedMentions.Parse) > 0 {
			m.Mentions = mentionsIn(content) // Discord's default: every mention in the text pings
		}
		if nonce != "" && body.EnforceNonce {
			s.nonces[nk] = nonceHit{id: m.ID, at: time.Now()}
		}
		s.add(m)
		s.record(r, 200, content)
		writeJSON(w, s.wire(m))
	})
}

func (s *Server) editMessage(w http.ResponseWriter, r *http.Request) {
	var body createBody
	read := func() bool {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			apiError(w, http.StatusBadRequest, 50109, "The request body contains invalid JSON.")
			return false
		}
		return true
	}
	s.onChannel(w, r, read, func(bot *User, c *channel) {
		var m *Message
		for _, x := range s.messages[c.id] {
			if x.ID == r.PathValue("mid") {
				m = x
			}
		}
		switch {
		case m == nil:
			apiError(w, http.StatusNotFound, 10008, "Unknown Message")
			return
		case m.Author.ID != bot.ID:
			apiError(w, http.StatusForbidden, 50005, "Cannot edit a message authored by another user")
			return
		}
		if body.Content != nil && len([]rune(*body.Content)) > 2000 {
			apiError(w, http.StatusBadRequest, 50035, "Invalid Form Body")
			return
		}
		if !s.limit(w, bot, c.id, "messages", s.limits.Messages) {
			s.record(r, 429, "")
			return
		}
		if body.Content != nil {
			m.Content = *body.Content
		}
		m.Edits++
		if body.AllowedMentions == nil || body.AllowedMentions.Parse == nil || len(body.AllowedMentions.Parse) > 0 {
			m.Mentions = mentionsIn(m.Content) // an edit re-parses mentions with the defaults
		} else {
			m.Mentions = nil
		}
		s.record(r, 200, m.Content)
		writeJSON(w, s.wire(m))
	})
}

// mentionsIn are the user ids of <@id> and <@!id> in text.
func mentionsIn(text string) []string {
	var out []string
	for {
		i := strings.Index(text, "<@")
		if i < 0 {
			return out
		}
		text = text[i+2:]
		j := strings.IndexByte(text, '>')
		if j < 0 {
			return out
		}
		out = append(out, strings.TrimPrefix(text[:j], "!"))
	}
}

func (s *Server) trigger(w http.ResponseWriter, r *http.Request) {
	s.onChannel(w, r, nil, func(bot *User, c *channel) {
		if !s.limit(w, bot, c.id, "typing", s.limits.Typing) {
			s.record(r, 429, "")
			return
		}
		s.typing[c.id] = time.Now()
		s.record(r, 204, "")
		w.WriteHeader(http.StatusNoContent)
	})
}

func (s *Server) attachment(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ms := range s.messages {
		for _, m := range ms {
			if m.ID != r.PathValue("mid") {
				continue
			}
			for _, f := range m.Files {
				if f.ID == r.PathValue("fid") {
					w.Header().Set("Content-Type", f.ContentType)
					_, _ = w.Write(f.Data)
					return
				}
			}
		}
	}
	http.NotFound(w, r)
}

// --- wire forms ---

func userJSON(u User) map[string]any {
	v := map[string]any{"id": u.ID, "username": u.Name, "global_name": u.Name, "discriminator": "0"}
	if u.Bot {
		v["bot"] = true
	}
	return v
}

// wire is a message as the API shows it. Called with s.mu held.
func (s *Server) wire(m *Message) map[string]any {
	ms, _ := strconv.ParseUint(m.ID, 10, 64)
	v := map[string]any{"id": m.ID, "channel_id": m.ChannelID, "author": userJSON(m.Author), "content": m.Content,
		"timestamp": time.UnixMilli(int64(ms>>22) + epoch).UTC().Format(time.RFC3339Nano), "type": m.Type, "tts": false,
		"mention_everyone": false, "pinned": false}
	if c := s.channels[m.ChannelID]; c != nil && c.guild != "" {
		v["guild_id"] = c.guild
	}
	if m.Nonce != "" {
		v["nonce"] = m.Nonce
	}
	mentions := []any{}
	for _, id := range m.Mentions {
		if u := s.users[id]; u != nil {
			mentions = append(mentions, userJSON(*u))
		}
	}
	v["mentions"] = mentions
	atts := []any{}
	for _, f := range m.Files {
		atts = append(atts, map[string]any{"id": f.ID, "filename": f.Name, "content_type": f.ContentType, "size": len(f.Data),
			"url": s.ts.URL + "/attachments/" + m.ID + "/" + f.ID + "/" + f.Name, "proxy_url": s.ts.URL + "/attachments/" + m.ID + "/" + f.ID + "/" + f.Name})
	}
	v["attachments"] = atts
	if m.ReplyTo != "" {
		v["message_reference"] = map[string]any{"message_id": m.ReplyTo, "channel_id": m.ChannelID}
		for _, x := range s.messages[m.ChannelID] {
			if x.ID == m.ReplyTo {
				v["referenced_message"] = map[string]any{"id": x.ID, "channel_id": x.ChannelID, "author": userJSON(x.Author), "content": x.Content, "type": x.Type}
			}
		}
	}
	return v
}

// --- Gateway ---

type conn struct {
	ws      *websocket.Conn
	wmu     sync.Mutex
	bot     User
	intents int
	seq     int
	ready   bool
}

// dispatch sends an op 0 event. Called with the server's lock held.
func (c *conn) dispatch(t string, d any) {
	c.seq++
	c.send(map[string]any{"op": 0, "t": t, "s": c.seq, "d": d})
}

func (c *conn) send(v any) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_ = c.ws.WriteJSON(v)
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// gateway serves one connection: HELLO, then IDENTIFY (a bad token: close 4004; a RESUME is
// answered INVALID_SESSION, not resumable), READY, heartbeats ACKed, and MESSAGE_CREATE of the
// channels the bot sees.
func (s *Server) gateway(w http.ResponseWriter, r *http.Request) {
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer ws.Close()
	s.mu.Lock()
	s.dials++
	s.mu.Unlock()
	c := &conn{ws: ws}
	c.send(map[string]any{"op": 10, "d": map[string]any{"heartbeat_interval": 41250}, "s": nil, "t": nil})
	for {
		var f struct {
			Op int             `json:"op"`
			D  json.RawMessage `json:"d"`
		}
		_ = ws.SetReadDeadline(time.Now().Add(2 * time.Minute))
		if err := ws.ReadJSON(&f); err != nil {
			break
		}
		switch f.Op {
		case 1:
			c.send(map[string]any{"op": 11, "d": nil, "s": nil, "t": nil})
		case 6:
			c.send(map[string]any{"op": 9, "d": false, "s": nil, "t": nil})
		case 2:
			var id struct {
				Token   string `json:"token"`
				Intents int    `json:"intents"`
			}
			_ = json.Unmarshal(f.D, &id)
			s.mu.Lock()
			tok := strings.TrimPrefix(id.Token, "Bot ")
			bot := s.tokens[tok]
			if bot == nil || s.revoked[tok] {
				s.mu.Unlock()
				c.wmu.Lock()
				_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(4004, "Authentication failed."))
				c.wmu.Unlock()
				return
			}
			c.bot, c.ready, c.intents = *bot, true, id.Intents
			s.conns[c] = true
			c.dispatch("READY", map[string]any{"v": 10, "user": userJSON(*bot), "guilds": []any{}, "session_id": "s" + s.nextID(),
				"resume_gateway_url": "ws" + strings.TrimPrefix(s.ts.URL, "http") + "/gateway", "application": map[string]any{"id": bot.ID}})
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}
