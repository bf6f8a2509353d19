package slacktest

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// sockConn is an open Socket Mode connection.
type sockConn struct {
	conn *websocket.Conn
	bot  *botState
	done chan struct{} // closed when the connection ends
	stop chan struct{} // closed when its reader stops
}

// pickConn returns the next open connection of an app, round robin, or nil. Server.mu is held.
func (b *botState) pickConn() *sockConn {
	if len(b.conns) == 0 {
		return nil
	}
	b.rr = (b.rr + 1) % len(b.conns)
	return b.conns[b.rr]
}

// Connections counts the open Socket Mode connections of the app with this app-level token.
func (s *Server) Connections(appToken string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.tokens[appToken]
	if b == nil {
		return 0
	}
	return len(b.conns)
}

// Disconnect sends every Socket Mode connection of an app a disconnect message with reason
// ("warning", "refresh_requested", "link_disabled") and closes it, as Slack does before it
// rotates connections.
func (s *Server) Disconnect(appToken, reason string) {
	s.mu.Lock()
	b := s.tokens[appToken]
	var conns []*sockConn
	if b != nil {
		conns = append(conns, b.conns...)
	}
	s.mu.Unlock()
	msg, _ := json.Marshal(map[string]any{
		"type": "disconnect", "reason": reason,
		"debug_info": map[string]any{"host": "applink-fake"},
	})
	for _, c := range conns {
		ctx, cancel := context.WithTimeout(s.life.Context(), time.Second)
		_ = c.conn.Write(ctx, websocket.MessageText, msg) // the client may be gone
		cancel()
		_ = c.conn.Close(websocket.StatusNormalClosure, reason)
	}
}

// appsConnectionsOpen answers apps.connections.open with a single-use WebSocket URL on the fake.
func (s *Server) appsConnectionsOpen(q *request) answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	ticket := uuid()
	s.tickets[ticket] = q.bot
	u := "ws" + strings.TrimPrefix(q.base, "http") + "/link/?ticket=" + ticket + "&app_id=" + q.bot.AppID
	return okAnswer(map[string]any{"url": u})
}

// serveLink runs a Socket Mode connection: hello, envelopes out, acknowledgements in, pings.
func (s *Server) serveLink(w http.ResponseWriter, r *http.Request) {
	ticket := r.URL.Query().Get("ticket")
	s.mu.Lock()
	b := s.tickets[ticket]
	delete(s.tickets, ticket)
	closing := s.life.IsClosing()
	var done func()
	if b != nil && !closing {
		done = s.life.Track()
	}
	s.mu.Unlock()
	if b == nil || closing {
		http.Error(w, "invalid ticket", http.StatusUnauthorized)
		return
	}
	defer done()
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept answered the client
	}
	conn.SetReadLimit(1 << 20)
	c := &sockConn{conn: conn, bot: b, done: make(chan struct{}), stop: make(chan struct{})}

	s.mu.Lock()
	n := len(b.conns) + 1
	ping := s.timing.PingInterval
	s.mu.Unlock()

	hello, _ := json.Marshal(map[string]any{
		"type":            "hello",
		"num_connections": n,
		"debug_info": map[string]any{
			"host": "applink-fake", "build_number": 1, "approximate_connection_time": 18060,
		},
		"connection_info": map[string]any{"app_id": b.AppID},
	})
	if err := conn.Write(s.life.Context(), websocket.MessageText, hello); err != nil {
		_ = conn.CloseNow()
		return
	}
	s.mu.Lock()
	b.conns = append(b.conns, c) // only after the hello may envelopes follow
	s.wakeRoutesLocked()
	s.mu.Unlock()
	pingDone := make(chan struct{})
	go s.pinger(c, ping, pingDone)
	s.readAcks(c)
	<-pingDone

	s.mu.Lock()
	for i, x := range b.conns {
		if x == c {
			b.conns = append(b.conns[:i], b.conns[i+1:]...)
			break
		}
	}
	close(c.done)
	s.mu.Unlock()
	_ = conn.CloseNow()
}

// readAcks reads acknowledgements {"envelope_id": …} until the connection ends.
func (s *Server) readAcks(c *sockConn) {
	defer close(c.stop)
	for {
		_, data, err := c.conn.Read(s.life.Context())
		if err != nil {
			return
		}
		var ack struct {
			EnvelopeID string `json:"envelope_id"`
		}
		if json.Unmarshal(data, &ack) != nil || ack.EnvelopeID == "" {
			continue
		}
		s.mu.Lock()
		s.ackLocked(ack.EnvelopeID)
		s.mu.Unlock()
	}
}

// pinger pings the connection every interval until the reader stops.
func (s *Server) pinger(c *sockConn, every time.Duration, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			ctx, cancel := context.WithTimeout(s.life.Context(), every)
			err := c.conn.Ping(ctx)
			cancel()
			if err != nil {
				_ = c.conn.CloseNow()
				return
			}
		case <-c.stop:
			return
		}
	}
}
