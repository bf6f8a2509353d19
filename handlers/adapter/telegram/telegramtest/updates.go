package telegramtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Update retention and long polling ("Getting updates": updates are kept until the bot
// receives them, "but they will not be kept longer than 24 hours"; the Bot API server caps
// timeout at 50 seconds and limit at 1-100).
const (
	updateRetention = 24 * time.Hour
	maxPollTimeout  = 50
	maxLimit        = 100
)

// Webhook back-off between failed deliveries of an update, shortened for tests.
const (
	hookBackoffMin = 50 * time.Millisecond
	hookBackoffMax = time.Second
)

// queuedUpdate is an update waiting for a bot.
type queuedUpdate struct {
	id      int64
	created time.Time
	body    json.RawMessage // the Update object
}

// poller is a getUpdates call waiting for updates.
type poller struct {
	done   chan struct{} // closed when another request terminates it
	reason string        // the 409 description, set before done is closed
}

// webhook is a bot's setWebhook state.
type webhook struct {
	url            string
	secret         string
	maxConnections int
	lastErrorDate  int64
	lastErrorMsg   string
	running        bool // a deliverer goroutine runs for this bot
}

// Post makes a person send a text message in a chat; every bot in the chat gets a "message"
// update. It returns the message id and panics on an unknown chat.
func (s *Server) Post(chatID int64, from User, text string) int {
	return s.post(chatID, from, "Post", func(m *message) { m.text = text })
}

// PostReply is Post replying to message replyTo of the chat (in its forum topic, if it is in
// one).
func (s *Server) PostReply(chatID int64, from User, text string, replyTo int) int {
	return s.post(chatID, from, "PostReply", func(m *message) { m.text, m.replyTo = text, replyTo })
}

// PostService makes a person join a chat: a service message with new_chat_members and no text.
func (s *Server) PostService(chatID int64, from User) int {
	return s.post(chatID, from, "PostService", func(m *message) { m.joined = []User{from} })
}

// PostFile makes a person send a file of a kind ("photo", "document", "video" or "audio")
// with a caption. A photo gives Message.photo with two sizes, the largest carrying data; the
// others give their object with file_name and mime_type. It panics on an unknown kind.
func (s *Server) PostFile(chatID int64, from User, kind, caption, filename string, data []byte) int {
	if _, ok := fileDirs[kind]; !ok {
		panic(fmt.Sprintf("telegramtest: PostFile: unknown kind %q", kind))
	}
	data = append([]byte(nil), data...)
	return s.post(chatID, from, "PostFile", func(m *message) {
		m.caption = strings.TrimSpace(caption)
		m.media = s.newMediaLocked(kind, filename, "", data)
	})
}

// post adds a person's message to a chat and queues an update for each bot in it.
func (s *Server) post(chatID int64, from User, helper string, fill func(*message)) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.mustChat(chatID, helper)
	if _, ok := s.users[from.ID]; !ok {
		s.users[from.ID] = from
	}
	m := s.addMessageLocked(ch, from.ID, false)
	fill(m)
	if r := ch.find(m.replyTo); r != nil && m.thread == 0 {
		m.thread = r.thread
	}
	s.publishLocked(ch, m, nil)
	return m.id
}

// enqueueLocked queues an update of a type for a bot, unless its allowed_updates exclude the
// type ("allowed_updates ... doesn't affect updates created before the call"). s.mu is held.
func (s *Server) enqueueLocked(b *botState, kind string, payload any) {
	if len(b.allowed) > 0 && !slices.Contains(b.allowed, kind) {
		return
	}
	id := b.nextUpdateID
	b.nextUpdateID++
	body, err := json.Marshal(map[string]any{"update_id": id, kind: payload})
	if err != nil {
		panic(fmt.Sprintf("telegramtest: encode update: %v", err)) // our own types always encode
	}
	b.queue = append(b.queue, queuedUpdate{id: id, created: s.Now(), body: body})
	b.notify()
}

// expireLocked drops a bot's updates older than the retention. s.mu is held.
func (s *Server) expireLocked(b *botState) {
	cut := s.Now().Add(-updateRetention)
	i := 0
	for i < len(b.queue) && b.queue[i].created.Before(cut) {
		i++
	}
	b.queue = b.queue[i:]
}

// confirmLocked applies getUpdates' offset: a positive offset confirms (forgets) every update
// with a lower id; a negative one keeps only the last -offset updates. s.mu is held.
func (s *Server) confirmLocked(b *botState, offset int64) {
	s.expireLocked(b)
	switch {
	case offset > 0:
		i := 0
		for i < len(b.queue) && b.queue[i].id < offset {
			i++
		}
		b.queue = b.queue[i:]
	case offset < 0:
		if keep := int(-offset); keep < len(b.queue) {
			b.queue = b.queue[len(b.queue)-keep:]
		}
	}
}

// headLocked returns up to limit pending updates of a bot. s.mu is held.
func (s *Server) headLocked(b *botState, limit int) []json.RawMessage {
	s.expireLocked(b)
	out := make([]json.RawMessage, 0, min(limit, len(b.queue)))
	for _, u := range b.queue[:min(limit, len(b.queue))] {
		out = append(out, u.body)
	}
	return out
}

// setAllowedLocked stores an allowed_updates parameter when present and a JSON array;
// otherwise the previous setting stays ("If not specified, the previous setting will be
// used"). s.mu is held.
func setAllowedLocked(b *botState, p *params) {
	raw, ok := p.vals["allowed_updates"]
	if !ok {
		return
	}
	var list []string
	if err := json.Unmarshal([]byte(raw), &list); err == nil {
		b.allowed = list
	}
}

// getUpdates answers updates by long polling.
func (s *Server) getUpdates(q *request) (any, *apiError) {
	offset, _ := q.p.int64("offset")
	limit := maxLimit
	if v, ok := q.p.int64("limit"); ok {
		limit = int(min(max(v, 1), maxLimit))
	}
	timeout := 0
	if v, ok := q.p.int64("timeout"); ok {
		timeout = int(min(max(v, 0), maxPollTimeout))
	}

	s.mu.Lock()
	b := q.bot
	if b.hook.url != "" {
		s.mu.Unlock()
		return nil, &apiError{code: http.StatusConflict, desc: "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"}
	}
	terminatePollLocked(b, "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running")
	setAllowedLocked(b, q.p)
	s.confirmLocked(b, offset)
	ups := s.headLocked(b, limit)
	if len(ups) > 0 || timeout == 0 {
		s.mu.Unlock()
		return ups, nil
	}
	me := &poller{done: make(chan struct{})}
	b.poll = me
	wake := b.wake
	s.mu.Unlock()

	timer := time.NewTimer(time.Duration(timeout) * time.Second)
	defer timer.Stop()
	for {
		ended := false // the timeout passed, the client left or the server closes
		select {
		case <-wake:
		case <-me.done:
			return nil, &apiError{code: http.StatusConflict, desc: me.reason}
		case <-timer.C:
			ended = true
		case <-q.ctx.Done():
			ended = true
		case <-s.life.Closing():
			ended = true
		}
		s.mu.Lock()
		if b.poll != me { // terminated while we were waking up
			s.mu.Unlock()
			return nil, &apiError{code: http.StatusConflict, desc: me.reason}
		}
		ups = s.headLocked(b, limit)
		if len(ups) > 0 || ended {
			b.poll = nil
			s.mu.Unlock()
			return ups, nil
		}
		wake = b.wake
		s.mu.Unlock()
	}
}

// terminatePollLocked ends a bot's waiting getUpdates with 409 and a description. s.mu is held.
func terminatePollLocked(b *botState, reason string) {
	if b.poll == nil {
		return
	}
	b.poll.reason = reason
	close(b.poll.done)
	b.poll = nil
}

// setWebhook sets (or, with an empty url, removes) a bot's webhook.
func (s *Server) setWebhook(q *request) (any, *apiError) {
	raw := q.p.str("url")
	if raw == "" {
		return s.deleteWebhook(q)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, badRequest("invalid webhook URL specified")
	}
	secret := q.p.str("secret_token")
	if len(secret) > 256 {
		return nil, badRequest("secret token is too long")
	}
	if strings.IndexFunc(secret, func(r rune) bool {
		return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}) >= 0 {
		return nil, badRequest("secret token contains unallowed characters")
	}
	maxConn := 40
	if v, ok := q.p.int64("max_connections"); ok {
		maxConn = int(min(max(v, 1), 100))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := q.bot
	drop := q.p.bool("drop_pending_updates")
	_, allowedGiven := q.p.vals["allowed_updates"]
	if b.hook.url == raw && b.hook.secret == secret && b.hook.maxConnections == maxConn && !drop && !allowedGiven {
		q.desc = "Webhook is already set"
		return true, nil
	}
	terminatePollLocked(b, "Conflict: terminated by setWebhook request")
	if drop {
		b.queue = nil
	}
	setAllowedLocked(b, q.p)
	b.hook.url, b.hook.secret, b.hook.maxConnections = raw, secret, maxConn
	b.hook.lastErrorDate, b.hook.lastErrorMsg = 0, ""
	if !b.hook.running && !s.life.IsClosing() {
		b.hook.running = true
		s.life.Go(func() { s.deliver(b) })
	}
	b.notify()
	q.desc = "Webhook was set"
	return true, nil
}

// deleteWebhook removes a bot's webhook, optionally dropping pending updates.
func (s *Server) deleteWebhook(q *request) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := q.bot
	if q.p.bool("drop_pending_updates") {
		b.queue = nil
	}
	if b.hook.url == "" {
		q.desc = "Webhook is already deleted"
		return true, nil
	}
	b.hook = webhook{running: b.hook.running}
	b.notify()
	q.desc = "Webhook was deleted"
	return true, nil
}

// getWebhookInfo answers the bot's WebhookInfo; url is empty while it uses getUpdates.
func (s *Server) getWebhookInfo(q *request) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := q.bot
	s.expireLocked(b)
	info := wireWebhookInfo{URL: b.hook.url, PendingUpdateCount: len(b.queue)}
	if b.hook.url != "" {
		info.LastErrorDate, info.LastErrorMessage = b.hook.lastErrorDate, b.hook.lastErrorMsg
		info.MaxConnections = b.hook.maxConnections
		info.AllowedUpdates = b.allowed
	}
	return info, nil
}

// deliver POSTs a bot's updates to its webhook one at a time, in order, retrying each with
// back-off until a 2xx answer; it ends when the webhook is deleted or the server closes.
func (s *Server) deliver(b *botState) {
	backoff := hookBackoffMin
	for {
		s.mu.Lock()
		if b.hook.url == "" || s.life.IsClosing() {
			b.hook.running = false
			s.mu.Unlock()
			return
		}
		s.expireLocked(b)
		if len(b.queue) == 0 {
			wake := b.wake
			s.mu.Unlock()
			select {
			case <-wake:
				continue
			case <-s.life.Closing():
				continue // the check above ends the loop
			}
		}
		u := b.queue[0]
		hookURL, secret := b.hook.url, b.hook.secret
		s.deliveries++
		s.mu.Unlock()

		msg := s.post1(hookURL, secret, u.body)

		s.mu.Lock()
		if msg == "" {
			if i := slices.IndexFunc(b.queue, func(q queuedUpdate) bool { return q.id == u.id }); i >= 0 {
				b.queue = slices.Delete(b.queue, i, i+1)
			}
			backoff = hookBackoffMin
			s.mu.Unlock()
			continue
		}
		if b.hook.url == hookURL {
			b.hook.lastErrorDate, b.hook.lastErrorMsg = s.Now().Unix(), msg
		}
		s.mu.Unlock()
		s.life.Sleep(s.life.Context(), backoff)
		backoff = min(2*backoff, hookBackoffMax)
	}
}

// post1 makes one webhook request and returns "" on a 2xx answer, else the error as
// getWebhookInfo's last_error_message gives it.
func (s *Server) post1(hookURL, secret string, body []byte) string {
	req, err := http.NewRequestWithContext(s.life.Context(), http.MethodPost, hookURL, bytes.NewReader(body))
	if err != nil {
		return fmt.Sprintf("Invalid webhook URL: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
	}
	resp, err := s.hookClient.Do(req)
	if err != nil {
		return fmt.Sprintf("Connection failed: %v", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body) // a method call in the answer is not executed
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return "Wrong response from the webhook: " + resp.Status
	}
	return ""
}
