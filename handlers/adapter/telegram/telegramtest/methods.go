package telegramtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Text limits ("sendMessage": text 1-4096 characters; captions 0-1024 characters). Telegram
// counts UTF-16 code units after stripping leading and trailing whitespace.
const (
	maxText    = 4096
	maxCaption = 1024
)

// chatActions are the documented values of sendChatAction's action.
var chatActions = map[string]bool{
	"typing": true, "upload_photo": true, "record_video": true, "upload_video": true,
	"record_voice": true, "upload_voice": true, "upload_document": true, "choose_sticker": true,
	"find_location": true, "record_video_note": true, "upload_video_note": true,
}

// getMe answers the bot's User with the fields returned only in getMe; group privacy is
// off, so can_read_all_group_messages is true.
func (s *Server) getMe(q *request) (any, *apiError) {
	b := q.bot.Bot
	return wireMe{
		wireUser:                wireUser{ID: b.ID, IsBot: true, FirstName: b.Username, Username: b.Username},
		CanJoinGroups:           true,
		CanReadAllGroupMessages: true,
	}, nil
}

// getChat answers the ChatFullInfo of a chat the bot is in.
func (s *Server) getChat(q *request) (any, *apiError) {
	if strings.TrimSpace(q.p.str("chat_id")) == "" {
		return nil, badRequest("chat_id is empty")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.chats[q.chatID]
	if ch == nil || ch.removed[q.bot.ID] {
		return nil, badRequest("chat not found")
	}
	return wireChatFullInfo{wireChat: chatJSON(ch), MaxReactionCount: 11}, nil
}

// sendMessage sends a text message, its text read in its parse_mode (parseHTML for "HTML").
func (s *Server) sendMessage(q *request) (any, *apiError) {
	text, ents, e := checkFormatted(q.p.str("text"), q.p.str("parse_mode"))
	if e != nil {
		return nil, e
	}
	return s.sendText(q, func(m *message) {
		m.text = text
		m.setFormat(formOf(q.p.str("parse_mode")), ents)
	})
}

// sendText sends a bot's text message (sendMessage, sendRichMessage) to the chat chat_id names,
// replying and in the topic as asked, once the chat's send budget allows; show fills in what
// the message shows.
func (s *Server) sendText(q *request, show func(m *message)) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, replyTo, thread, e := s.destinationLocked(q)
	if e != nil {
		return nil, e
	}
	if e := s.spendLocked(q.bot, ch, spendSend); e != nil {
		return nil, e
	}
	m := s.addMessageLocked(ch, q.bot.ID, true)
	m.replyTo, m.thread = replyTo, thread
	show(m)
	s.publishLocked(ch, m, q.bot)
	return s.messageJSON(ch, m, 0), nil
}

// editMessageText replaces the text of one of the bot's text messages.
func (s *Server) editMessageText(q *request) (any, *apiError) {
	var text, rich string
	var doc richDoc
	var ents []Entity
	var e *apiError
	if raw := q.p.str("rich_message"); raw != "" && s.richOn() && q.p.str("text") == "" {
		rich, doc, e = readRich(raw)
	} else {
		text, ents, e = checkFormatted(q.p.str("text"), q.p.str("parse_mode"))
	}
	if e != nil {
		return nil, e
	}
	form := formOf(q.p.str("parse_mode"))
	if rich != "" {
		text, form = doc.text, "rich"
	}
	messageID, _ := q.p.int64("message_id")
	if strings.TrimSpace(q.p.str("chat_id")) == "" && messageID <= 0 {
		return nil, badRequest("message identifier is not specified")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, e := s.writableChatLocked(q)
	if e != nil {
		return nil, e
	}
	m := ch.find(int(messageID))
	if m == nil || !m.fromBot || m.from != q.bot.ID {
		return nil, badRequest("message to edit not found")
	}
	if m.media != nil {
		return nil, badRequest("there is no text in the message to edit")
	}
	if m.text == text && m.form == form && m.rich == rich && slices.Equal(m.entities, ents) {
		return nil, badRequest("message is not modified: specified new message content and reply markup are " +
			"exactly the same as a current content and reply markup of the message")
	}
	if e := s.spendLocked(q.bot, ch, spendEdit); e != nil {
		return nil, e
	}
	m.text, m.rich, m.blocks = text, rich, doc.blocks
	m.setFormat(form, ents)
	m.edits++
	m.editDate = s.Now()
	return s.messageJSON(ch, m, 0), nil
}

// sendMessageDraft streams a partial message in a private chat (Bot API 9.3+). draft_id must
// be a non-zero integer; text is 0-4096 characters, empty showing a "Thinking..." placeholder.
func (s *Server) sendMessageDraft(q *request) (any, *apiError) {
	draftID, e := checkDraftID(q.p.str("draft_id"))
	if e != nil {
		return nil, e
	}
	raw := q.p.str("text")
	if !utf8.ValidString(raw) {
		return nil, badRequest("strings must be encoded in UTF-8")
	}
	text, _, e := parseText(raw, q.p.str("parse_mode"))
	if e != nil {
		return nil, e
	}
	if utf16Len(text) > maxText {
		return nil, badRequest("message is too long")
	}
	return s.sendDraft(q, Draft{DraftID: draftID, Text: text, Form: formOf(q.p.str("parse_mode"))})
}

// sendDraft shows a bot's draft d (sendMessageDraft, sendRichMessageDraft) in the private chat
// chat_id names, in the topic as asked, once the chat's ephemeral budget allows; it fills in
// d's From, Thread and At.
func (s *Server) sendDraft(q *request, d Draft) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, e := s.writableChatLocked(q)
	if e != nil {
		return nil, e
	}
	if ch.kind != "private" {
		return nil, badRequest("TEXTDRAFT_PEER_INVALID")
	}
	thread, e := threadLocked(ch, q.p)
	if e != nil {
		return nil, e
	}
	if e := s.spendLocked(q.bot, ch, spendEphemeral); e != nil {
		return nil, e
	}
	d.From, d.Thread, d.At = q.bot.ID, thread, s.Now()
	ch.drafts = append(ch.drafts, d)
	return true, nil
}

// sendChatAction shows a chat action for 5 seconds or until the bot's next message there.
func (s *Server) sendChatAction(q *request) (any, *apiError) {
	action := q.p.str("action")
	if !chatActions[action] {
		return nil, badRequest("wrong parameter action in request")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, e := s.writableChatLocked(q)
	if e != nil {
		return nil, e
	}
	thread, e := threadLocked(ch, q.p)
	if e != nil {
		return nil, e
	}
	if e := s.spendLocked(q.bot, ch, spendEphemeral); e != nil {
		return nil, e
	}
	now := s.Now()
	ch.actions = append(ch.actions, Action{From: q.bot.ID, Action: action, Thread: thread, At: now})
	ch.typing[q.bot.ID] = now
	return true, nil
}

// mediaSender serves sendPhoto, sendDocument, sendVideo or sendAudio.
func mediaSender(kind string) handlerFunc {
	return func(s *Server, q *request) (any, *apiError) { return s.sendMedia(q, kind) }
}

// sendMedia sends a file of a kind: a new upload (a multipart file part named as the
// parameter, or "attach://<name>") or the file_id of a file Telegram has.
func (s *Server) sendMedia(q *request, kind string) (any, *apiError) {
	up, fileID, e := q.p.inputFile(kind)
	if e != nil {
		return nil, e
	}
	if up != nil {
		if e := checkUpload(kind, up); e != nil {
			return nil, e
		}
	}
	caption, e := checkCaption(q.p.str("caption"))
	if e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, replyTo, thread, e := s.destinationLocked(q)
	if e != nil {
		return nil, e
	}
	var f *storedFile
	if up == nil {
		if f = s.files[fileID]; f == nil {
			return nil, badRequest("wrong file identifier/HTTP URL specified")
		}
		if f.kind != kind {
			return nil, badRequest(fmt.Sprintf("can't use file of type %s as %s", typeName(f.kind), typeName(kind)))
		}
		if len(f.sizes) > 0 {
			f = f.sizes[len(f.sizes)-1]
		}
	}
	if e := s.spendLocked(q.bot, ch, spendSend); e != nil {
		return nil, e
	}
	if up != nil {
		f = s.newMediaLocked(kind, up.filename, up.contentType, up.data)
		if kind == "video" {
			f.width, f.height = q.p.intOr("width", 0), q.p.intOr("height", 0)
		}
		if kind == "video" || kind == "audio" {
			f.duration = q.p.intOr("duration", 0)
		}
	}
	m := s.addMessageLocked(ch, q.bot.ID, true)
	m.caption, m.media, m.replyTo, m.thread = caption, f, replyTo, thread
	s.publishLocked(ch, m, q.bot)
	return s.messageJSON(ch, m, 0), nil
}

// checkUpload applies the upload limits ("Sending files": 10 MB for photos, 50 MB for other
// files; "sendPhoto": width + height at most 10000, ratio at most 20).
func checkUpload(kind string, up *upload) *apiError {
	switch {
	case up.size > maxUpload:
		return &apiError{code: http.StatusRequestEntityTooLarge, desc: "Request Entity Too Large"}
	case up.size == 0:
		return badRequest("file must be non-empty")
	case kind != "photo":
		return nil
	case up.size > maxPhotoBytes:
		return badRequest("file is too big")
	}
	if cfg, _, err := image.DecodeConfig(bytes.NewReader(up.data)); err == nil {
		w, h := cfg.Width, cfg.Height
		if w+h > 10000 || w == 0 || h == 0 || w > 20*h || h > 20*w {
			return badRequest("PHOTO_INVALID_DIMENSIONS")
		}
	}
	return nil
}

// typeName is a file kind as the Bot API names its type.
func typeName(kind string) string {
	if kind == "" {
		return kind
	}
	return strings.ToUpper(kind[:1]) + kind[1:]
}

// inputFile finds the InputFile of a parameter: a string value is a file_id (or URL) unless
// it is "attach://<name>", which names a file part; without a value, the file part named as
// the parameter.
func (p *params) inputFile(field string) (*upload, string, *apiError) {
	v := p.str(field)
	if v != "" && !strings.HasPrefix(v, "attach://") {
		return nil, v, nil
	}
	name := field
	if rest, ok := strings.CutPrefix(v, "attach://"); ok {
		name = rest
	}
	if up := p.files[name]; up != nil {
		return up, "", nil
	}
	return nil, "", badRequest("there is no " + field + " in the request")
}

// intOr parses an integer parameter, def when absent or invalid.
func (p *params) intOr(name string, def int) int {
	if v, ok := p.int64(name); ok {
		return int(v)
	}
	return def
}

// writableChatLocked resolves chat_id for sending or editing (the Bot API's write access).
// s.mu is held.
func (s *Server) writableChatLocked(q *request) (*chatState, *apiError) {
	if strings.TrimSpace(q.p.str("chat_id")) == "" {
		return nil, badRequest("chat_id is empty")
	}
	ch := s.chats[q.chatID]
	if ch == nil {
		return nil, badRequest("chat not found")
	}
	if ch.removed[q.bot.ID] {
		switch ch.kind {
		case "group":
			return nil, forbidden("bot is not a member of the group chat")
		case "supergroup":
			return nil, forbidden("bot is not a member of the supergroup chat")
		}
		return nil, badRequest("chat not found")
	}
	if ch.blocked {
		return nil, forbidden("bot was blocked by the user")
	}
	return ch, nil
}

// destinationLocked resolves where a bot's new message goes: the chat chat_id names (written
// to as writableChatLocked allows), the message it replies to (replyToLocked) and its topic
// (threadLocked). s.mu is held.
func (s *Server) destinationLocked(q *request) (ch *chatState, replyTo, thread int, e *apiError) {
	if ch, e = s.writableChatLocked(q); e != nil {
		return nil, 0, 0, e
	}
	if replyTo, e = replyToLocked(ch, q.p); e != nil {
		return nil, 0, 0, e
	}
	if thread, e = threadLocked(ch, q.p); e != nil {
		return nil, 0, 0, e
	}
	return ch, replyTo, thread, nil
}

// replyToLocked reads reply_parameters (or the older reply_to_message_id and
// allow_sending_without_reply) and returns the message id to reply to, 0 for none.
// s.mu is held.
func replyToLocked(ch *chatState, p *params) (int, *apiError) {
	var id int64
	var allow bool
	if raw := p.str("reply_parameters"); raw != "" {
		var rp struct {
			MessageID int64 `json:"message_id"`
			Allow     bool  `json:"allow_sending_without_reply"`
		}
		if err := json.Unmarshal([]byte(raw), &rp); err != nil {
			return 0, badRequest("can't parse reply parameters JSON object")
		}
		id, allow = rp.MessageID, rp.Allow
	} else {
		id, _ = p.int64("reply_to_message_id")
		allow = p.bool("allow_sending_without_reply")
	}
	if id <= 0 {
		return 0, nil
	}
	if ch.find(int(id)) == nil {
		if allow {
			return 0, nil
		}
		return 0, badRequest("message to be replied not found")
	}
	return int(id), nil
}

// threadLocked reads message_thread_id, the forum topic to send to (API #sendmessage
// "message_thread_id": "Unique identifier for the target message thread (topic) of the forum;
// for forum supergroups only"): 0 when absent; a topic the chat does not have is refused
// "message thread not found". s.mu is held.
func threadLocked(ch *chatState, p *params) (int, *apiError) {
	id, ok := p.int64("message_thread_id")
	if !ok || id == 0 {
		return 0, nil
	}
	if t := ch.find(int(id)); !ch.forum || t == nil || t.topic == "" {
		return 0, badRequest("message thread not found")
	}
	return int(id), nil
}

// addMessageLocked appends a new message to a chat; a bot's message ends its chat action
// there. s.mu is held.
func (s *Server) addMessageLocked(ch *chatState, from int64, fromBot bool) *message {
	ch.nextMsgID++
	m := &message{id: ch.nextMsgID, from: from, fromBot: fromBot, date: s.Now()}
	ch.msgs = append(ch.msgs, m)
	if fromBot {
		delete(ch.typing, from)
	}
	return m
}

// checkFormatted validates a message text read in parse_mode mode ("" plain, "HTML"): its text
// after entity parsing, stripped, is 1-4096 characters; it returns the text and its entities.
func checkFormatted(raw, mode string) (string, []Entity, *apiError) {
	if !utf8.ValidString(raw) {
		return "", nil, badRequest("strings must be encoded in UTF-8")
	}
	text, ents, e := parseText(raw, mode)
	if e != nil {
		return "", nil, e
	}
	switch {
	case text == "":
		return "", nil, badRequest("message text is empty")
	case utf16Len(text) > maxText:
		return "", nil, badRequest("message is too long")
	}
	return text, ents, nil
}

// parseText reads a text in a parse mode: "" as it is (stripped), "HTML" by parseHTML;
// MarkdownV2 and Markdown are not modelled and answered as unsupported.
func parseText(raw, mode string) (string, []Entity, *apiError) {
	switch strings.ToLower(mode) {
	case "":
		return strings.TrimSpace(raw), nil, nil
	case "html":
		return parseHTML(raw)
	}
	return "", nil, badRequest("unsupported parse_mode")
}

// formOf is a message's form for a parse mode: "html" or "" (plain).
func formOf(mode string) string {
	if strings.EqualFold(mode, "html") {
		return "html"
	}
	return ""
}

// checkText validates a message text and returns it stripped of leading and trailing
// whitespace.
func checkText(raw string) (string, *apiError) {
	if !utf8.ValidString(raw) {
		return "", badRequest("strings must be encoded in UTF-8")
	}
	text := strings.TrimSpace(raw)
	switch {
	case text == "":
		return "", badRequest("message text is empty")
	case utf16Len(text) > maxText:
		return "", badRequest("message is too long")
	}
	return text, nil
}

// checkCaption validates a caption and returns it stripped.
func checkCaption(raw string) (string, *apiError) {
	if !utf8.ValidString(raw) {
		return "", badRequest("strings must be encoded in UTF-8")
	}
	caption := strings.TrimSpace(raw)
	if utf16Len(caption) > maxCaption {
		return "", badRequest("message caption is too long")
	}
	return caption, nil
}

// utf16Len is the length of s in UTF-16 code units, as Telegram counts characters.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// checkDraftID validates a draft_id: a non-zero integer.
func checkDraftID(raw string) (string, *apiError) {
	draftID := strings.TrimSpace(raw)
	if n, err := strconv.ParseInt(draftID, 10, 64); err != nil || n == 0 {
		return "", badRequest("draft_id must be a non-zero integer")
	}
	return draftID, nil
}
