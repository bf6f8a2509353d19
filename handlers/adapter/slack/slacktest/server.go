package slacktest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ximd/ximd/handlers/adapter/internal/fakekit"
)

// Server is a fake Slack workspace: the Web API, Socket Mode and the Events API. Its methods
// are safe for concurrent use.
type Server struct {
	life       *fakekit.Lifecycle // its context ends deliveries and sockets; it waits for deliverers, sockets, pingers
	hookClient *http.Client
	clock      fakekit.Clock

	mu          sync.Mutex
	teamID      string
	teamDomain  string
	bots        []*botState
	tokens      map[string]*botState // bot and app-level tokens
	users       map[string]User
	channels    map[string]*channelState
	files       map[string]*fileState    // by file id
	uploads     map[string]*fileState    // by upload key of the upload URL
	tickets     map[string]*botState     // Socket Mode tickets not yet used
	events      map[string][]*eventState // by event_id, one per app that gets the event
	envelopes   map[string]*eventState   // by envelope_id
	calls       fakekit.Calls[Call]
	faults      fakekit.Faults[fault] // by method
	hangs       fakekit.Hangs         // by method
	limits      Limits                // resolved: no zero field
	budgets     map[budgetKey]*budget
	windows     fakekit.Windows[budgetKey] // Retry-After windows given
	timing      Timing                     // resolved: no zero field
	eventURL    string
	eventSecret string
	socketMode  bool
	route       chan struct{} // closed and replaced when a route for events may have appeared
	deliveries  int
	lastMicro   int64
	seq         int
}

// Bot is an app installed in the workspace with its bot user.
type Bot struct {
	UserID        string // "U…": the bot user
	BotID         string // "B…"
	AppID         string // "A…": api_app_id of its events
	TeamID        string // "T…"
	Name          string
	Token         string // bot token "xoxb-…"
	AppToken      string // app-level token "xapp-…" for apps.connections.open
	SigningSecret string // signs Events API requests unless SetEventURL gives another
}

// User is a person in the workspace.
type User struct {
	ID   string // "U…"
	Name string
}

// Message is a message in a channel as a person sees it now.
type Message struct {
	TS       string
	ThreadTS string // the parent's ts for a reply, "" for a top-level message
	User     string // the author's user id (a bot's UserID for bot messages)
	BotID    string // set for bot messages
	Text     string // text, or markdown_text, after updates and appends
	// Markdown is what the message's markdown blocks say (their text, joined by blank lines): what
	// a person reads when the message has them. "" without markdown blocks.
	Markdown string
	// Blocks are the message's blocks as sent or received (a person's rich_text), nil if none.
	Blocks   json.RawMessage
	Metadata *Metadata
	Files    []File
	// Streaming is set between chat.startStream and chat.stopStream.
	Streaming bool
	Edits     int // accepted chat.update calls
	Appends   int // accepted chat.appendStream calls
}

// Metadata is message metadata ("Message metadata": event_type and event_payload).
type Metadata struct {
	EventType    string
	EventPayload map[string]any
}

// File is a file shared in a message.
type File struct {
	ID       string
	Name     string
	Title    string
	MimeType string
	Data     []byte
	// URLPrivate is the url_private on the fake; a GET needs a bot token of the workspace.
	URLPrivate string
}

// Status is an accepted assistant.threads.setStatus call.
type Status struct {
	Text string // "" clears the status
	At   time.Time
}

// Call is one Web API request, recorded on arrival.
type Call struct {
	Method  string // "chat.postMessage"
	Channel string // the channel or channel_id argument, "" if none
	At      time.Time
	// Status is the HTTP status of the answer: 0 while the call is pending, or when the
	// client had gone away before it was answered (an applied-but-unanswered call).
	Status int
	Error  string // the "error" of an ok:false answer, "ratelimited" for 429
	// Early is set when the call was made while a Retry-After given for its rate-limit
	// budget (method, and channel for chat.postMessage and chat.startStream) was running.
	Early bool

	retryAfter int // the Retry-After header of the answer, 0 if none
}

// Timing sets the fake's delivery clocks, shortened for tests. A zero field means its
// default (DefaultTiming).
type Timing struct {
	// AckTimeout is how long a Socket Mode envelope waits for its acknowledgement before it
	// is sent again with retry_attempt+1. Slack: 3 seconds.
	AckTimeout time.Duration
	// EventTimeout is how long an Events API request waits for a 2xx answer before it counts
	// as failed (retry reason http_timeout). Slack: 3 seconds.
	EventTimeout time.Duration
	// Retries are the waits before the 1st, 2nd and 3rd retry after a failed attempt.
	// Slack: immediately, after 1 minute, after 5 minutes.
	Retries []time.Duration
	// PingInterval is how often a Socket Mode connection is pinged. slack-go's client drops
	// a connection that was not pinged for 30 s.
	PingInterval time.Duration
}

// DefaultTiming is the Timing of a new Server.
var DefaultTiming = Timing{
	AckTimeout:   500 * time.Millisecond,
	EventTimeout: 500 * time.Millisecond,
	Retries:      []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond},
	PingInterval: 5 * time.Second,
}

type botState struct {
	Bot
	verification string // the "token" field of event payloads (deprecated verification token)
	conns        []*sockConn
	rr           int // round robin over conns
}

type channelState struct {
	id, kind, name string
	created        time.Time
	members        []User
	noBots         bool
	noStream       bool
	msgs           []*msgState // in ts order
	statuses       map[string][]Status
}

type msgState struct {
	ts, threadTS   string
	user, botID    string
	appID          string
	text           string
	blocks         json.RawMessage // as sent, or a person's rich_text
	markdown       string          // the text of its markdown blocks
	subtype        string
	clientMsgID    string
	metadata       *Metadata
	files          []*fileState
	streaming      bool
	edits, appends int
	replies        int
	editedTS       string
}

// New starts a fake Slack on a loopback port, with one workspace.
func New() *Server {
	s := &Server{
		hookClient: &http.Client{},
		teamID:     "T" + randID(10),
		teamDomain: "ximd-test",
		tokens:     map[string]*botState{},
		users:      map[string]User{},
		channels:   map[string]*channelState{},
		files:      map[string]*fileState{},
		uploads:    map[string]*fileState{},
		tickets:    map[string]*botState{},
		events:     map[string][]*eventState{},
		envelopes:  map[string]*eventState{},
		limits:     DefaultLimits,
		budgets:    map[budgetKey]*budget{},
		timing:     DefaultTiming,
		route:      make(chan struct{}),
	}
	s.life = fakekit.NewLifecycle(httptest.NewServer(http.HandlerFunc(s.serveHTTP)))
	return s
}

// URL is the Web API base to give slack-go as slack.OptionAPIURL; it ends with "/api/".
func (s *Server) URL() string { return s.life.URL() + "/api/" }

// TeamID is the workspace id.
func (s *Server) TeamID() string { return s.teamID }

// Close stops event delivery, closes the Socket Mode connections, ends hung calls and closes
// the listener. It is safe to call more than once.
func (s *Server) Close() {
	s.life.Close(&s.mu)
}

// Now is the fake's clock: time.Now unless SetClock replaced it.
func (s *Server) Now() time.Time { return s.clock.Now() }

// SetClock replaces the clock used for ts values, Call.At, statuses and rate limits; nil
// restores time.Now. Delivery timeouts, retries and Hang use real time.
func (s *Server) SetClock(now func() time.Time) { s.clock.Set(now) }

// SetTiming replaces the delivery timing; a zero field means its default (DefaultTiming).
func (s *Server) SetTiming(t Timing) {
	d := DefaultTiming
	if t.AckTimeout <= 0 {
		t.AckTimeout = d.AckTimeout
	}
	if t.EventTimeout <= 0 {
		t.EventTimeout = d.EventTimeout
	}
	if t.Retries == nil {
		t.Retries = d.Retries
	}
	if t.PingInterval <= 0 {
		t.PingInterval = d.PingInterval
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timing = t
}

// AddBot installs an app with a bot user in the workspace. The bot is a member of every
// channel, those added later included, unless RemoveBot takes the bots out.
func (s *Server) AddBot(name string) Bot {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.bots) + 1
	b := &botState{
		Bot: Bot{
			UserID:        "U" + randID(10),
			BotID:         "B" + randID(10),
			AppID:         "A" + randID(10),
			TeamID:        s.teamID,
			Name:          name,
			Token:         fmt.Sprintf("xoxb-%d-%d-%s", 1000+n, rand.Int64N(1e12), randAlnum(24)),
			SigningSecret: fmt.Sprintf("%032x", rand.Uint64()) + fmt.Sprintf("%016x", rand.Uint64()),
		},
		verification: randAlnum(24),
	}
	b.AppToken = fmt.Sprintf("xapp-1-%s-%d-%s", b.AppID, rand.Int64N(1e12), randHex(64))
	s.bots = append(s.bots, b)
	s.tokens[b.Token] = b
	s.tokens[b.AppToken] = b
	s.users[b.UserID] = User{ID: b.UserID, Name: name}
	return b.Bot
}

// AddUser adds a person to the workspace.
func (s *Server) AddUser(name string) User {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := User{ID: "U" + randID(10), Name: name}
	s.users[u.ID] = u
	return u
}

// AddChannel adds a conversation and returns its id. kind is the message events'
// channel_type: "im" (a direct message with members[0], id "D…"), "channel" (a public channel,
// id "C…"), "group" (a private channel, id "C…") or "mpim" (a multi-person direct message, id
// "G…", as in the "message.mpim" event's example). Every bot is a member unless RemoveBot. It
// panics on an unknown kind or an im without a member (a mistake in the test).
func (s *Server) AddChannel(kind, name string, members ...User) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var id string
	switch kind {
	case "im":
		if len(members) == 0 {
			panic("slacktest: AddChannel: an im needs its person as members[0]")
		}
		id = "D" + randID(10)
	case "channel", "group":
		id = "C" + randID(10)
	case "mpim":
		id = "G" + randID(10)
	default:
		panic(fmt.Sprintf("slacktest: AddChannel: unknown kind %q", kind))
	}
	s.channels[id] = &channelState{
		id: id, kind: kind, name: name, created: s.Now(),
		members:  append([]User(nil), members...),
		statuses: map[string][]Status{},
	}
	return id
}

// RemoveBot takes every bot out of a channel: its calls there answer channel_not_found (as
// for a private conversation the bot cannot see) and its people's messages make no events.
func (s *Server) RemoveBot(channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mustChannel(channel, "RemoveBot").noBots = true
}

// SetStreamingSupported turns chat.startStream in a channel on (the default where the rules
// in the README allow it) or off: off, chat.startStream answers channel_type_not_supported.
func (s *Server) SetStreamingSupported(channel string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mustChannel(channel, "SetStreamingSupported").noStream = !ok
}

func (s *Server) mustChannel(id, helper string) *channelState {
	ch := s.channels[id]
	if ch == nil {
		panic(fmt.Sprintf("slacktest: %s: unknown channel %q", helper, id))
	}
	return ch
}

// Messages returns every message of a channel, bots' and people's, oldest first, thread
// replies included.
func (s *Server) Messages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[channel]
	if ch == nil {
		return nil
	}
	out := make([]Message, 0, len(ch.msgs))
	for _, m := range ch.msgs {
		out = append(out, s.publicMessage(m))
	}
	return out
}

func (s *Server) publicMessage(m *msgState) Message {
	pm := Message{
		TS: m.ts, ThreadTS: m.threadTS, User: m.user, BotID: m.botID, Text: m.text, Markdown: m.markdown,
		Blocks:    append(json.RawMessage(nil), m.blocks...),
		Streaming: m.streaming, Edits: m.edits, Appends: m.appends,
	}
	if m.metadata != nil {
		md := *m.metadata
		pm.Metadata = &md
	}
	for _, f := range m.files {
		pm.Files = append(pm.Files, File{
			ID: f.id, Name: f.name, Title: f.title, MimeType: f.mime,
			Data: append([]byte(nil), f.data...), URLPrivate: s.urlPrivate(f),
		})
	}
	return pm
}

// Statuses returns the accepted assistant.threads.setStatus calls of a thread, oldest first.
func (s *Server) Statuses(channel, threadTS string) []Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[channel]
	if ch == nil {
		return nil
	}
	return append([]Status(nil), ch.statuses[threadTS]...)
}

// CurrentStatus is the status a person sees in a thread now: the last one set, unless a bot
// has since replied in the thread or two minutes passed on the fake's clock.
func (s *Server) CurrentStatus(channel, threadTS string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[channel]
	if ch == nil {
		return ""
	}
	st := ch.statuses[threadTS]
	if len(st) == 0 {
		return ""
	}
	last := st[len(st)-1]
	if s.Now().Sub(last.At) >= 2*time.Minute {
		return ""
	}
	for _, m := range ch.msgs {
		if m.threadTS == threadTS && m.botID != "" && tsTime(m.ts).After(last.At) {
			return ""
		}
	}
	return last.Text
}

// nextTSLocked returns a new message ts "<unix seconds>.<6 digits>", unique and increasing
// across the workspace.
func (s *Server) nextTSLocked() string {
	micro := max(s.Now().UnixMicro(), s.lastMicro+1)
	s.lastMicro = micro
	return fmt.Sprintf("%d.%06d", micro/1e6, micro%1e6)
}

// tsTime parses a message ts.
func tsTime(ts string) time.Time {
	sec, frac, _ := strings.Cut(ts, ".")
	secs, _ := strconv.ParseInt(sec, 10, 64)
	micros, _ := strconv.ParseInt(frac, 10, 64)
	return time.Unix(secs, micros*1000)
}

// findMsg returns a message by ts.
func (ch *channelState) findMsg(ts string) *msgState {
	for _, m := range ch.msgs {
		if m.ts == ts {
			return m
		}
	}
	return nil
}

// botsIn returns the bots that are members of a channel.
func (s *Server) botsIn(ch *channelState) []*botState {
	if ch.noBots {
		return nil
	}
	return append([]*botState(nil), s.bots...)
}

const idChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// randID returns n characters of Slack's id alphabet (upper-case letters and digits).
func randID(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = idChars[rand.IntN(len(idChars))]
	}
	return string(b)
}

func randAlnum(n int) string {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = chars[rand.IntN(len(chars))]
	}
	return string(b)
}

func randHex(n int) string {
	const chars = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = chars[rand.IntN(len(chars))]
	}
	return string(b)
}
