// Package wecomtest is an in-process fake of WeCom's intelligent robot long connection
// (智能机器人长连接, developer.work.weixin.qq.com/document/path/101463) for tests of the wecom
// adapter: the commands the adapter uses, frame by frame, and a view of what a person in a
// conversation sees.
//
// A test makes robots, acts as the people, and reads what the robot showed:
//
//	s := wecomtest.New()
//	defer s.Close()
//	bot := s.AddBot("Helper")
//	msgid := s.Say(bot, wecomtest.Single("alice"), "alice", "hello") // an aibot_msg_callback
//	// ... the adapter connects to s.URL() with bot.ID and bot.Secret ...
//	seen := s.Messages(bot, wecomtest.Single("alice"))
//
// The contract (README.md names the doc page behind each behaviour and the assumptions):
//
//   - One WebSocket per connection at URL(); every frame JSON {cmd, headers:{req_id}, body};
//     every command answered {headers:{req_id}, errcode, errmsg[, body]}.
//   - aibot_subscribe {bot_id, secret}: a wrong pair is errcode 40001 and the connection is
//     closed; a second subscribe of a robot sends the first connection an aibot_event_callback
//     disconnected_event and closes it.
//   - ping: answered errcode 0 (after subscribe only).
//   - aibot_msg_callback for every message a person says to the robot (groups: mentions only,
//     the text keeping "@Name"); said while the robot has no connection, it is delivered after
//     the next subscribe.
//   - aibot_respond_msg with a callback's req_id (24 h; else 846605): a stream message creates
//     the bubble of its stream.id, later frames replace its content, finish freezes it; 6
//     minutes after its first frame ([Server.SetStreamLife]) a stream answers 846608.
//   - aibot_send_msg {chatid, msgtype markdown|file|image}: a new message in a conversation a
//     person has written to the robot in (else 40058).
//   - aibot_upload_media_init/_chunk/_finish: chunks of at most 512 KB (base64), at most 100,
//     put together and checked against total_size and md5; media_id for 3 days.
//   - Content over 20,480 bytes: 40058. A conversation takes 30 replies and pushes a minute
//     (45009 past them).
package wecomtest

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Bot is a robot of the fake.
type Bot struct {
	ID, Secret, Name string
}

// Conv names a conversation: a person's single chat with the robot, or a group.
type Conv struct {
	ChatType string // "single" or "group"
	ID       string // the person's userid, or the group's chatid
}

// Single is the single chat of the person userid with the robot.
func Single(userid string) Conv { return Conv{ChatType: "single", ID: userid} }

// Group is the group chatid.
func Group(chatid string) Conv { return Conv{ChatType: "group", ID: chatid} }

// Message is one message of the robot as a person sees it.
type Message struct {
	// ID is a stream's stream.id, or the req_id of the aibot_send_msg that sent it.
	ID string
	// Kind is "stream", "markdown", "file" or "image".
	Kind string
	// Text is the content now (a stream's latest frame).
	Text string
	// Finished: a stream's finish frame came.
	Finished bool
	// Frames counts a stream's frames.
	Frames int
	// FileName and Data are a file's or image's.
	FileName string
	Data     []byte
	// ReplyTo is the msgid a stream answers.
	ReplyTo string
}

// Frame is one command the fake received.
type Frame struct {
	Cmd     string
	ReqID   string
	Body    json.RawMessage
	Errcode int
	At      time.Time
}

type conn struct {
	ws  *websocket.Conn
	bot string
	out chan []byte
}

type callbackRec struct {
	msgid string
	conv  Conv
	at    time.Time
}

type upload struct {
	kind, name string
	size       int
	chunks     map[int][]byte
	total      int
	md5        string
}

type media struct {
	kind, name string
	data       []byte
}

// Server is the fake.
type Server struct {
	ts     *httptest.Server
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	bots       map[string]*Bot
	live       map[string]*conn         // bot -> its subscribed connection
	queued     map[string][][]byte      // bot -> callbacks said while it had no connection
	callbacks  map[string]callbackRec   // req_id -> the message it called back
	convs      map[string]map[Conv]bool // bot -> conversations people wrote in
	msgs       map[string]map[Conv][]*Message
	streams    map[string]*Message // bot/stream id -> bubble
	streamAt   map[string]time.Time
	streamLife time.Duration
	uploads    map[string]*upload
	media      map[string]media
	sent       map[string][]time.Time // bot/conv -> replies and pushes
	files      map[string][]byte      // file path -> encrypted bytes
	log        []Frame
	drop       map[string]int      // cmd -> answers to leave out
	history    map[string][][]byte // bot -> every callback made
	n          int
}

// New starts a fake.
func New() *Server {
	s := &Server{bots: map[string]*Bot{}, live: map[string]*conn{}, queued: map[string][][]byte{}, callbacks: map[string]callbackRec{},
		convs: map[string]map[Conv]bool{}, msgs: map[string]map[Conv][]*Message{}, streams: map[string]*Message{}, streamAt: map[string]time.Time{},
		streamLife: 6 * time.Minute, uploads: map[string]*upload{}, media: map[string]media{}, sent: map[string][]time.Time{},
		files: map[string][]byte{}, drop: map[string]int{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.ts = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Close drops every connection and stops the fake.
func (s *Server) Close() {
	s.cancel()
	s.mu.Lock()
	for _, c := range s.live {
		c.ws.CloseNow()
	}
	s.mu.Unlock()
	s.ts.CloseClientConnections()
	s.wg.Wait()
	s.ts.Close()
}

// URL is the long connection's ws:// URL (the adapter's ws_url).
func (s *Server) URL() string { return "ws" + strings.TrimPrefix(s.ts.URL, "http") }

// AddBot makes a robot called name.
func (s *Server) AddBot(name string) Bot {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	b := &Bot{ID: fmt.Sprintf("aib%04d%s", s.n, token(4)), Secret: token(16), Name: name}
	s.bots[b.ID] = b
	return *b
}

// SetStreamLife shortens (or lengthens) how long a stream takes frames after its first.
func (s *Server) SetStreamLife(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streamLife = d
}

// DropAnswers makes the next n commands cmd applied but not answered (a lost answer).
func (s *Server) DropAnswers(cmd string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop[cmd] += n
}

// Kick closes the robot's connection (a network failure).
func (s *Server) Kick(bot Bot) {
	s.mu.Lock()
	c := s.live[bot.ID]
	s.mu.Unlock()
	if c != nil {
		c.ws.CloseNow()
	}
}

// Connected reports whether the robot has a subscribed connection.
func (s *Server) Connected(bot Bot) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live[bot.ID] != nil
}

// Frames is the log of the commands received, oldest first.
func (s *Server) Frames() []Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Frame(nil), s.log...)
}

// Subscribes counts the robot's successful aibot_subscribes, whoever made them.
func (s *Server) Subscribes(bot Bot) int {
	n := 0
	for _, f := range s.Frames() {
		var b struct {
			BotID string `json:"bot_id"`
		}
		if f.Cmd == "aibot_subscribe" && f.Errcode == 0 && json.Unmarshal(f.Body, &b) == nil && b.BotID == bot.ID {
			n++
		}
	}
	return n
}

// Say has person userid say text to the robot in conv (a group calls the robot back only when
// mention is true; the text then starts with "@Name "). It returns the msgid ("" : no callback).
func (s *Server) Say(bot Bot, conv Conv, userid, text string, mention bool) string {
	if conv.ChatType == "group" {
		if !mention {
			return ""
		}
		text = "@" + bot.Name + " " + text
	}
	return s.callback(bot, conv, userid, map[string]any{"msgtype": "text", "text": map[string]any{"content": text}}, "")
}

// SayFile has person userid send a file (a single chat: WeCom calls back files in single chats
// only); its URL serves the bytes encrypted with the message's own aeskey.
func (s *Server) SayFile(bot Bot, userid, name string, data []byte) string {
	key := base64.StdEncoding.EncodeToString([]byte(token(16)))
	enc, err := encrypt(data, key)
	if err != nil {
		panic(err)
	}
	path := "/files/" + token(8)
	s.mu.Lock()
	s.files[path] = enc
	s.mu.Unlock()
	return s.callback(bot, Single(userid), userid, map[string]any{"msgtype": "file",
		"file": map[string]any{"url": s.ts.URL + path, "aeskey": key, "filename": name}}, "")
}

// Again calls back msgid's message again (WeCom may): the same msgid, a new req_id.
func (s *Server) Again(bot Bot, msgid string) {
	s.mu.Lock()
	var body []byte
	for _, q := range s.queuedBodies(bot.ID) {
		if bytes.Contains(q, []byte(msgid)) {
			body = q
		}
	}
	s.mu.Unlock()
	if body != nil {
		var f map[string]any
		_ = json.Unmarshal(body, &f)
		b := f["body"].(map[string]any)
		s.callback(bot, Conv{ChatType: b["chattype"].(string), ID: convID(b)}, b["from"].(map[string]any)["userid"].(string), b, msgid)
	}
}

func convID(b map[string]any) string {
	if b["chattype"] == "group" {
		return b["chatid"].(string)
	}
	return b["from"].(map[string]any)["userid"].(string)
}

// sentCallbacks keeps every callback body made, for Again.
func (s *Server) queuedBodies(bot string) [][]byte { return s.history[bot] }

func (s *Server) callback(bot Bot, conv Conv, userid string, body map[string]any, msgid string) string {
	s.mu.Lock()
	if msgid == "" {
		s.n++
		msgid = fmt.Sprintf("msg%06d%s", s.n, token(4))
	}
	req := "aibot_msg_callback_" + token(8)
	body["msgid"], body["aibotid"], body["chattype"] = msgid, bot.ID, conv.ChatType
	body["from"] = map[string]any{"userid": userid}
	body["create_time"] = time.Now().Unix()
	if conv.ChatType == "group" {
		body["chatid"] = conv.ID
	}
	raw, _ := json.Marshal(map[string]any{"cmd": "aibot_msg_callback", "headers": map[string]any{"req_id": req}, "body": body})
	s.callbacks[req] = callbackRec{msgid: msgid, conv: conv, at: time.Now()}
	if s.convs[bot.ID] == nil {
		s.convs[bot.ID] = map[Conv]bool{}
	}
	s.convs[bot.ID][conv] = true
	if s.history == nil {
		s.history = map[string][][]byte{}
	}
	s.history[bot.ID] = append(s.history[bot.ID], raw)
	c := s.live[bot.ID]
	if c == nil {
		s.queued[bot.ID] = append(s.queued[bot.ID], raw)
	}
	s.mu.Unlock()
	if c != nil {
		c.send(raw)
	}
	return msgid
}

// LastMsgID is the msgid of the robot's latest callback.
func (s *Server) LastMsgID(bot Bot) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.history[bot.ID]
	if len(h) == 0 {
		return ""
	}
	var f struct {
		Body struct {
			MsgID string `json:"msgid"`
		} `json:"body"`
	}
	_ = json.Unmarshal(h[len(h)-1], &f)
	return f.Body.MsgID
}

// Met records that a person of conv wrote to the robot before (days ago: no callback now), so
// the robot may send proactive messages there.
func (s *Server) Met(bot Bot, conv Conv) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.convs[bot.ID] == nil {
		s.convs[bot.ID] = map[Conv]bool{}
	}
	s.convs[bot.ID][conv] = true
}

// Messages is what a person in conv sees of the robot, oldest first.
func (s *Server) Messages(bot Bot, conv Conv) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.msgs[bot.ID][conv] {
		out = append(out, *m)
	}
	return out
}

func (c *conn) send(b []byte) {
	select {
	case c.out <- b:
	default:
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/files/") {
		s.mu.Lock()
		data, ok := s.files[r.URL.Path]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(data)
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	ws.SetReadLimit(4 << 20)
	s.wg.Add(1)
	defer s.wg.Done()
	c := &conn{ws: ws, out: make(chan []byte, 1024)}
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case b := <-c.out:
				if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
					ws.CloseNow()
					return
				}
			}
		}
	}()
	defer func() {
		ws.CloseNow()
		s.mu.Lock()
		if s.live[c.bot] == c {
			delete(s.live, c.bot)
		}
		s.mu.Unlock()
	}()
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		var f struct {
			Cmd     string `json:"cmd"`
			Headers struct {
				ReqID string `json:"req_id"`
			} `json:"headers"`
			Body json.RawMessage `json:"body"`
		}
		if json.Unmarshal(b, &f) != nil {
			continue
		}
		if !s.command(c, f.Cmd, f.Headers.ReqID, f.Body) {
			time.Sleep(50 * time.Millisecond) // the answer of a refused subscribe goes first
			return
		}
	}
}

// command applies one command and answers it; false ends the connection.
func (s *Server) command(c *conn, cmd, req string, body json.RawMessage) bool {
	code, msg, out, keep := s.apply(c, cmd, req, body)
	s.mu.Lock()
	s.log = append(s.log, Frame{Cmd: cmd, ReqID: req, Body: body, Errcode: code, At: time.Now()})
	drop := s.drop[cmd] > 0 && code == 0
	if drop {
		s.drop[cmd]--
	}
	s.mu.Unlock()
	if drop {
		return keep
	}
	ans := map[string]any{"headers": map[string]any{"req_id": req}, "errcode": code, "errmsg": msg}
	if out != nil {
		ans["body"] = out
	}
	raw, _ := json.Marshal(ans)
	c.send(raw)
	if cmd == "aibot_subscribe" && code == 0 {
		s.mu.Lock()
		q := s.queued[c.bot]
		delete(s.queued, c.bot)
		s.mu.Unlock()
		for _, b := range q {
			c.send(b)
		}
	}
	return keep
}

func (s *Server) apply(c *conn, cmd, req string, raw json.RawMessage) (code int, msg string, out any, keep bool) {
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	str := func(k string) string { v, _ := body[k].(string); return v }
	if cmd == "aibot_subscribe" {
		s.mu.Lock()
		b := s.bots[str("bot_id")]
		if b == nil || b.Secret != str("secret") {
			s.mu.Unlock()
			return 40001, "invalid bot_id or secret", nil, false
		}
		old := s.live[b.ID]
		c.bot = b.ID
		s.live[b.ID] = c
		s.mu.Unlock()
		if old != nil {
			ev, _ := json.Marshal(map[string]any{"cmd": "aibot_event_callback", "headers": map[string]any{"req_id": "aibot_event_callback_" + token(8)},
				"body": map[string]any{"msgid": token(8), "aibotid": b.ID, "msgtype": "event", "event": map[string]any{"eventtype": "disconnected_event"}}})
			old.send(ev)
			go func() { time.Sleep(100 * time.Millisecond); old.ws.CloseNow() }()
		}
		return 0, "ok", nil, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.bot == "" || s.live[c.bot] != c {
		return 40001, "not subscribed", nil, false
	}
	switch cmd {
	case "ping":
		return 0, "ok", nil, true
	case "aibot_respond_msg":
		cb, ok := s.callbacks[req]
		if !ok || time.Since(cb.at) > 24*time.Hour {
			return 846605, "invalid req_id", nil, true
		}
		st, _ := body["stream"].(map[string]any)
		if str("msgtype") != "stream" || st == nil {
			return 40058, "only stream replies are modelled", nil, true
		}
		id, _ := st["id"].(string)
		content, _ := st["content"].(string)
		finish, _ := st["finish"].(bool)
		if id == "" || len(content) > 20480 {
			return 40058, "invalid stream", nil, true
		}
		key := c.bot + "/" + id
		m := s.streams[key]
		if m != nil && time.Since(s.streamAt[key]) > s.streamLife {
			return 846608, "stream expired", nil, true
		}
		if !s.spend(c.bot, cb.conv) {
			return 45009, "api freq out of limit", nil, true
		}
		if m == nil {
			m = &Message{ID: id, Kind: "stream", ReplyTo: cb.msgid}
			s.streams[key], s.streamAt[key] = m, time.Now()
			s.add(c.bot, cb.conv, m)
		}
		if !m.Finished {
			m.Text, m.Finished = content, finish
			m.Frames++
		}
		return 0, "ok", nil, true
	case "aibot_send_msg":
		conv, ok := s.convOf(c.bot, str("chatid"))
		if !ok {
			return 40058, "the chat has not written to the robot", nil, true
		}
		m := &Message{ID: req, Kind: str("msgtype")}
		switch m.Kind {
		case "markdown":
			md, _ := body["markdown"].(map[string]any)
			m.Text, _ = md["content"].(string)
			if len(m.Text) > 20480 || m.Text == "" {
				return 40058, "invalid markdown content", nil, true
			}
		case "file", "image":
			f, _ := body[m.Kind].(map[string]any)
			id, _ := f["media_id"].(string)
			md, ok := s.media[id]
			if !ok {
				return 40007, "invalid media_id", nil, true
			}
			m.FileName, m.Data = md.name, md.data
		default:
			return 40058, "msgtype not modelled", nil, true
		}
		if !s.spend(c.bot, conv) {
			return 45009, "api freq out of limit", nil, true
		}
		s.add(c.bot, conv, m)
		return 0, "ok", nil, true
	case "aibot_upload_media_init":
		total, _ := body["total_chunks"].(float64)
		size, _ := body["total_size"].(float64)
		if total < 1 || total > 100 || str("filename") == "" {
			return 40058, "invalid upload", nil, true
		}
		id := "up_" + token(8)
		s.uploads[id] = &upload{kind: str("type"), name: str("filename"), size: int(size), total: int(total), md5: str("md5"), chunks: map[int][]byte{}}
		return 0, "ok", map[string]any{"upload_id": id}, true
	case "aibot_upload_media_chunk":
		u := s.uploads[str("upload_id")]
		idx, _ := body["chunk_index"].(float64)
		data, err := base64.StdEncoding.DecodeString(str("base64_data"))
		if u == nil || err != nil || len(data) > 512<<10 || int(idx) < 0 || int(idx) >= u.total {
			return 40058, "invalid chunk", nil, true
		}
		u.chunks[int(idx)] = data
		return 0, "ok", nil, true
	case "aibot_upload_media_finish":
		u := s.uploads[str("upload_id")]
		if u == nil || len(u.chunks) != u.total {
			return 40058, "upload incomplete", nil, true
		}
		var all []byte
		for i := 0; i < u.total; i++ {
			all = append(all, u.chunks[i]...)
		}
		sum := md5.Sum(all)
		if len(all) != u.size || (u.md5 != "" && u.md5 != hex.EncodeToString(sum[:])) {
			return 40058, "size or md5 mismatch", nil, true
		}
		id := "media_" + token(8)
		s.media[id] = media{kind: u.kind, name: u.name, data: all}
		delete(s.uploads, str("upload_id"))
		return 0, "ok", map[string]any{"type": u.kind, "media_id": id, "created_at": time.Now().Unix()}, true
	}
	return 40058, "unknown cmd", nil, true
}

func (s *Server) convOf(bot, chatid string) (Conv, bool) {
	for cv := range s.convs[bot] {
		if cv.ID == chatid {
			return cv, true
		}
	}
	return Conv{}, false
}

// spend takes one of the conversation's 30 replies and pushes a minute.
func (s *Server) spend(bot string, conv Conv) bool {
	k := bot + "/" + conv.ChatType + "/" + conv.ID
	now := time.Now()
	var keep []time.Time
	for _, t := range s.sent[k] {
		if now.Sub(t) < time.Minute {
			keep = append(keep, t)
		}
	}
	if len(keep) >= 30 {
		s.sent[k] = keep
		return false
	}
	s.sent[k] = append(keep, now)
	return true
}

func (s *Server) add(bot string, conv Conv, m *Message) {
	if s.msgs[bot] == nil {
		s.msgs[bot] = map[Conv][]*Message{}
	}
	s.msgs[bot][conv] = append(s.msgs[bot][conv], m)
}

func token(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
