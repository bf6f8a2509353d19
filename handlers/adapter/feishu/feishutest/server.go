package feishutest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"time"

	"github.com/ximd/ximd/handlers/adapter/internal/fakekit"
)

// Server is a fake Feishu open platform. Its methods are safe for concurrent use.
type Server struct {
	life  *fakekit.Lifecycle // closing ends hung calls and event retries; its context, event requests
	hooks *http.Client       // event and challenge requests
	clock fakekit.Clock

	mu         sync.Mutex
	tenantKey  string
	apps       map[string]*appState // by app_id
	appOrder   []string
	tokens     map[string]*tokenState
	tokenTTL   time.Duration
	users      map[string]*User // by open_id
	chats      map[string]*chatState
	chatOrder  []string
	msgs       map[string]*message // by message_id, persons' and bots'
	cards      map[string]*cardState
	cardOrder  []string
	files      map[string]*storedFile // by image_key or file_key
	events     map[string]*eventState
	eventOrder []string
	calls      fakekit.Calls[Call]
	faults     []fault
	hangs      fakekit.Hangs             // by route prefix
	limits     Limits                    // resolved: no zero field
	windows    fakekit.Windows[scopeKey] // frequency-limit resets the fake gave
	winLimits  map[scopeKey]int          // the x-ogw-ratelimit-limit each window gave
	appUse     map[scopeKey]*useLog      // gateway limit per app and route
	chatUse    map[string]*useLog        // message sends per chat
	cardUse    map[string]*useLog        // operations per card entity
	deliveries int
	retry      EventRetry
}

// App is a custom app with a bot. BotOpenID is the bot's open_id.
type App struct {
	ID        string
	Secret    string
	BotOpenID string
}

// User is a person. The fake gives a person one open_id for every app (Feishu gives one per
// app).
type User struct {
	OpenID  string
	UnionID string
	UserID  string
	Name    string
}

// Message is a message an app's bot sent, as a person in the chat sees it now.
type Message struct {
	ID       string
	ChatID   string
	Sender   string // the app_id of the sending app
	MsgType  string // text, post, image, file, audio, media, interactive, ...
	Content  string // the content JSON string as sent
	Text     string // a text message's text, a post's text, or a card's current text
	ParentID string
	RootID   string
	ThreadID string
	UUID     string
	Card     *Card // for interactive messages; ID is "" for a card sent as inline JSON
	File     *File // for image, file, audio and media messages
	At       time.Time
}

// Card is a card entity (CardKit) or an inline card, with every accepted update.
type Card struct {
	ID        string
	AppID     string
	MessageID string // the message that carried it, "" while not sent
	Streaming bool   // streaming_mode now (false once the 10-minute streaming window ran out)
	// Text is what a person reads: the content of each markdown element, and of each
	// plain_text element that has an element_id, in body order, joined by "\n".
	Text     string
	Sequence int // the last accepted sequence, 0 before any update
	Elements []Element
	Updates  []CardUpdate
}

// Element is an element of a card body that has a tag.
type Element struct {
	ID      string // element_id, "" if none
	Tag     string
	Content string // the content string of markdown and plain_text elements
}

// CardUpdate is an accepted sequenced operation on a card entity.
type CardUpdate struct {
	Sequence  int
	Kind      string // "content", "settings" or "update"
	ElementID string // for "content"
	Text      string // Card.Text after the update
	Streaming bool   // streaming_mode after the update
	At        time.Time
}

// File is the resource of a message or an upload.
type File struct {
	Kind     string // "image" or "file"
	Key      string // image_key or file_key
	Name     string
	FileType string // for files: opus, mp4, pdf, doc, xls, ppt or stream
	Data     []byte
}

// Call is one request, recorded on arrival.
type Call struct {
	Method string
	Path   string // the request path
	Route  string // the matched route pattern, "" if none
	AppID  string // the app of the token, "" if none
	At     time.Time
	// Status is the HTTP status of the answer: 0 while the call is pending, or when the client
	// had gone away before it was answered (an applied-but-unanswered call).
	Status int
	Code   int // the answer's code
	// Early is set when the call was made while a frequency-limit reset time the fake had
	// given (x-ogw-ratelimit-reset) was still running for the limit the call falls under.
	Early bool
}

// Event is an event the fake generated for an app, with its deliveries so far.
type Event struct {
	ID        string
	AppID     string
	MessageID string
	Attempts  int  // POSTs made, failed ones included
	Delivered bool // an attempt was answered with HTTP 200
}

// Limits are the rate limits. A zero field means its default; set large numbers to turn a
// limit off.
type Limits struct {
	// PerChatPerSecond caps message sends and replies into one chat, shared by every bot, over
	// any second ("Send message": 5 QPS per user, 5 QPS per group shared by its bots).
	// Over it: HTTP 400, code 230020. Default 5.
	PerChatPerSecond int
	// CardPerSecond caps sequenced operations on one card entity over any second ("Streaming
	// card updates": 10 per second per card entity). Over it: HTTP 429, code 99991400.
	// Default 10.
	CardPerSecond int
	// AppPerMinute and AppPerSecond cap each app's calls of each API (rate-limit level 4:
	// 1000 per minute and 50 per second). Over either: HTTP 429, code 99991400. Defaults
	// 1000 and 50.
	AppPerMinute int
	AppPerSecond int
}

// DefaultLimits are the limits a new Server applies.
var DefaultLimits = Limits{PerChatPerSecond: 5, CardPerSecond: 10, AppPerMinute: 1000, AppPerSecond: 50}

// EventRetry is how the fake delivers events: an attempt fails unless answered HTTP 200
// within Timeout, and a failed event is POSTed again after each interval in turn. Feishu
// waits 3 s and retries after 15 s, 5 min, 1 h and 6 h; the default keeps the 3 s timeout and
// shortens the intervals for tests.
type EventRetry struct {
	Timeout   time.Duration
	Intervals []time.Duration
}

// DefaultEventRetry is the event delivery schedule of a new Server.
var DefaultEventRetry = EventRetry{
	Timeout:   3 * time.Second,
	Intervals: []time.Duration{15 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond},
}

// DefaultTokenTTL is the lifetime of a tenant_access_token (2 hours).
const DefaultTokenTTL = 2 * time.Hour

// New starts a fake Feishu open platform on a loopback port.
func New() *Server {
	s := &Server{
		tenantKey: randHex(16),
		apps:      map[string]*appState{},
		tokens:    map[string]*tokenState{},
		tokenTTL:  DefaultTokenTTL,
		users:     map[string]*User{},
		chats:     map[string]*chatState{},
		msgs:      map[string]*message{},
		cards:     map[string]*cardState{},
		files:     map[string]*storedFile{},
		events:    map[string]*eventState{},
		limits:    DefaultLimits,
		winLimits: map[scopeKey]int{},
		appUse:    map[scopeKey]*useLog{},
		chatUse:   map[string]*useLog{},
		cardUse:   map[string]*useLog{},
		retry:     DefaultEventRetry,
		hooks:     newHookClient(),
	}
	s.life = fakekit.NewLifecycle(httptest.NewServer(http.HandlerFunc(s.serveHTTP)))
	return s
}

// URL is the base URL to give the adapter instead of https://open.feishu.cn, without a
// trailing slash.
func (s *Server) URL() string { return s.life.URL() }

// Close stops event delivery, ends hung calls and closes the listener. It is safe to call
// more than once.
func (s *Server) Close() {
	// A Post starting a deliverer either finishes first or sees closing.
	s.life.Close(&s.mu, s.hooks.CloseIdleConnections)
}

// Now is the fake's clock: time.Now unless SetClock replaced it.
func (s *Server) Now() time.Time { return s.clock.Now() }

// SetClock replaces the clock used for token expiry, uuid deduplication, rate limits, card
// expiry and streaming timeout, and timestamps; nil restores time.Now. Hang and event
// retries run on real time.
func (s *Server) SetClock(now func() time.Time) { s.clock.Set(now) }

// SetTokenTTL sets the lifetime of tenant_access_tokens issued from now on; d <= 0 restores
// DefaultTokenTTL. A token is reused while at least a quarter of the lifetime is left (30
// minutes of the default 2 hours).
func (s *Server) SetTokenTTL(d time.Duration) {
	if d <= 0 {
		d = DefaultTokenTTL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokenTTL = d
}

// SetLimits replaces the rate limits; a zero field means its default (DefaultLimits).
func (s *Server) SetLimits(l Limits) {
	d := DefaultLimits
	if l.PerChatPerSecond <= 0 {
		l.PerChatPerSecond = d.PerChatPerSecond
	}
	if l.CardPerSecond <= 0 {
		l.CardPerSecond = d.CardPerSecond
	}
	if l.AppPerMinute <= 0 {
		l.AppPerMinute = d.AppPerMinute
	}
	if l.AppPerSecond <= 0 {
		l.AppPerSecond = d.AppPerSecond
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = l
}

// SetEventRetry replaces the event delivery schedule; a zero Timeout means 3 s. It applies to
// deliveries started afterwards.
func (s *Server) SetEventRetry(r EventRetry) {
	if r.Timeout <= 0 {
		r.Timeout = DefaultEventRetry.Timeout
	}
	r.Intervals = slices.Clone(r.Intervals)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retry = r
}

// AddApp adds a custom app with its bot. It panics on an empty or duplicate app ID (a mistake
// in the test).
func (s *Server) AddApp(appID, appSecret, botName string) App {
	if appID == "" {
		panic("feishutest: AddApp: empty app ID")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.apps[appID]; dup {
		panic(fmt.Sprintf("feishutest: AddApp: app %q already added", appID))
	}
	a := &appState{
		App:     App{ID: appID, Secret: appSecret, BotOpenID: "ou_" + randHex(32)},
		botName: botName,
		uuids:   map[string]string{},
	}
	s.apps[appID] = a
	s.appOrder = append(s.appOrder, appID)
	return a.App
}

// AddUser adds a person.
func (s *Server) AddUser(name string) User {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.addUserLocked(name)
}

func (s *Server) addUserLocked(name string) *User {
	u := &User{OpenID: "ou_" + randHex(32), UnionID: "on_" + randHex(32), UserID: randHex(8), Name: name}
	s.users[u.OpenID] = u
	return u
}

// AddChat adds a chat and returns its chat_id ("oc_…"). kind is "p2p" (a person's chat with
// the bots: members[0] is the person) or "group". Every app's bot is in every chat unless
// RemoveBot takes it out. It panics on an unknown kind or a p2p chat without a person.
func (s *Server) AddChat(kind, name string, members ...User) string {
	if kind != "p2p" && kind != "group" {
		panic(fmt.Sprintf("feishutest: AddChat: unknown kind %q", kind))
	}
	if kind == "p2p" && len(members) == 0 {
		panic("feishutest: AddChat: a p2p chat needs its person")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := &chatState{id: "oc_" + randHex(32), kind: kind, name: name, removed: map[string]bool{}}
	for _, m := range members {
		if _, ok := s.users[m.OpenID]; !ok {
			u := m
			s.users[m.OpenID] = &u
		}
		ch.members = append(ch.members, m.OpenID)
	}
	s.chats[ch.id] = ch
	s.chatOrder = append(s.chatOrder, ch.id)
	return ch.id
}

// RemoveBot takes an app's bot out of a chat: sending to it answers 230002 (230013 in a p2p
// chat), getting its info 232011, and the app gets no events from it.
func (s *Server) RemoveBot(chatID, appID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mustChat(chatID, "RemoveBot").removed[appID] = true
}

// mustChat returns a chat or panics naming the helper the test misused. s.mu is held.
func (s *Server) mustChat(chatID, helper string) *chatState {
	ch := s.chats[chatID]
	if ch == nil {
		panic(fmt.Sprintf("feishutest: %s: unknown chat %q", helper, chatID))
	}
	return ch
}

// FailNext makes the next n calls whose route pattern starts with path (for example
// "/open-apis/im/v1/messages") answer HTTP status with code and msg, after the token check
// and before anything is applied. resetSeconds > 0 adds the x-ogw-ratelimit headers, and for
// code 99991400 or status 429 starts that reset window as a real frequency limit does.
func (s *Server) FailNext(path string, n, status, code int, msg string, resetSeconds int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.faults = append(s.faults, fault{prefix: path, status: status, code: code, msg: msg, reset: resetSeconds})
	}
}

// Hang makes calls whose route pattern starts with path hold their answer for d after they
// were applied, or until the client gives up or the server closes: an applied-but-unanswered
// call for in-doubt tests. d = 0 stops it.
func (s *Server) Hang(path string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hangs.Set(path, d)
}

// Calls returns every request so far, in order of arrival.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls.All()
}

// EarlyCalls counts the calls made while a frequency-limit reset the fake gave was running.
func (s *Server) EarlyCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls.Count(func(c Call) bool { return c.Early })
}

// EventDeliveries counts event POST attempts, failed ones included (not Challenge).
func (s *Server) EventDeliveries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deliveries
}

// Events returns the events generated so far, oldest first.
func (s *Server) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Event, 0, len(s.eventOrder))
	for _, id := range s.eventOrder {
		ev := s.events[id]
		out = append(out, Event{ID: ev.id, AppID: ev.appID, MessageID: ev.messageID, Attempts: ev.attempts, Delivered: ev.delivered})
	}
	return out
}

// Messages returns the messages the apps' bots sent in a chat, oldest first.
func (s *Server) Messages(chatID string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.chats[chatID]
	if ch == nil {
		return nil
	}
	now := s.Now()
	var out []Message
	for _, id := range ch.msgs {
		m := s.msgs[id]
		if m.fromApp == "" {
			continue
		}
		out = append(out, s.messageViewLocked(m, now))
	}
	return out
}

// messageViewLocked is the public view of a bot's message. s.mu is held.
func (s *Server) messageViewLocked(m *message, now time.Time) Message {
	v := Message{
		ID: m.id, ChatID: m.chatID, Sender: m.fromApp, MsgType: m.msgType, Content: m.content,
		Text: m.text, ParentID: m.parentID, RootID: m.rootID, ThreadID: m.threadID, UUID: m.uuid, At: m.at,
	}
	if m.card != nil {
		c := m.card.view(now)
		v.Card = &c
		v.Text = c.Text
	}
	if f := m.file; f != nil {
		v.File = f.view()
	}
	return v
}

// Cards returns the card entities created so far, oldest first.
func (s *Server) Cards() []Card {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	out := make([]Card, 0, len(s.cardOrder))
	for _, id := range s.cardOrder {
		out = append(out, s.cards[id].view(now))
	}
	return out
}

// appState is an app, its bot and its event subscription. Guarded by Server.mu.
type appState struct {
	App
	botName string
	hook    eventHook
	uuids   map[string]string // message uuid -> message_id
}

// tokenState is an issued tenant_access_token.
type tokenState struct {
	token   string
	app     *appState
	expires time.Time
}

// chatState is a chat. Guarded by Server.mu.
type chatState struct {
	id      string
	kind    string // p2p or group
	name    string
	members []string // persons' open_ids
	removed map[string]bool
	msgs    []string // message ids, oldest first
}

// hasBot reports whether an app's bot is in the chat.
func (ch *chatState) hasBot(appID string) bool { return !ch.removed[appID] }

// message is a message in a chat, a person's or a bot's.
type message struct {
	id, chatID string
	fromApp    string // app_id for a bot's message, "" for a person's
	fromUser   string // open_id for a person's message
	msgType    string
	content    string
	text       string
	parentID   string
	rootID     string
	threadID   string
	uuid       string
	card       *cardState // entity or inline card of an interactive message
	file       *storedFile
	mentions   []wireMention // of a person's message
	at         time.Time
}

// storedFile is an uploaded or posted resource.
type storedFile struct {
	kind     string // image or file
	key      string
	name     string
	fileType string
	owner    string // app_id of the uploading app, "" for a person's
	mime     string
	data     []byte
}

// view is the public copy of a resource.
func (f *storedFile) view() *File {
	return &File{Kind: f.kind, Key: f.key, Name: f.name, FileType: f.fileType, Data: slices.Clone(f.data)}
}

// fault is an injected error answer.
type fault struct {
	prefix string
	status int
	code   int
	msg    string
	reset  int
}
