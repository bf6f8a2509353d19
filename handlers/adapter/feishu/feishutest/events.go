package feishutest

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Event delivery facts ("Event overview": answer HTTP 200 within 3 seconds, TCP connect 2
// seconds; "Send events to the developer server": the challenge must come back within 1
// second).
const (
	dialTimeout      = 2 * time.Second
	challengeTimeout = time.Second
	maxHookAnswer    = 1 << 20
	eventTypeReceive = "im.message.receive_v1"
)

// Headers of an event request ("Receive events": signature verification).
const (
	HeaderTimestamp = "X-Lark-Request-Timestamp"
	HeaderNonce     = "X-Lark-Request-Nonce"
	HeaderSignature = "X-Lark-Signature"
)

// ErrChallengeMismatch reports that the event URL answered the url_verification request with
// another challenge than the one sent.
var ErrChallengeMismatch = errors.New("feishutest: challenge answered does not match")

// eventHook is an app's event subscription: its request URL and encryption policy.
type eventHook struct {
	url        string
	token      string // Verification Token
	encryptKey string // "" sends events in plain text
}

// eventState is an event generated for an app. Guarded by Server.mu.
type eventState struct {
	id        string
	appID     string
	messageID string
	wire      wireEvent
	attempts  int
	delivered bool
}

// newHookClient is the client of event and challenge requests: 2 s to connect; each request
// carries its own deadline.
func newHookClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: dialTimeout}).DialContext
	return &http.Client{Transport: tr}
}

// SetEventURL subscribes an app to events at url ("Send events to the developer server"),
// with its Verification Token and Encrypt Key ("" sends plain JSON). An empty url stops
// delivery, retries included. It panics on an unknown app.
func (s *Server) SetEventURL(appID, url, verificationToken, encryptKey string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[appID]
	if a == nil {
		panic(fmt.Sprintf("feishutest: SetEventURL: unknown app %q", appID))
	}
	a.hook = eventHook{url: url, token: verificationToken, encryptKey: encryptKey}
}

// Post makes a person send a text message in a chat. Every app whose bot is in the chat and
// that has an event URL gets an im.message.receive_v1 event. It returns the message id and
// the event id of the first such app (in AddApp order), "" if none. It panics on an unknown
// chat.
func (s *Server) Post(chatID string, from User, text string) (messageID, eventID string) {
	content, _ := json.Marshal(map[string]string{"text": text}) // strings always encode
	return s.postPerson(chatID, from, "Post", "text", string(content), nil, "", nil)
}

// PostMentioning is Post of a text that mentions people or bots: mentioned are their open_ids
// (a person's, or an app's BotOpenID), and text holds "@_user_1" where the first is mentioned,
// "@_user_2" for the second, and so on, as Feishu writes a mention in a received text
// ("Receive message": content {"text":"@_user_1 hello"}, and message.mentions with each
// one's key, id and name; a bot's id has only its open_id). It panics on an unknown chat or
// open_id.
func (s *Server) PostMentioning(chatID string, from User, text string, mentioned ...string) (messageID, eventID string) {
	content, _ := json.Marshal(map[string]string{"text": text})
	return s.postPerson(chatID, from, "PostMentioning", "text", string(content), nil, "", mentioned)
}

// PostRich makes a person send a rich-text (post) message: content is its content as Feishu
// delivers it ("Receive message content", post: {"title","content":[[run,...],...]}, each run a
// text with its style, a, at, img, code_block, md, emotion or hr), mentioned the open_ids its
// "@_user_N" at runs name, in order. It panics on content that is not a post, or an unknown
// chat.
func (s *Server) PostRich(chatID string, from User, content json.RawMessage, mentioned ...string) (messageID, eventID string) {
	if _, ok := postText(string(content)); !ok {
		panic("feishutest: PostRich: content is not a post")
	}
	return s.postPerson(chatID, from, "PostRich", "post", string(content), nil, "", mentioned)
}

// PostReply is Post replying to a message of the chat.
func (s *Server) PostReply(chatID string, from User, text, parentID string) (messageID, eventID string) {
	content, _ := json.Marshal(map[string]string{"text": text})
	return s.postPerson(chatID, from, "PostReply", "text", string(content), nil, parentID, nil)
}

// PostFile makes a person send an image (kind "image") or a file (kind "file") named name.
// The event's content is {"image_key"} or {"file_key","file_name"} ("Receive message
// content"), and the bytes can be downloaded with "Obtain resource files in messages". It
// panics on an unknown kind or chat.
func (s *Server) PostFile(chatID string, from User, kind, name string, data []byte) (messageID, eventID string) {
	f := &storedFile{kind: kind, name: name, data: bytes.Clone(data)}
	var content []byte
	switch kind {
	case "image":
		f.key = "img_v2_" + randKey()
		f.mime = "application/octet-stream"
		if format, ok := sniffImage(data); ok {
			f.mime = "image/" + format
		}
		content, _ = json.Marshal(map[string]string{"image_key": f.key})
	case "file":
		f.key, f.fileType, f.mime = "file_v2_"+randKey(), "stream", mimeOf(name)
		content, _ = json.Marshal(map[string]string{"file_key": f.key, "file_name": name})
	default:
		panic(fmt.Sprintf("feishutest: PostFile: unknown kind %q", kind))
	}
	return s.postPerson(chatID, from, "PostFile", kind, string(content), f, "", nil)
}

// PostAsBot makes an app's bot write a text message in a chat (as "Send message" does) and
// delivers it to every other app whose bot is in the chat and that has an event URL, with
// sender.sender_type "app" and the writing bot's open_id as sender_id.open_id. Feishu's
// "Receive message" page says sender_type "currently only supports messages sent by users"
// (目前只支持用户(user)发送的消息): this is not documented delivery but a test's way to prove
// that a message of another bot, should one arrive, is never passed on. It returns the message
// id and the first event id. It panics on an unknown chat or an app whose bot is not in it.
func (s *Server) PostAsBot(chatID, appID, text string) (messageID, eventID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.mustChat(chatID, "PostAsBot")
	writer := s.apps[appID]
	if writer == nil || !ch.hasBot(appID) {
		panic(fmt.Sprintf("feishutest: PostAsBot: no bot of app %q in chat %q", appID, chatID))
	}
	now := s.Now()
	content, _ := json.Marshal(map[string]string{"text": text})
	m := &message{msgType: "text", content: string(content), text: text}
	s.addBotMessageLocked(writer, ch, m, "", now)
	sender := wireEventSender{SenderID: wireUserID{OpenID: writer.BotOpenID}, SenderType: "app", TenantKey: s.tenantKey}
	return m.id, s.deliverMessageLocked(ch, m, sender, appID, now)
}

// postPerson adds a person's message to a chat and starts its events.
func (s *Server) postPerson(chatID string, from User, helper, msgType, content string, f *storedFile, parentID string, mentioned []string) (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.mustChat(chatID, helper)
	if _, ok := s.users[from.OpenID]; !ok {
		u := from
		s.users[from.OpenID] = &u
	}
	now := s.Now()
	text := ""
	switch msgType {
	case "text":
		var c struct{ Text string }
		_ = json.Unmarshal([]byte(content), &c)
		text = c.Text
	case "post":
		text, _ = postText(content)
	}
	m := &message{id: "om_" + randHex(32), chatID: ch.id, fromUser: from.OpenID, msgType: msgType,
		content: content, text: text, file: f, at: now, mentions: s.mentionsLocked(helper, mentioned)}
	if parentID != "" {
		p := s.msgs[parentID]
		if p == nil || p.chatID != ch.id {
			panic(fmt.Sprintf("feishutest: %s: no message %q in chat %q", helper, parentID, chatID))
		}
		m.parentID, m.rootID, m.threadID = p.id, p.rootID, p.threadID
		if m.rootID == "" {
			m.rootID = p.id
		}
	}
	s.msgs[m.id] = m
	ch.msgs = append(ch.msgs, m.id)
	if f != nil {
		s.files[f.key] = f
	}
	sender := wireEventSender{
		SenderID:   wireUserID{UnionID: from.UnionID, UserID: from.UserID, OpenID: from.OpenID},
		SenderType: "user", TenantKey: s.tenantKey,
	}
	return m.id, s.deliverMessageLocked(ch, m, sender, "", now)
}

// mentionsLocked is message.mentions of a message mentioning open_ids, keyed "@_user_1",
// "@_user_2", ... in order: a person with their ids and name, a bot with its open_id and its
// app's bot name. s.mu is held.
func (s *Server) mentionsLocked(helper string, openIDs []string) []wireMention {
	var out []wireMention
	for i, id := range openIDs {
		m := wireMention{Key: fmt.Sprintf("@_user_%d", i+1), TenantKey: s.tenantKey}
		if u := s.users[id]; u != nil {
			m.ID, m.Name = wireUserID{UnionID: u.UnionID, UserID: u.UserID, OpenID: u.OpenID}, u.Name
		} else if a := s.appOfBotLocked(id); a != nil {
			m.ID, m.Name = wireUserID{OpenID: a.BotOpenID}, a.botName
		} else {
			panic(fmt.Sprintf("feishutest: %s: nobody has open_id %q", helper, id))
		}
		out = append(out, m)
	}
	return out
}

// appOfBotLocked is the app whose bot has an open_id, or nil. s.mu is held.
func (s *Server) appOfBotLocked(openID string) *appState {
	for _, a := range s.apps {
		if a.BotOpenID == openID {
			return a
		}
	}
	return nil
}

// deliverMessageLocked starts the events of a message in a chat for every app (but the one
// that wrote it) whose bot is in the chat and that has an event URL, and returns the first
// event's id. s.mu is held.
func (s *Server) deliverMessageLocked(ch *chatState, m *message, sender wireEventSender, writer string, now time.Time) string {
	first := ""
	for _, appID := range s.appOrder {
		a := s.apps[appID]
		if appID == writer || !ch.hasBot(appID) || a.hook.url == "" {
			continue
		}
		ev := s.newEventLocked(a, ch, m, sender, now)
		if first == "" {
			first = ev.id
		}
		s.startDeliveryLocked(ev)
	}
	return first
}

// newEventLocked builds the im.message.receive_v1 event of a message for an app ("Receive
// message": schema 2.0; create_time in milliseconds; mentions as the message has them).
// s.mu is held.
func (s *Server) newEventLocked(a *appState, ch *chatState, m *message, sender wireEventSender, now time.Time) *eventState {
	ev := &eventState{id: randHex(32), appID: a.ID, messageID: m.id}
	ev.wire = wireEvent{
		Schema: "2.0",
		Header: wireEventHeader{EventID: ev.id, EventType: eventTypeReceive, CreateTime: millis(now),
			Token: a.hook.token, AppID: a.ID, TenantKey: s.tenantKey},
		Event: wireReceive{
			Sender: sender,
			Message: wireEventMessage{
				MessageID: m.id, RootID: m.rootID, ParentID: m.parentID, CreateTime: millis(m.at),
				UpdateTime: millis(m.at), ChatID: ch.id, ThreadID: m.threadID, ChatType: ch.kind,
				MessageType: m.msgType, Content: m.content, Mentions: m.mentions,
			},
		},
	}
	s.events[ev.id] = ev
	s.eventOrder = append(s.eventOrder, ev.id)
	return ev
}

// Redeliver POSTs an event again with the same event_id, as Feishu's at-least-once delivery
// may ("Event overview"), with its own retries. It panics on an unknown event.
func (s *Server) Redeliver(eventID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := s.events[eventID]
	if ev == nil {
		panic(fmt.Sprintf("feishutest: Redeliver: unknown event %q", eventID))
	}
	s.startDeliveryLocked(ev)
}

// Duplicate delivers the same message again under a new event_id and returns it: "Receive
// message" warns that repeated pushes happen and to deduplicate by message_id, not event_id.
// It panics on an unknown event.
func (s *Server) Duplicate(eventID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := s.events[eventID]
	if ev == nil {
		panic(fmt.Sprintf("feishutest: Duplicate: unknown event %q", eventID))
	}
	dup := &eventState{id: randHex(32), appID: ev.appID, messageID: ev.messageID, wire: ev.wire}
	dup.wire.Header.EventID = dup.id
	s.events[dup.id] = dup
	s.eventOrder = append(s.eventOrder, dup.id)
	s.startDeliveryLocked(dup)
	return dup.id
}

// startDeliveryLocked starts a deliverer for an event unless the server closes. s.mu is held.
func (s *Server) startDeliveryLocked(ev *eventState) {
	if s.life.IsClosing() {
		return
	}
	retry := s.retry
	s.life.Go(func() { s.deliver(ev, retry) })
}

// deliver POSTs an event until an attempt is answered HTTP 200 in time, retrying after each
// interval of the schedule; it gives up after the last, when the app's URL is removed, or
// when the server closes.
func (s *Server) deliver(ev *eventState, retry EventRetry) {
	for attempt := 0; attempt <= len(retry.Intervals); attempt++ {
		if attempt > 0 {
			s.life.Sleep(s.life.Context(), retry.Intervals[attempt-1])
		}
		if s.life.IsClosing() {
			return
		}
		s.mu.Lock()
		hook := s.apps[ev.appID].hook
		if hook.url == "" {
			s.mu.Unlock()
			return
		}
		ev.attempts++
		s.deliveries++
		plain, err := json.Marshal(ev.wire)
		now := s.Now()
		s.mu.Unlock()
		if err != nil {
			return // our own types always encode
		}
		status, _, err := s.postHook(hook, plain, retry.Timeout, now, true)
		if err == nil && status == http.StatusOK {
			s.mu.Lock()
			ev.delivered = true
			s.mu.Unlock()
			return
		}
	}
}

// Challenge POSTs the url_verification request to an app's event URL ({"challenge","token",
// "type":"url_verification"}, encrypted when the app has an Encrypt Key) and returns the
// challenge the URL answered within 1 second. It wraps ErrChallengeMismatch when that is not
// the challenge sent. The request is not signed: signature verification does not cover
// request-URL verification ("Receive events").
func (s *Server) Challenge(appID string) (string, error) {
	s.mu.Lock()
	a := s.apps[appID]
	var hook eventHook
	if a != nil {
		hook = a.hook
	}
	now := s.Now()
	s.mu.Unlock()
	if a == nil || hook.url == "" {
		return "", fmt.Errorf("challenge %s: no such app with an event URL", appID)
	}
	sent := randHex(16)
	plain, err := json.Marshal(wireChallenge{Challenge: sent, Token: hook.token, Type: "url_verification"})
	if err != nil {
		return "", fmt.Errorf("challenge %s: encode: %w", appID, err)
	}
	status, body, err := s.postHook(hook, plain, challengeTimeout, now, false)
	if err != nil {
		return "", fmt.Errorf("challenge %s: %w", appID, err)
	}
	if status != http.StatusOK {
		return "", fmt.Errorf("challenge %s: HTTP %d", appID, status)
	}
	var ans struct {
		Challenge string `json:"challenge"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return "", fmt.Errorf("challenge %s: decode answer: %w", appID, err)
	}
	if ans.Challenge != sent {
		return ans.Challenge, fmt.Errorf("challenge %s: answered %q, sent %q: %w", appID, ans.Challenge, sent, ErrChallengeMismatch)
	}
	return ans.Challenge, nil
}

// postHook POSTs plain JSON to a hook, as {"encrypt":...} when it has an Encrypt Key, signed
// when sign is set and it has one, within timeout. It returns the status and the answer body.
func (s *Server) postHook(hook eventHook, plain []byte, timeout time.Duration, now time.Time, sign bool) (int, []byte, error) {
	body := plain
	if hook.encryptKey != "" {
		enc, err := encryptEvent(plain, hook.encryptKey)
		if err != nil {
			return 0, nil, err
		}
		if body, err = json.Marshal(map[string]string{"encrypt": enc}); err != nil {
			return 0, nil, fmt.Errorf("encode encrypted body: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(s.life.Context(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook.url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("new request: %w", err)
	}
	req.Header.Set("Content-Type", contentTypeJSONUTF)
	if sign && hook.encryptKey != "" {
		ts, nonce := strconv.FormatInt(now.Unix(), 10), randHex(16)
		req.Header.Set(HeaderTimestamp, ts)
		req.Header.Set(HeaderNonce, nonce)
		req.Header.Set(HeaderSignature, Signature(ts, nonce, hook.encryptKey, body))
	}
	resp, err := s.hooks.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("post %s: %w", hook.url, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxHookAnswer))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("read answer: %w", err)
	}
	return resp.StatusCode, answer, nil
}

// Signature is X-Lark-Signature ("Receive events"): the hex SHA-256 of timestamp + nonce +
// encrypt key + the raw request body.
func Signature(timestamp, nonce, encryptKey string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(timestamp + nonce + encryptKey))
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// encryptEvent encrypts an event as "Send events to the developer server" describes:
// AES-256-CBC with key SHA-256(encrypt key), PKCS#7 padding, a random 16-byte IV, and
// base64(iv + ciphertext).
func encryptEvent(plain []byte, encryptKey string) (string, error) {
	key := sha256.Sum256([]byte(encryptKey))
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return "", fmt.Errorf("aes key: %w", err)
	}
	pad := aes.BlockSize - len(plain)%aes.BlockSize
	padded := append(bytes.Clone(plain), bytes.Repeat([]byte{byte(pad)}, pad)...)
	out := make([]byte, aes.BlockSize+len(padded))
	iv := out[:aes.BlockSize]
	if _, err := rand.Read(iv); err != nil {
		return "", fmt.Errorf("iv: %w", err)
	}
	cipher.NewCBCEncrypter(block, iv).CryptBlocks(out[aes.BlockSize:], padded)
	return base64.StdEncoding.EncodeToString(out), nil
}
