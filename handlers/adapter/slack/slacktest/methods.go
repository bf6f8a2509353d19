package slacktest

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// visibleLocked returns a channel the calling bot is a member of, or the error for it.
// s.mu is held.
func (s *Server) visibleLocked(id string) (*channelState, string) {
	ch := s.channels[id]
	if ch == nil || ch.noBots {
		return nil, "channel_not_found"
	}
	return ch, ""
}

// authTest answers auth.test for a bot token.
func (s *Server) authTest(q *request) answer {
	return okAnswer(map[string]any{
		"url":     "https://" + s.teamDomain + ".slack.com/",
		"team":    s.teamDomain,
		"user":    q.bot.Name,
		"team_id": q.bot.TeamID,
		"user_id": q.bot.UserID,
		"bot_id":  q.bot.BotID,
	})
}

// conversationsInfo answers conversations.info.
func (s *Server) conversationsInfo(q *request) answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, e := s.visibleLocked(q.str("channel"))
	if e != "" {
		return errAnswer(e)
	}
	c := map[string]any{
		"id":         ch.id,
		"created":    ch.created.Unix(),
		"is_im":      ch.kind == "im",
		"is_channel": ch.kind == "channel" || ch.kind == "group",
		"is_group":   false, // only private channels made before March 2021 are groups
		"is_mpim":    ch.kind == "mpim",
		"is_private": ch.kind != "channel",
	}
	if ch.kind == "im" {
		c["user"] = ch.members[0].ID
		c["is_open"] = true
	} else {
		c["name"] = ch.name
		c["is_member"] = true
		c["num_members"] = len(ch.members) + len(s.botsIn(ch))
	}
	return okAnswer(map[string]any{"channel": c})
}

// usersInfo answers users.info: the user's id, name, real_name, is_bot and profile
// (display_name, real_name). An unknown user gets user_not_found.
func (s *Server) usersInfo(q *request) answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.users[q.str("user")]
	if !ok {
		return errAnswer("user_not_found")
	}
	isBot := false
	for _, b := range s.bots {
		isBot = isBot || b.UserID == u.ID
	}
	return okAnswer(map[string]any{"user": map[string]any{
		"id": u.ID, "team_id": s.teamID, "name": strings.ToLower(strings.ReplaceAll(u.Name, " ", ".")), "real_name": u.Name,
		"is_bot": isBot, "deleted": false,
		"profile": map[string]any{"real_name": u.Name, "display_name": u.Name},
	}})
}

// parseMetadata reads the metadata argument {"event_type","event_payload"}.
func parseMetadata(raw string) (*Metadata, string) {
	if raw == "" {
		return nil, ""
	}
	var m struct {
		EventType    *string         `json:"event_type"`
		EventPayload json.RawMessage `json:"event_payload"`
	}
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return nil, "invalid_metadata_format"
	}
	if m.EventType == nil || *m.EventType == "" || len(m.EventPayload) == 0 {
		return nil, "invalid_metadata_schema"
	}
	var payload map[string]any
	if err := json.Unmarshal(m.EventPayload, &payload); err != nil {
		return nil, "invalid_metadata_schema"
	}
	return &Metadata{EventType: *m.EventType, EventPayload: payload}, ""
}

// checkText applies the text and markdown_text limits.
func checkText(text, md string) string {
	if utf8.RuneCountInString(text) > maxText || utf8.RuneCountInString(md) > maxMD {
		return "msg_too_long"
	}
	return ""
}

// chatPostMessage answers chat.postMessage.
func (s *Server) chatPostMessage(q *request) answer {
	text, md := q.str("text"), q.str("markdown_text")
	if md != "" && (text != "" || q.str("blocks") != "") {
		return errAnswer("markdown_text_conflict")
	}
	if text == "" && md == "" && q.str("blocks") == "" && q.str("attachments") == "" {
		return errAnswer("no_text")
	}
	if e := checkText(text, md); e != "" {
		return errAnswer(e)
	}
	blocks, e := checkBlocks(q.str("blocks"))
	if e != "" {
		return errAnswer(e)
	}
	meta, e := parseMetadata(q.str("metadata"))
	if e != "" {
		return errAnswer(e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, e := s.visibleLocked(q.str("channel"))
	if e != "" {
		return errAnswer(e)
	}
	threadTS := q.str("thread_ts")
	if threadTS != "" && ch.findMsg(threadTS) == nil {
		return errAnswer("thread_not_found")
	}
	if text == "" {
		text = md
	}
	m := s.addBotMessageLocked(ch, q.bot, threadTS, text)
	m.metadata = meta
	m.setBlocks(blocks)
	s.botMessageEventLocked(ch, m, q.bot)
	return okAnswer(map[string]any{"channel": ch.id, "ts": m.ts, "message": s.wireMessage(m, true)})
}

// addLocked appends a message and counts it as a reply of its parent.
func (ch *channelState) addLocked(m *msgState) {
	if p := ch.findMsg(m.threadTS); p != nil {
		p.replies++
	}
	ch.msgs = append(ch.msgs, m)
}

// addBotMessageLocked appends a bot's message. A reply to a reply goes to its parent's
// thread, as Slack does. s.mu is held.
func (s *Server) addBotMessageLocked(ch *channelState, b *botState, threadTS, text string) *msgState {
	if p := ch.findMsg(threadTS); p != nil && p.threadTS != "" {
		threadTS = p.threadTS
	}
	m := &msgState{ts: s.nextTSLocked(), threadTS: threadTS, user: b.UserID, botID: b.BotID, appID: b.AppID, text: text}
	ch.addLocked(m)
	return m
}

// chatUpdate answers chat.update.
func (s *Server) chatUpdate(q *request) answer {
	text := q.str("text")
	if e := checkText(text, q.str("markdown_text")); e != "" {
		return errAnswer(e)
	}
	blocks, e := checkBlocks(q.str("blocks"))
	if e != "" {
		return errAnswer(e)
	}
	meta, e := parseMetadata(q.str("metadata"))
	if e != "" {
		return errAnswer(e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, e := s.visibleLocked(q.str("channel"))
	if e != "" {
		return errAnswer(e)
	}
	m := ch.findMsg(q.str("ts"))
	if m == nil {
		return errAnswer("message_not_found")
	}
	if m.botID != q.bot.BotID {
		return errAnswer("cant_update_message")
	}
	if text == "" && q.str("markdown_text") == "" && q.str("blocks") == "" && q.str("attachments") == "" && meta == nil {
		return errAnswer("no_text")
	}
	if text == "" {
		text = q.str("markdown_text")
	}
	if text != "" {
		m.text = text
	}
	if text != "" || blocks != nil {
		m.setBlocks(blocks) // chat.update replaces the blocks with the text
	}
	if meta != nil {
		m.metadata = meta
	}
	m.edits++
	m.editedTS = s.nextTSLocked()
	return okAnswer(map[string]any{"channel": ch.id, "ts": m.ts, "text": m.text, "message": s.wireMessage(m, true)})
}

// streamAllowed decides where chat.startStream works (README, chat.startStream).
func streamAllowed(ch *channelState, q *request) string {
	if ch.noStream {
		return "channel_type_not_supported"
	}
	if ch.kind == "im" {
		return ""
	}
	if q.str("thread_ts") == "" {
		return "channel_type_not_supported"
	}
	if q.str("recipient_user_id") == "" || q.str("recipient_team_id") == "" {
		return "invalid_arguments"
	}
	return ""
}

// chatStartStream answers chat.startStream.
func (s *Server) chatStartStream(q *request) answer {
	md := q.str("markdown_text")
	if e := checkText("", md); e != "" {
		return errAnswer(e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, e := s.visibleLocked(q.str("channel"))
	if e != "" {
		return errAnswer(e)
	}
	if e := streamAllowed(ch, q); e != "" {
		return errAnswer(e)
	}
	threadTS := q.str("thread_ts")
	if threadTS != "" && ch.findMsg(threadTS) == nil {
		return errAnswer("thread_not_found")
	}
	if rt := q.str("recipient_team_id"); rt != "" && rt != s.teamID {
		return errAnswer("team_not_found")
	}
	if ru := q.str("recipient_user_id"); ru != "" {
		if _, ok := s.users[ru]; !ok {
			return errAnswer("user_not_found")
		}
	}
	m := s.addBotMessageLocked(ch, q.bot, threadTS, md)
	m.streaming = true
	return okAnswer(map[string]any{"channel": ch.id, "ts": m.ts})
}

// streamingMsgLocked finds the calling bot's streaming message. s.mu is held.
func (s *Server) streamingMsgLocked(q *request) (*channelState, *msgState, string) {
	ch, e := s.visibleLocked(q.str("channel"))
	if e != "" {
		return nil, nil, e
	}
	m := ch.findMsg(q.str("ts"))
	if m == nil {
		return nil, nil, "message_not_found"
	}
	if m.botID != q.bot.BotID {
		return nil, nil, "cant_update_message"
	}
	if !m.streaming {
		return nil, nil, "message_not_in_streaming_state"
	}
	return ch, m, ""
}

// chatAppendStream answers chat.appendStream: markdown_text is appended to the text so far.
func (s *Server) chatAppendStream(q *request) answer {
	md := q.str("markdown_text")
	if md == "" && q.str("chunks") == "" {
		return errAnswer("invalid_arguments")
	}
	if e := checkText("", md); e != "" {
		return errAnswer(e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, m, e := s.streamingMsgLocked(q)
	if e != "" {
		return errAnswer(e)
	}
	if utf8.RuneCountInString(m.text)+utf8.RuneCountInString(md) > maxText {
		return errAnswer("msg_too_long")
	}
	m.text += md
	m.appends++
	return okAnswer(map[string]any{"channel": ch.id, "ts": m.ts})
}

// chatStopStream answers chat.stopStream: a last markdown_text is appended, metadata set, and
// the message leaves the streaming state.
func (s *Server) chatStopStream(q *request) answer {
	md := q.str("markdown_text")
	if e := checkText("", md); e != "" {
		return errAnswer(e)
	}
	meta, e := parseMetadata(q.str("metadata"))
	if e != "" {
		return errAnswer(e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, m, e := s.streamingMsgLocked(q)
	if e != "" {
		return errAnswer(e)
	}
	m.text += md
	if meta != nil {
		m.metadata = meta
	}
	m.streaming = false
	return okAnswer(map[string]any{"channel": ch.id, "ts": m.ts, "message": s.wireMessage(m, true)})
}

// setStatus answers assistant.threads.setStatus.
func (s *Server) setStatus(q *request) answer {
	if _, ok := q.p["status"]; !ok {
		return errAnswer("invalid_arguments")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, e := s.visibleLocked(q.str("channel_id"))
	if e != "" {
		return errAnswer(e)
	}
	threadTS := q.str("thread_ts")
	if threadTS == "" || ch.findMsg(threadTS) == nil {
		return errAnswer("invalid_thread_ts")
	}
	ch.statuses[threadTS] = append(ch.statuses[threadTS], Status{Text: q.str("status"), At: s.Now()})
	return okAnswer(nil)
}

// conversationsHistory answers conversations.history: top-level messages, newest first.
func (s *Server) conversationsHistory(q *request) answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, e := s.visibleLocked(q.str("channel"))
	if e != "" {
		return errAnswer(e)
	}
	var list []*msgState
	for i := len(ch.msgs) - 1; i >= 0; i-- {
		m := ch.msgs[i]
		if m.threadTS == "" || m.threadTS == m.ts {
			list = append(list, m)
		}
	}
	return s.page(q, list, maxLimit)
}

// conversationsReplies answers conversations.replies: the parent, then its replies, oldest
// first.
func (s *Server) conversationsReplies(q *request) answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, e := s.visibleLocked(q.str("channel"))
	if e != "" {
		return errAnswer(e)
	}
	parent := ch.findMsg(q.str("ts"))
	if parent == nil {
		return errAnswer("thread_not_found")
	}
	if parent.threadTS != "" {
		parent = ch.findMsg(parent.threadTS)
	}
	list := []*msgState{parent}
	for _, m := range ch.msgs {
		if m.threadTS == parent.ts && m != parent {
			list = append(list, m)
		}
	}
	return s.page(q, list, maxReplyL)
}

// page applies oldest, latest, inclusive, limit and cursor to messages in answer order.
// s.mu is held.
func (s *Server) page(q *request, list []*msgState, maxL int) answer {
	oldest, latest := q.str("oldest"), q.str("latest")
	incl := q.bool("inclusive")
	var kept []*msgState
	for _, m := range list {
		if oldest != "" && (m.ts < oldest || (!incl && m.ts == oldest)) {
			continue
		}
		if latest != "" && (m.ts > latest || (!incl && m.ts == latest)) {
			continue
		}
		kept = append(kept, m)
	}
	limit := defLimit
	if v, err := strconv.Atoi(q.str("limit")); err == nil && v > 0 {
		limit = min(v, maxL)
	}
	start := 0
	if c := q.str("cursor"); c != "" {
		raw, err := base64.StdEncoding.DecodeString(c)
		after, ok := strings.CutPrefix(string(raw), "next_ts:")
		if err != nil || !ok {
			return errAnswer("invalid_cursor")
		}
		start = len(kept)
		for i, m := range kept {
			if m.ts == after {
				start = i
				break
			}
		}
	}
	end := min(start+limit, len(kept))
	meta := q.bool("include_all_metadata")
	out := make([]map[string]any, 0, end-start)
	for _, m := range kept[start:end] {
		out = append(out, s.wireMessage(m, meta))
	}
	fields := map[string]any{"messages": out, "has_more": end < len(kept)}
	if end < len(kept) {
		fields["response_metadata"] = map[string]any{"next_cursor": base64.StdEncoding.EncodeToString([]byte("next_ts:" + kept[end].ts))}
	} else {
		fields["response_metadata"] = map[string]any{"next_cursor": ""}
	}
	return okAnswer(fields)
}

// wireMessage renders a message as the Web API does; metadata only when asked for. s.mu is
// held.
func (s *Server) wireMessage(m *msgState, withMeta bool) map[string]any {
	w := map[string]any{"type": "message", "ts": m.ts, "text": m.text, "user": m.user, "team": s.teamID}
	if m.botID != "" {
		w["bot_id"] = m.botID
		w["app_id"] = m.appID
	}
	if m.subtype != "" {
		w["subtype"] = m.subtype
	}
	if m.clientMsgID != "" {
		w["client_msg_id"] = m.clientMsgID
	}
	if m.threadTS != "" {
		w["thread_ts"] = m.threadTS
	}
	if len(m.blocks) > 0 {
		w["blocks"] = m.blocks
	}
	if m.editedTS != "" {
		w["edited"] = map[string]any{"user": m.user, "ts": m.editedTS}
	}
	if withMeta && m.metadata != nil {
		w["metadata"] = map[string]any{"event_type": m.metadata.EventType, "event_payload": m.metadata.EventPayload}
	}
	if len(m.files) > 0 {
		var fs []map[string]any
		for _, f := range m.files {
			fs = append(fs, s.wireFile(f))
		}
		w["files"] = fs
		w["upload"] = true
	}
	if m.replies > 0 {
		w["thread_ts"] = m.ts
		w["reply_count"] = m.replies
	}
	return w
}

// setBlocks gives a message its blocks (nil: none).
func (m *msgState) setBlocks(b *checkedBlocks) {
	m.blocks, m.markdown = nil, ""
	if b != nil {
		m.blocks, m.markdown = b.raw, b.markdown
	}
}
