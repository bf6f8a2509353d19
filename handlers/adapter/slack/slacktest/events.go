package slacktest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// eventState is one event for one app: its event_callback payload and delivery state.
// Guarded by Server.mu.
type eventState struct {
	id       string
	bot      *botState
	payload  []byte // the event_callback JSON
	envelope string // envelope_id of its Socket Mode envelopes
	attempts int    // deliveries tried, socket and HTTP
	acked    bool   // acknowledged on a socket or answered 2xx over HTTP
	waiting  chan struct{}
}

// EventStatus reports how an event fared for the apps that got it: attempts tried in all,
// and whether every app acknowledged it (socket) or answered 2xx (HTTP).
func (s *Server) EventStatus(eventID string) (attempts int, delivered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	evs := s.events[eventID]
	delivered = len(evs) > 0
	for _, ev := range evs {
		attempts += ev.attempts
		delivered = delivered && ev.acked
	}
	return attempts, delivered
}

// Unacknowledged counts the events sent to bot's app not yet acknowledged (socket) or
// answered 2xx (HTTP): 0 once it took everything sent to it.
func (s *Server) Unacknowledged(bot Bot) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, evs := range s.events {
		for _, ev := range evs {
			if ev.bot.AppID == bot.AppID && !ev.acked {
				n++
			}
		}
	}
	return n
}

// EventDeliveries counts delivery attempts of events, Socket Mode envelopes and Events API
// requests, failed ones and retries included.
func (s *Server) EventDeliveries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deliveries
}

// SetEventURL sets the Events API Request URL of every app. signingSecret signs the requests;
// "" means each app's own Bot.SigningSecret. An empty url removes it.
func (s *Server) SetEventURL(url, signingSecret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eventURL, s.eventSecret = url, signingSecret
	s.wakeRoutesLocked()
}

// SetSocketMode turns Socket Mode on or off for every app. On, events go only to the app's
// Socket Mode connections and wait for one to be open; off, they go to the event URL.
func (s *Server) SetSocketMode(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.socketMode = on
	s.wakeRoutesLocked()
}

// wakeRoutesLocked wakes deliverers waiting for a route. s.mu is held.
func (s *Server) wakeRoutesLocked() {
	close(s.route)
	s.route = make(chan struct{})
}

// Post makes a person post text in a channel, in the thread of threadTS when it is not "".
// Every bot member gets a message event. It returns the message ts and the event_id.
func (s *Server) Post(channel string, from User, text, threadTS string) (ts, eventID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.mustChannel(channel, "Post")
	m := s.addPersonMessageLocked(ch, from, text, threadTS)
	m.blocks = textBlocks(text)
	return m.ts, s.messageEventLocked(ch, m, nil)
}

// PostRich makes a person post a formatted message, as Slack's composer sends one: blocks are
// its rich_text blocks (a JSON array: rich_text_section, rich_text_list, rich_text_preformatted,
// rich_text_quote with their elements) and text the plain rendering Slack puts beside them
// (mrkdwn). Every bot member gets a message event with both. It returns the message ts and the
// event_id.
func (s *Server) PostRich(channel string, from User, text string, blocks json.RawMessage, threadTS string) (ts, eventID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.mustChannel(channel, "PostRich")
	if !json.Valid(blocks) {
		panic("slacktest: PostRich: blocks are not JSON")
	}
	m := s.addPersonMessageLocked(ch, from, text, threadTS)
	m.blocks = append(json.RawMessage(nil), blocks...)
	return m.ts, s.messageEventLocked(ch, m, nil)
}

// PostFile makes a person share a file in a channel: a message with subtype file_share whose
// files have url_private on the fake. Every bot member gets a message event.
func (s *Server) PostFile(channel string, from User, name string, data []byte) (ts, eventID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.mustChannel(channel, "PostFile")
	f := &fileState{
		id: "F" + randID(10), name: name, title: name, mime: mimeFor(name, ""), length: len(data),
		data: append([]byte(nil), data...), uploaded: true, user: from.ID, created: s.Now(),
	}
	s.files[f.id] = f
	m := s.addPersonMessageLocked(ch, from, "", "")
	m.subtype = "file_share"
	m.files = []*fileState{f}
	return m.ts, s.messageEventLocked(ch, m, map[string]any{"subtype": "file_share", "upload": false, "display_as_bot": false})
}

func (s *Server) addPersonMessageLocked(ch *channelState, from User, text, threadTS string) *msgState {
	if threadTS != "" {
		p := ch.findMsg(threadTS)
		if p == nil {
			panic(fmt.Sprintf("slacktest: Post: no message %s in %s", threadTS, ch.id))
		}
		if p.threadTS != "" {
			threadTS = p.threadTS
		}
	}
	m := &msgState{ts: s.nextTSLocked(), threadTS: threadTS, user: from.ID, text: text, clientMsgID: uuid()}
	ch.addLocked(m)
	return m
}

// messageEventLocked builds the message event of a person's message and starts its delivery
// to every bot member, and an app_mention event to each bot it mentions. s.mu is held.
func (s *Server) messageEventLocked(ch *channelState, m *msgState, extra map[string]any) string {
	ev := map[string]any{
		"type":          "message",
		"channel":       ch.id,
		"user":          m.user,
		"text":          m.text,
		"ts":            m.ts,
		"event_ts":      m.ts,
		"client_msg_id": m.clientMsgID,
		"channel_type":  ch.kind,
		"team":          s.teamID,
	}
	s.threadFieldsLocked(ch, m, ev)
	if len(m.blocks) > 0 {
		ev["blocks"] = m.blocks
	}
	if len(m.files) > 0 {
		var fs []map[string]any
		for _, f := range m.files {
			fs = append(fs, s.wireFile(f))
		}
		ev["files"] = fs
	}
	for k, v := range extra {
		ev[k] = v
	}
	id := s.sendEventLocked(ev, s.botsIn(ch))
	mention := map[string]any{"client_msg_id": m.clientMsgID}
	if len(m.blocks) > 0 {
		mention["blocks"] = m.blocks
	}
	s.mentionEventsLocked(ch, m, mention)
	return id
}

// botMessageEventLocked starts the delivery of the message event of a bot's message
// (chat.postMessage) to every bot member, its author included, and an app_mention event to each
// bot it mentions. An app's message carries bot_id, app_id and bot_profile besides the bot
// user's id, and no subtype ("message" event: bot_id; "Bot users": messages posted with a bot
// token); the app gets its own messages as events too. s.mu is held.
func (s *Server) botMessageEventLocked(ch *channelState, m *msgState, b *botState) string {
	ev := map[string]any{
		"type":         "message",
		"channel":      ch.id,
		"user":         m.user,
		"bot_id":       b.BotID,
		"app_id":       b.AppID,
		"bot_profile":  map[string]any{"id": b.BotID, "app_id": b.AppID, "name": b.Name, "team_id": s.teamID},
		"text":         m.text,
		"ts":           m.ts,
		"event_ts":     m.ts,
		"channel_type": ch.kind,
		"team":         s.teamID,
	}
	s.threadFieldsLocked(ch, m, ev)
	id := s.sendEventLocked(ev, s.botsIn(ch))
	s.mentionEventsLocked(ch, m, map[string]any{"bot_id": b.BotID})
	return id
}

// threadFieldsLocked adds a reply's thread_ts and parent_user_id to its event. s.mu is held.
func (s *Server) threadFieldsLocked(ch *channelState, m *msgState, ev map[string]any) {
	if m.threadTS != "" {
		ev["thread_ts"] = m.threadTS
		if p := ch.findMsg(m.threadTS); p != nil {
			ev["parent_user_id"] = p.user
		}
	}
}

// mentionEventsLocked sends an app_mention event, an event of its own, to each bot member whose
// user is mentioned ("<@U…>") in a message outside direct messages ("app_mention": "Messages
// sent to your app in direct message conversations are not dispatched via app_mention"). A
// channel message that mentions a bot thus reaches it twice: as a message event and as an
// app_mention with the same ts. s.mu is held.
func (s *Server) mentionEventsLocked(ch *channelState, m *msgState, extra map[string]any) {
	if ch.kind == "im" {
		return
	}
	for _, b := range s.botsIn(ch) {
		if !strings.Contains(m.text, "<@"+b.UserID+">") {
			continue
		}
		ev := map[string]any{
			"type":     "app_mention",
			"user":     m.user,
			"text":     m.text,
			"ts":       m.ts,
			"channel":  ch.id,
			"event_ts": m.ts,
			"team":     s.teamID,
		}
		if m.threadTS != "" {
			ev["thread_ts"] = m.threadTS
		}
		for k, v := range extra {
			ev[k] = v
		}
		s.sendEventLocked(ev, []*botState{b})
	}
}

// sendEventLocked wraps an event in its event_callback for each app in to and starts the
// deliveries; every app gets the same event_id, which it returns. s.mu is held.
func (s *Server) sendEventLocked(ev map[string]any, to []*botState) string {
	id := "Ev" + randID(10)
	now := s.Now()
	for _, b := range to {
		body, err := json.Marshal(map[string]any{
			"token":      b.verification,
			"team_id":    s.teamID,
			"api_app_id": b.AppID,
			"event":      ev,
			"type":       "event_callback",
			"event_id":   id,
			"event_time": now.Unix(),
			"authorizations": []map[string]any{{
				"enterprise_id": nil, "team_id": s.teamID, "user_id": b.UserID,
				"is_bot": true, "is_enterprise_install": false,
			}},
			"is_ext_shared_channel": false,
			"event_context":         "4-" + randAlnum(40),
		})
		if err != nil {
			panic("slacktest: marshal event: " + err.Error()) // only maps of strings and numbers
		}
		es := &eventState{id: id, bot: b, payload: body, envelope: uuid()}
		s.events[id] = append(s.events[id], es)
		s.startDeliveryLocked(es, "")
	}
	return id
}

// PostAsBot makes a bot post text in a channel (in the thread of threadTS when it is not ""),
// as its chat.postMessage would: every bot member gets the message event. It returns the
// message ts and the event_id.
func (s *Server) PostAsBot(channel string, bot Bot, text, threadTS string) (ts, eventID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.mustChannel(channel, "PostAsBot")
	b := s.tokens[bot.Token]
	if b == nil {
		panic("slacktest: PostAsBot: unknown bot " + bot.Name)
	}
	if threadTS != "" && ch.findMsg(threadTS) == nil {
		panic(fmt.Sprintf("slacktest: PostAsBot: no message %s in %s", threadTS, ch.id))
	}
	m := s.addBotMessageLocked(ch, b, threadTS, text)
	return m.ts, s.botMessageEventLocked(ch, m, b)
}

// Redeliver delivers an event again to every app that got it, as a retry: retry_attempt (or
// X-Slack-Retry-Num) counts on from the attempts so far, with the reason of a timeout.
func (s *Server) Redeliver(eventID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	evs := s.events[eventID]
	if len(evs) == 0 {
		panic(fmt.Sprintf("slacktest: Redeliver: unknown event %q", eventID))
	}
	for _, ev := range evs {
		ev.acked = false
		s.startDeliveryLocked(ev, "timeout")
	}
}

// startDeliveryLocked starts a deliverer for an event unless the server is closing. s.mu is
// held.
func (s *Server) startDeliveryLocked(ev *eventState, reason string) {
	if s.life.IsClosing() {
		return
	}
	s.life.Go(func() { s.deliver(ev, reason) })
}

// deliver tries an event, then retries it after the Timing.Retries waits until it is
// acknowledged, the retries run out, the receiver asks for no retry or the server closes.
func (s *Server) deliver(ev *eventState, reason string) {
	s.mu.Lock()
	retries := append([]time.Duration(nil), s.timing.Retries...)
	s.mu.Unlock()
	for n := 0; ; n++ {
		ok, why, stop := s.attempt(ev, reason)
		if ok || stop || n >= len(retries) {
			return
		}
		reason = why
		t := time.NewTimer(retries[n])
		select {
		case <-t.C:
		case <-s.life.Closing():
			t.Stop()
			return
		}
	}
}

// attempt delivers an event once, by Socket Mode or to the event URL, waiting for a route
// when there is none. reason is the retry reason, "" for a first delivery. It reports
// success, the failure's retry reason, and whether to stop.
func (s *Server) attempt(ev *eventState, reason string) (ok bool, why string, stop bool) {
	for {
		s.mu.Lock()
		select {
		case <-s.life.Closing():
			s.mu.Unlock()
			return false, "", true
		default:
		}
		if s.socketMode {
			if c := ev.bot.pickConn(); c != nil {
				return s.attemptSocket(ev, c, reason) // unlocks
			}
		} else if s.eventURL != "" {
			return s.attemptHTTP(ev, reason) // unlocks
		}
		wake := s.route
		s.mu.Unlock()
		select {
		case <-wake:
		case <-s.life.Closing():
			return false, "", true
		}
	}
}

// attemptSocket sends an events_api envelope and waits for its acknowledgement. s.mu is held
// on entry and released.
func (s *Server) attemptSocket(ev *eventState, c *sockConn, reason string) (bool, string, bool) {
	retry := ev.attempts
	ev.attempts++
	s.deliveries++
	wait := make(chan struct{})
	ev.waiting = wait
	s.envelopes[ev.envelope] = ev
	timeout := s.timing.AckTimeout
	env := map[string]any{
		"envelope_id":              ev.envelope,
		"type":                     "events_api",
		"accepts_response_payload": false,
		"retry_attempt":            retry,
		"retry_reason":             reason,
		"payload":                  json.RawMessage(ev.payload),
	}
	s.mu.Unlock()

	b, _ := json.Marshal(env) // a map of strings, numbers and raw JSON
	ctx, cancel := context.WithTimeout(s.life.Context(), timeout)
	defer cancel()
	_ = c.conn.Write(ctx, websocket.MessageText, b) // a failed write counts as unacknowledged
	select {
	case <-wait:
	case <-ctx.Done():
	case <-c.done:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.waiting == wait {
		ev.waiting = nil
		delete(s.envelopes, ev.envelope)
	}
	if ev.acked {
		return true, "", false
	}
	select {
	case <-s.life.Closing():
		return false, "", true
	default:
	}
	return false, "timeout", false
}

// ackLocked records the acknowledgement of an envelope. s.mu is held.
func (s *Server) ackLocked(envelopeID string) {
	ev := s.envelopes[envelopeID]
	if ev == nil {
		return
	}
	ev.acked = true
	delete(s.envelopes, envelopeID)
	if ev.waiting != nil {
		close(ev.waiting)
		ev.waiting = nil
	}
}

// attemptHTTP POSTs an event to the Request URL, signed. s.mu is held on entry and released.
func (s *Server) attemptHTTP(ev *eventState, reason string) (bool, string, bool) {
	retry := ev.attempts
	ev.attempts++
	s.deliveries++
	target, secret := s.eventURL, s.eventSecret
	if secret == "" {
		secret = ev.bot.SigningSecret
	}
	timeout := s.timing.EventTimeout
	s.mu.Unlock()

	hdr := http.Header{}
	if retry > 0 {
		hdr.Set("X-Slack-Retry-Num", strconv.Itoa(retry))
		hdr.Set("X-Slack-Retry-Reason", httpReason(reason))
	}
	status, resp, err := s.post(target, secret, ev.payload, hdr, timeout)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil && status/100 == 2:
		ev.acked = true
		return true, "", false
	case errors.Is(err, context.DeadlineExceeded):
		return false, "http_timeout", false
	case err != nil:
		select {
		case <-s.life.Closing():
			return false, "", true
		default:
		}
		return false, "connection_failed", false
	default:
		return false, "http_error", resp.Get("X-Slack-No-Retry") == "1"
	}
}

// httpReason maps a retry reason to the Events API's names.
func httpReason(r string) string {
	if r == "timeout" {
		return "http_timeout"
	}
	return r
}

// post sends a signed Events API request and returns the answer's status and headers.
func (s *Server) post(target, secret string, body []byte, hdr http.Header, timeout time.Duration) (int, http.Header, error) {
	ctx, cancel := context.WithTimeout(s.life.Context(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("event request: %w", err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)")
	req.Header.Set("X-Slack-Request-Timestamp", ts)
	req.Header.Set("X-Slack-Signature", Sign(secret, ts, body))
	resp, err := s.hookClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil, fmt.Errorf("post event: %w", context.DeadlineExceeded)
		}
		return 0, nil, fmt.Errorf("post event: %w", err)
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if err != nil && ctx.Err() != nil {
		return 0, nil, fmt.Errorf("read event answer: %w", context.DeadlineExceeded)
	}
	return resp.StatusCode, resp.Header, nil
}

// Sign is the X-Slack-Signature of a request ("Verifying requests from Slack"):
// "v0=" + hex(HMAC-SHA256(signingSecret, "v0:" + timestamp + ":" + body)).
func Sign(signingSecret, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(signingSecret))
	_, _ = io.WriteString(mac, "v0:"+timestamp+":")
	_, _ = mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// UrlVerification posts a url_verification request to the event URL, signed as events are,
// and returns the challenge sent and the one answered: the "challenge" of a JSON answer, of an
// application/x-www-form-urlencoded answer, or a text/plain body. err is set when the request
// fails or the answer is not 2xx.
func (s *Server) UrlVerification() (challenge, answer string, err error) {
	s.mu.Lock()
	target, secret := s.eventURL, s.eventSecret
	var token string
	if len(s.bots) > 0 {
		token = s.bots[0].verification
		if secret == "" {
			secret = s.bots[0].SigningSecret
		}
	}
	timeout := s.timing.EventTimeout
	s.mu.Unlock()
	if target == "" {
		return "", "", errors.New("url_verification: no event URL set")
	}
	challenge = randAlnum(48)
	body, _ := json.Marshal(map[string]string{"token": token, "challenge": challenge, "type": "url_verification"})
	ctx, cancel := context.WithTimeout(s.life.Context(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return challenge, "", fmt.Errorf("url_verification request: %w", err)
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Slack-Request-Timestamp", ts)
	req.Header.Set("X-Slack-Signature", Sign(secret, ts, body))
	resp, err := s.hookClient.Do(req)
	if err != nil {
		return challenge, "", fmt.Errorf("url_verification: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return challenge, "", fmt.Errorf("url_verification: read answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return challenge, "", fmt.Errorf("url_verification: answer %s", resp.Status)
	}
	ct := resp.Header.Get("Content-Type")
	switch {
	case strings.HasPrefix(ct, "application/json"):
		var v struct {
			Challenge string `json:"challenge"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return challenge, "", fmt.Errorf("url_verification: decode answer: %w", err)
		}
		return challenge, v.Challenge, nil
	case strings.HasPrefix(ct, "application/x-www-form-urlencoded"):
		vals, err := url.ParseQuery(string(raw))
		if err != nil {
			return challenge, "", fmt.Errorf("url_verification: decode answer: %w", err)
		}
		return challenge, vals.Get("challenge"), nil
	default:
		return challenge, strings.TrimSpace(string(raw)), nil
	}
}

// uuid returns a random RFC 4122 version 4 UUID, the shape of envelope_id and client_msg_id.
func uuid() string {
	a, b := rand.Uint64(), rand.Uint64()
	a = (a &^ (0xf << 12)) | (4 << 12)
	b = (b &^ (0x3 << 62)) | (0x2 << 62)
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", a>>32, (a>>16)&0xffff, a&0xffff, b>>48, b&0xffffffffffff)
}
