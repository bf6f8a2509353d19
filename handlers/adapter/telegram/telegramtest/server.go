package telegramtest

import (
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

// Server is a fake Bot API server. Its methods are safe for concurrent use.
type Server struct {
	life       *fakekit.Lifecycle // closing ends long polls, hung calls, deliverers; its context, webhook requests
	hookClient *http.Client
	clock      fakekit.Clock

	mu         sync.Mutex
	bots       map[int64]*botState
	tokens     map[string]*botState
	users      map[int64]User
	chats      map[int64]*chatState
	files      map[string]*storedFile // by file_id
	paths      map[string]*storedFile // by file_path, once getFile gave one
	calls      fakekit.Calls[Call]
	faults     fakekit.Faults[fault] // by canonical method name
	hangs      fakekit.Hangs         // by canonical method name
	limits     Limits                // resolved: no zero field
	budgets    map[budgetKey]*budget
	windows    fakekit.Windows[budgetKey] // retry_after windows given
	deliveries int
	noRich     bool // a server before Bot API 10.1 (SetRich)
	nextUser   int64
	nextGroup  int64
	nextSuper  int64
	nextFile   int
}

// Bot is a bot account of the fake: its user id is the digits before ':' in Token.
type Bot struct {
	ID       int64
	Token    string
	Username string
}

// User is a person.
type User struct {
	ID        int64
	FirstName string
}

// Message is a message a bot sent, as a person in the chat sees it now.
type Message struct {
	ID   int
	From int64 // the bot's user id
	// Text is the text a person reads, after edits: after entity parsing in the HTML parse mode,
	// the Markdown's text for a rich message; leading and trailing whitespace stripped as
	// Telegram does.
	Text string
	// Form is how it is shown: "rich" (sendRichMessage, or an edit with rich_message), "html"
	// (parse_mode HTML) or "" (plain text).
	Form string
	// Rich is a rich message's Markdown; Blocks the kinds of its top-level blocks ("heading",
	// "paragraph", "list", "table", "pre", "blockquote", "divider").
	Rich   string
	Blocks []string
	// Entities are the formatting entities of its text (parse_mode HTML).
	Entities []Entity
	Caption  string
	File     *File
	ReplyTo  int // id of the message it replies to, 0 if none
	Thread   int // the forum topic it was sent to (message_thread_id), 0 if none
	Edits    int // accepted editMessageText calls
	Date     time.Time
}

// File is the file of a message. For a photo, Data is the largest size (the uploaded bytes).
type File struct {
	Kind     string // "photo", "document", "video" or "audio"
	Name     string
	MimeType string
	Data     []byte
}

// Draft is an accepted sendMessageDraft or sendRichMessageDraft call.
type Draft struct {
	From    int64 // the bot's user id
	DraftID string
	Text    string // the text a person reads (after entity parsing; a rich draft's Markdown's text)
	Form    string // "rich", "html" or "" (plain)
	Rich    string // a rich draft's Markdown
	Thread  int    // message_thread_id, 0 if none
	At      time.Time
}

// Action is an accepted sendChatAction call.
type Action struct {
	From   int64 // the bot's user id
	Action string
	Thread int // message_thread_id, 0 if none
	At     time.Time
}

// Call is one request to a method URL, recorded on arrival.
type Call struct {
	Method string // canonical name ("sendMessage") when known, else as requested
	ChatID int64  // the chat_id parameter, 0 if none
	At     time.Time
	// Status is the HTTP status of the answer: 0 while the call is pending, or when the client
	// had gone away before it was answered (an applied-but-unanswered call).
	Status int
	// Early is set when the call was made to a chat while a retry_after the bot had been given
	// for that chat was still running.
	Early bool
}

// Limits are the rate limits (Bot FAQ "My bot is hitting limits, how do I avoid this?"). A zero
// field means its default; set large numbers to turn a limit off.
type Limits struct {
	// PerChatPerSecond is the rate of a per-chat token bucket for message-creating and
	// editing calls (sendMessage, sendPhoto, sendDocument, sendVideo, sendAudio,
	// editMessageText); its burst is max(3, PerChatPerSecond). Default 1.
	PerChatPerSecond int
	// GroupPerMinute caps those calls in a group or supergroup over any 60 seconds.
	// Default 20.
	GroupPerMinute int
	// EditsPerMinute caps editMessageText calls in one chat over any 60 seconds (not
	// documented by Telegram; chosen like the group rule). Default 20.
	EditsPerMinute int
	// EphemeralPerSecond is the rate and burst of a separate per-chat token bucket for
	// sendMessageDraft and sendChatAction. Default 10.
	EphemeralPerSecond int
}

// DefaultLimits are the limits a new Server applies.
var DefaultLimits = Limits{PerChatPerSecond: 1, GroupPerMinute: 20, EditsPerMinute: 20, EphemeralPerSecond: 10}

// New starts a fake Bot API server on a loopback port.
func New() *Server {
	s := &Server{
		hookClient: &http.Client{Timeout: 5 * time.Second},
		bots:       map[int64]*botState{},
		tokens:     map[string]*botState{},
		users:      map[int64]User{},
		chats:      map[int64]*chatState{},
		files:      map[string]*storedFile{},
		paths:      map[string]*storedFile{},
		limits:     DefaultLimits,
		budgets:    map[budgetKey]*budget{},
		nextUser:   7_000_000_000 + rand.Int64N(1_000_000)*100,
		nextGroup:  4_000_000_000 + rand.Int64N(1_000_000)*100,
		nextSuper:  1_002_000_000_000 + rand.Int64N(1_000_000)*100,
	}
	s.life = fakekit.NewLifecycle(httptest.NewServer(http.HandlerFunc(s.serveHTTP)))
	return s
}

// URL is the base URL to give the adapter as its api_url, without a trailing slash.
func (s *Server) URL() string { return s.life.URL() }

// Close ends pending long polls and hung calls, stops webhook delivery and closes the
// listener. It is safe to call more than once.
func (s *Server) Close() {
	s.life.Close(&s.mu) // a setWebhook starting a deliverer either finishes first or sees closing
}

// Now is the fake's clock: time.Now unless SetClock replaced it.
func (s *Server) Now() time.Time { return s.clock.Now() }

// SetClock replaces the clock used for dates, update retention, typing status and rate
// limits; nil restores time.Now.
func (s *Server) SetClock(now func() time.Time) { s.clock.Set(now) }

// AddBot adds a bot account. The token must be "<digits>:<secret>"; the digits are the bot's
// user id. It panics on a malformed or duplicate token (a mistake in the test).
func (s *Server) AddBot(token, username string) Bot {
	id, ok := tokenID(token)
	if !ok {
		panic(fmt.Sprintf("telegramtest: AddBot: token %q is not <digits>:<secret>", token))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.bots[id]; dup {
		panic(fmt.Sprintf("telegramtest: AddBot: bot %d already added", id))
	}
	b := &botState{
		Bot:          Bot{ID: id, Token: token, Username: username},
		nextUpdateID: 100_000_000 + rand.Int64N(800_000_000),
		wake:         make(chan struct{}),
	}
	s.bots[id] = b
	s.tokens[token] = b
	return b.Bot
}

// tokenID parses the user id of a bot token "<digits>:<secret>".
func tokenID(token string) (int64, bool) {
	digits, secret, ok := strings.Cut(token, ":")
	if !ok || secret == "" || strings.Contains(token, "/") || digits == "" || digits[0] == '0' {
		return 0, false
	}
	id, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || id <= 0 || id >= 1<<54 {
		return 0, false
	}
	return id, true
}

// AddUser adds a person.
func (s *Server) AddUser(firstName string) User {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addUserLocked(firstName)
}

func (s *Server) addUserLocked(firstName string) User {
	s.nextUser++
	u := User{ID: s.nextUser, FirstName: firstName}
	s.users[u.ID] = u
	return u
}

// AddChat adds a chat and returns its id. kind is "private", "group" or "supergroup". A
// private chat's id is the user id of its person: members[0], or a new user named title when
// members is empty. A group's id is negative, a supergroup's starts with -100. Every bot is a
// member of every chat unless RemoveBot takes it out. It panics on an unknown kind.
func (s *Server) AddChat(kind, title string, members ...int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var id int64
	switch kind {
	case "private":
		if len(members) > 0 {
			id = members[0]
			if _, ok := s.users[id]; !ok {
				s.users[id] = User{ID: id, FirstName: title}
			}
		} else {
			id = s.addUserLocked(title).ID
		}
		if title == "" {
			title = s.users[id].FirstName
		}
	case "group":
		s.nextGroup++
		id = -s.nextGroup
	case "supergroup":
		s.nextSuper++
		id = -s.nextSuper
	default:
		panic(fmt.Sprintf("telegramtest: AddChat: unknown kind %q", kind))
	}
	if _, dup := s.chats[id]; dup {
		panic(fmt.Sprintf("telegramtest: AddChat: chat %d already added", id))
	}
	s.chats[id] = &chatState{
		id: id, kind: kind, title: title,
		removed: map[int64]bool{},
		typing:  map[int64]time.Time{},
	}
	return id
}

// RemoveBot takes a bot out of a chat: it gets no more updates from it, getChat answers
// "chat not found" and sending answers 403 (400 "chat not found" in a private chat).
func (s *Server) RemoveBot(chatID, botID int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mustChat(chatID, "RemoveBot").removed[botID] = true
}

// BlockBot makes the person of a private chat block the bots: sending, editing, drafts and
// chat actions answer 403 "Forbidden: bot was blocked by the user".
func (s *Server) BlockBot(chatID int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mustChat(chatID, "BlockBot").blocked = true
}

// UnblockBot undoes BlockBot.
func (s *Server) UnblockBot(chatID int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mustChat(chatID, "UnblockBot").blocked = false
}

// mustChat returns a chat or panics naming the helper the test misused. s.mu is held.
func (s *Server) mustChat(chatID int64, helper string) *chatState {
	ch := s.chats[chatID]
	if ch == nil {
		panic(fmt.Sprintf("telegramtest: %s: unknown chat %d", helper, chatID))
	}
	return ch
}

// SetLimits replaces the rate limits; a zero field means its default (DefaultLimits).
func (s *Server) SetLimits(l Limits) {
	d := DefaultLimits
	if l.PerChatPerSecond <= 0 {
		l.PerChatPerSecond = d.PerChatPerSecond
	}
	if l.GroupPerMinute <= 0 {
		l.GroupPerMinute = d.GroupPerMinute
	}
	if l.EditsPerMinute <= 0 {
		l.EditsPerMinute = d.EditsPerMinute
	}
	if l.EphemeralPerSecond <= 0 {
		l.EphemeralPerSecond = d.EphemeralPerSecond
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = l
}

// FailNext makes the next n calls of method (case-insensitive) answer error code with
// description, before anything else is checked or applied. retryAfter > 0 adds
// parameters.retry_after, and for code 429 starts that bot's retry_after window for the
// call's chat as a real 429 does.
func (s *Server) FailNext(method string, n int, code int, description string, retryAfter int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults.FailNext(canonicalMethod(method), n, fault{code: code, desc: description, retryAfter: retryAfter})
}

// Hang makes calls of method (case-insensitive) hold their answer for d after they were
// applied, or until the client gives up or the server closes: an applied-but-unanswered call
// for in-doubt tests. d = 0 stops it.
func (s *Server) Hang(method string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hangs.Set(canonicalMethod(method), d)
}

// Calls returns every method call so far, in order of arrival.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls.All()
}

// EarlyCalls counts the calls made to a chat while a retry_after given for it was running.
func (s *Server) EarlyCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls.Count(func(c Call) bool { return c.Early })
}

// WebhookDeliveries counts webhook POST attempts, failed ones included.
func (s *Server) WebhookDeliveries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deliveries
}

// PendingUpdates counts a bot's updates not yet confirmed (getUpdates) or delivered (webhook),
// not counting those past the 24-hour retention.
func (s *Server) PendingUpdates(botID int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.bots[botID]
	if b == nil {
		return 0
	}
	s.expireLocked(b)
	return len(b.queue)
}

// LongPolling reports whether a getUpdates call of a bot is waiting for updates now.
func (s *Server) LongPolling(botID int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.bots[botID]
	return b != nil && b.poll != nil
}

// Messages returns the messages the bots sent in a chat, oldest first, with their text after
// edits.
func (s *Server) Messages(chatID int64) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.chats[chatID]
	if ch == nil {
		return nil
	}
	var out []Message
	for _, m := range ch.msgs {
		if !m.fromBot {
			continue
		}
		msg := Message{
			ID: m.id, From: m.from, Text: m.text, Form: m.form, Rich: m.rich, Blocks: append([]string(nil), m.blocks...),
			Entities: append([]Entity(nil), m.entities...), Caption: m.caption,
			ReplyTo: m.replyTo, Thread: m.thread, Edits: m.edits, Date: m.date,
		}
		if f := m.media; f != nil {
			msg.File = &File{Kind: f.kind, Name: f.name, MimeType: f.mime, Data: append([]byte(nil), f.data...)}
		}
		out = append(out, msg)
	}
	return out
}

// Drafts returns every accepted sendMessageDraft call in a chat, oldest first.
func (s *Server) Drafts(chatID int64) []Draft {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch := s.chats[chatID]; ch != nil {
		return append([]Draft(nil), ch.drafts...)
	}
	return nil
}

// Actions returns every accepted sendChatAction call in a chat, oldest first.
func (s *Server) Actions(chatID int64) []Action {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch := s.chats[chatID]; ch != nil {
		return append([]Action(nil), ch.actions...)
	}
	return nil
}

// Typing reports whether a chat shows a bot's chat action now: for 5 seconds after an
// accepted sendChatAction, or until that bot sends a message in the chat, whichever is first.
func (s *Server) Typing(chatID int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.chats[chatID]
	if ch == nil {
		return false
	}
	now := s.Now()
	for _, at := range ch.typing {
		if now.Before(at.Add(actionShownFor)) {
			return true
		}
	}
	return false
}

// actionShownFor is how long a chat action shows (sendChatAction: "5 seconds or less").
const actionShownFor = 5 * time.Second

// botState is a bot account and its update queue. Guarded by Server.mu.
type botState struct {
	Bot
	queue        []queuedUpdate
	nextUpdateID int64
	allowed      []string      // allowed_updates; nil or empty: the default set
	wake         chan struct{} // closed and replaced when the queue or webhook changes
	poll         *poller       // the getUpdates call waiting now, if any
	hook         webhook
	botToBot     bool // Bot-to-Bot Communication Mode (SetBotToBot)
}

// notify wakes the long poll and the webhook deliverer of a bot. s.mu is held.
func (b *botState) notify() {
	close(b.wake)
	b.wake = make(chan struct{})
}

// chatState is a chat. Guarded by Server.mu.
type chatState struct {
	id        int64
	kind      string // private, group, supergroup
	forum     bool   // a supergroup with topics (AddForum)
	title     string // the person's first name for a private chat
	removed   map[int64]bool
	blocked   bool
	msgs      []*message
	nextMsgID int
	drafts    []Draft
	actions   []Action
	typing    map[int64]time.Time // bot id -> time of its last action not yet ended by a message
}

// isGroup reports whether the chat is a group or supergroup.
func (ch *chatState) isGroup() bool { return ch.kind == "group" || ch.kind == "supergroup" }

// find returns the message with an id, or nil.
func (ch *chatState) find(id int) *message {
	for _, m := range ch.msgs {
		if m.id == id {
			return m
		}
	}
	return nil
}

// message is a message in a chat, a person's or a bot's.
type message struct {
	id       int
	from     int64
	fromBot  bool
	date     time.Time
	editDate time.Time
	text     string
	caption  string
	media    *storedFile // for a photo, its largest size
	replyTo  int
	edits    int
	joined   []User   // new_chat_members of a service message
	entities []Entity // of text, or of caption when there is no text
	thread   int      // message_thread_id: the forum topic, 0 if none
	topic    string   // forum_topic_created's name: the service message opening a topic
	form     string   // a bot's message: "rich", "html" or "" (plain)
	rich     string   // a rich message's Markdown
	blocks   []string // a rich message's top-level block kinds
}

// fault is an injected error answer.
type fault struct {
	code       int
	desc       string
	retryAfter int
}
