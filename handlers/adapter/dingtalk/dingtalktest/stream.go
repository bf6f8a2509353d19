package dingtalktest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// BotTopic is the Stream mode topic of robot messages.
const BotTopic = "/v1.0/im/bot/messages/get"

// TicketLife is how long a connection ticket is valid (90 s, once).
const TicketLife = 90 * time.Second

type ticket struct {
	app     string
	expires time.Time
}

// pending is a robot message pushed to an app and not yet acknowledged.
type pending struct {
	msgID     string
	data      string
	messageID string // the frame's messageId of the latest push
	acked     bool
}

// conn is one Stream connection.
type conn struct {
	app   string
	ws    *websocket.Conn
	ctx   context.Context
	stop  context.CancelFunc
	wmu   sync.Mutex
	pongs []string
}

func (c *conn) send(v any) error {
	b, _ := json.Marshal(v)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, b)
}

func (c *conn) close() {
	c.stop()
	_ = c.ws.CloseNow()
}

// openConnection is POST /v1.0/gateway/connections/open: {clientId, clientSecret,
// subscriptions, ua} to {endpoint, ticket}.
func (s *Server) openConnection(w http.ResponseWriter, r *http.Request) {
	var in struct {
		ClientID      string `json:"clientId"`
		ClientSecret  string `json:"clientSecret"`
		Subscriptions []struct {
			Type  string `json:"type"`
			Topic string `json:"topic"`
		} `json:"subscriptions"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.ClientID == "" || len(in.Subscriptions) == 0 {
		writeErr(w, 400, "invalidParameter", "clientId, clientSecret and subscriptions required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	app := s.apps[in.ClientID]
	if app == nil || app.ClientSecret != in.ClientSecret {
		writeErr(w, 401, CodeBadCredentials, "clientId or clientSecret invalid")
		return
	}
	s.n++
	t := fmt.Sprintf("ticket-%d", s.n)
	s.tickets[t] = ticket{app: app.ClientID, expires: s.clock.Now().Add(TicketLife)}
	writeJSON(w, 200, map[string]string{"endpoint": "ws" + strings.TrimPrefix(s.URL(), "http") + "/connect", "ticket": t})
}

// connect is the WebSocket endpoint?ticket=: the app's frames, each acknowledged by messageId.
// A frame not acknowledged is pushed again (a new messageId) on the app's next connection.
func (s *Server) connect(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	t, ok := s.tickets[r.URL.Query().Get("ticket")]
	delete(s.tickets, r.URL.Query().Get("ticket"))
	closing := s.life.IsClosing()
	s.mu.Unlock()
	if !ok || s.clock.Now().After(t.expires) || closing {
		http.Error(w, "invalid ticket", http.StatusUnauthorized)
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	ctx, cancel := context.WithCancel(s.life.Context())
	c := &conn{app: t.app, ws: ws, ctx: ctx, stop: cancel}
	s.mu.Lock()
	if old := s.conns[t.app]; old != nil {
		old.close()
	}
	s.conns[t.app] = c
	var again []*pending
	for _, p := range s.queue[t.app] {
		if !p.acked {
			again = append(again, p)
		}
	}
	s.mu.Unlock()
	for _, p := range again {
		s.push(c, p)
	}
	defer func() {
		s.mu.Lock()
		if s.conns[t.app] == c {
			delete(s.conns, t.app)
		}
		s.mu.Unlock()
		c.close()
	}()
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			return
		}
		var a struct {
			Code    int               `json:"code"`
			Headers map[string]string `json:"headers"`
			Data    string            `json:"data"`
		}
		if json.Unmarshal(data, &a) != nil {
			continue
		}
		s.mu.Lock()
		for _, p := range s.queue[t.app] {
			if p.messageID == a.Headers["messageId"] && a.Code == 200 {
				p.acked = true
			}
		}
		if strings.HasPrefix(a.Headers["messageId"], "ping-") {
			c.pongs = append(c.pongs, a.Data)
		}
		s.mu.Unlock()
	}
}

// push sends p on c with a new messageId.
func (s *Server) push(c *conn, p *pending) {
	s.mu.Lock()
	s.n++
	p.messageID = fmt.Sprintf("msg-%d", s.n)
	id := p.messageID
	now := strconv.FormatInt(s.clock.Now().UnixMilli(), 10)
	s.mu.Unlock()
	_ = c.send(map[string]any{"specVersion": "1.0", "type": "CALLBACK",
		"headers": map[string]string{"topic": BotTopic, "messageId": id, "contentType": "application/json", "time": now},
		"data":    p.data})
}

// Unacked counts an app's robot messages not acknowledged.
func (s *Server) Unacked(app App) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.queue[app.ClientID] {
		if !p.acked {
			n++
		}
	}
	return n
}

// Connected reports whether the app has a Stream connection.
func (s *Server) Connected(app App) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[app.ClientID] != nil
}

// Ping sends a SYSTEM ping with opaque on the app's connection; Pongs are the data echoed.
func (s *Server) Ping(app App, opaque string) bool {
	s.mu.Lock()
	c := s.conns[app.ClientID]
	s.n++
	id := fmt.Sprintf("ping-%d", s.n)
	s.mu.Unlock()
	if c == nil {
		return false
	}
	data, _ := json.Marshal(map[string]string{"opaque": opaque})
	return c.send(map[string]any{"specVersion": "1.0", "type": "SYSTEM",
		"headers": map[string]string{"topic": "ping", "messageId": id, "contentType": "application/json"}, "data": string(data)}) == nil
}

// Pongs are the ping data the app's connection echoed.
func (s *Server) Pongs(app App) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.conns[app.ClientID]; c != nil {
		return append([]string(nil), c.pongs...)
	}
	return nil
}

// Disconnect sends SYSTEM disconnect on the app's connection and drops it after grace (DingTalk:
// about 10 s).
func (s *Server) Disconnect(app App, grace time.Duration) {
	s.mu.Lock()
	c := s.conns[app.ClientID]
	s.mu.Unlock()
	if c == nil {
		return
	}
	_ = c.send(map[string]any{"specVersion": "1.0", "type": "SYSTEM",
		"headers": map[string]string{"topic": "disconnect", "messageId": "disconnect", "contentType": "application/json"},
		"data":    `{"reason":"server maintenance"}`})
	time.AfterFunc(grace, c.close)
}

// deliver queues a robot message's data for app and pushes it on its connection, if any.
func (s *Server) deliver(app App, msgID string, data map[string]any) {
	b, _ := json.Marshal(data)
	p := &pending{msgID: msgID, data: string(b)}
	s.mu.Lock()
	s.queue[app.ClientID] = append(s.queue[app.ClientID], p)
	c := s.conns[app.ClientID]
	s.mu.Unlock()
	if c != nil {
		s.push(c, p)
	}
}

// Redeliver pushes the robot message msgID again with a new messageId (DingTalk was seen doing
// so), acknowledged or not.
func (s *Server) Redeliver(app App, msgID string) {
	s.mu.Lock()
	var p *pending
	for _, q := range s.queue[app.ClientID] {
		if q.msgID == msgID {
			p = q
		}
	}
	c := s.conns[app.ClientID]
	if p != nil {
		p.acked = false
	}
	s.mu.Unlock()
	if p != nil && c != nil {
		s.push(c, p)
	}
}

// Post writes text as person in a group (cid) or, with cid "", one-to-one with app's robot, and
// returns the msgId. In a group DingTalk pushes only a message that @-mentions the robot
// (isInAtList, the mention removed from the text, a leading space left) unless
// SetAllGroupMessages.
func (s *Server) Post(app App, person User, cid, text string, mention bool) string {
	return s.post(app, person, cid, mention, map[string]any{"msgtype": "text", "text": map[string]any{"content": " " + text}})
}

// PostFile sends a file as person (one-to-one only, as DingTalk: a group's robot receives no
// files) and returns the msgId.
func (s *Server) PostFile(app App, person User, name, mime string, data []byte) string {
	s.mu.Lock()
	s.n++
	code := fmt.Sprintf("dlcode%d", s.n)
	s.files[code] = media{name: name, mime: mime, data: data}
	s.mu.Unlock()
	return s.post(app, person, "", false, map[string]any{"msgtype": "file", "content": map[string]any{"downloadCode": code, "fileName": name}})
}

func (s *Server) post(app App, person User, cid string, mention bool, body map[string]any) string {
	s.mu.Lock()
	s.n++
	msgID := fmt.Sprintf("msg%dAbC==", s.n)
	all := s.allGroup
	now := s.clock.Now().UnixMilli()
	s.mu.Unlock()
	data := map[string]any{"msgId": msgID, "createAt": now, "senderId": person.DingtalkID, "senderStaffId": person.StaffID,
		"senderNick": person.Nick, "chatbotUserId": app.ChatbotUserID, "robotCode": app.RobotCode,
		"sessionWebhook": s.URL() + "/robot/sendBySession?session=x", "sessionWebhookExpiredTime": now + 90*60*1000,
		"isAdmin": false, "senderCorpId": "dingcorp"}
	for k, v := range body {
		data[k] = v
	}
	if cid == "" {
		data["conversationType"] = "1"
		data["conversationId"] = "cidDirect" + person.StaffID
		data["isInAtList"] = true
	} else {
		if !mention && !all {
			return msgID // DingTalk pushes a group's robot only what @-mentions it
		}
		data["conversationType"] = "2"
		data["conversationId"] = cid
		data["conversationTitle"] = "group " + cid[:6]
		data["isInAtList"] = mention
		if mention {
			data["atUsers"] = []map[string]string{{"dingtalkId": app.ChatbotUserID}}
		}
	}
	s.deliver(app, msgID, data)
	return msgID
}
