package feishutest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Message limits ("Send message", request body).
const (
	maxTextContent = 150 << 10 // "a text message request body cannot exceed 150 KB"
	maxRichContent = 30 << 10  // "card and rich text messages cannot exceed 30 KB"
	maxMsgUUID     = 50        // uuid: at most 50 characters
	uuidWindow     = time.Hour // "at most one message within 1 hour" per uuid
)

// invalidParam is the IM API's parameter error, 230001, with the ext the "How to resolve error
// 230001" page lists.
func invalidParam(ext string) *apiError {
	return badRequest(230001, "Your request contains an invalid request parameter, ext="+ext+".")
}

// cardContentError is the IM API's 230099 with a card sub-code ("Send message", 230099
// sub-error codes).
func cardContentError(code int, msg string) *apiError {
	return badRequest(230099, fmt.Sprintf("Failed to create card content, ext=ErrCode: %d; ErrMsg: %s; ", code, msg))
}

// sendIn is the request body of "Send message" and "Reply message".
type sendIn struct {
	ReceiveID     string          `json:"receive_id"`
	MsgType       string          `json:"msg_type"`
	Content       json.RawMessage `json:"content"`
	UUID          string          `json:"uuid"`
	ReplyInThread bool            `json:"reply_in_thread"`
}

// decodeSend reads a send or reply body; content must be a JSON string.
func decodeSend(body []byte) (sendIn, string, *apiError) {
	var in sendIn
	if err := json.Unmarshal(body, &in); err != nil {
		return in, "", invalidParam("invalid request body")
	}
	var content string
	if err := json.Unmarshal(in.Content, &content); err != nil {
		return in, "", invalidParam("invalid message content. validate content fail")
	}
	if utf8.RuneCountInString(in.UUID) > maxMsgUUID {
		return in, "", invalidParam("invalid uuid")
	}
	return in, content, nil
}

// sendMessage answers "Send message" (open.feishu.cn/document/server-docs/im-v1/message/create).
// receive_id_type is chat_id, open_id, union_id or user_id; a person's id finds (or opens)
// the p2p chat with the bots. A uuid sent again within an hour of its message answers that
// same message and sends nothing.
func (s *Server) sendMessage(q *request) (any, *apiError) {
	in, content, e := decodeSend(q.body)
	if e != nil {
		return nil, e
	}
	idType := q.r.URL.Query().Get("receive_id_type")
	switch idType {
	case "chat_id", "open_id", "union_id", "user_id", "email":
	default:
		return nil, invalidParam("invalid receive_id_type")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	if m := s.dedupLocked(q.app, in.UUID, now); m != nil {
		return s.wireMessageLocked(m), nil
	}
	ch, e := s.receiverChatLocked(idType, in.ReceiveID)
	if e != nil {
		return nil, e
	}
	if e := botInChat(ch, q.app.ID); e != nil {
		return nil, e
	}
	m, e := s.buildMessageLocked(q.app, in.MsgType, content)
	if e != nil {
		return nil, e
	}
	if e := s.spendChatLocked(ch.id, now); e != nil {
		return nil, e
	}
	s.addBotMessageLocked(q.app, ch, m, in.UUID, now)
	return s.wireMessageLocked(m), nil
}

// replyMessage answers "Reply message" (open.feishu.cn/document/server-docs/im-v1/message/reply):
// the reply's parent_id is the replied message and its root_id the root of that message's
// tree. In a thread (reply_in_thread, or a message already in one) parent_id and root_id are
// the thread's root message and thread_id is set.
func (s *Server) replyMessage(q *request) (any, *apiError) {
	in, content, e := decodeSend(q.body)
	if e != nil {
		return nil, e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	if m := s.dedupLocked(q.app, in.UUID, now); m != nil {
		return s.wireMessageLocked(m), nil
	}
	parent := s.msgs[q.params[routeParamMessage]]
	if parent == nil {
		return nil, invalidParam("invalid message_id")
	}
	ch := s.chats[parent.chatID]
	if e := botInChat(ch, q.app.ID); e != nil {
		return nil, e
	}
	m, e := s.buildMessageLocked(q.app, in.MsgType, content)
	if e != nil {
		return nil, e
	}
	if e := s.spendChatLocked(ch.id, now); e != nil {
		return nil, e
	}
	root := parent.rootID
	if root == "" {
		root = parent.id
	}
	switch {
	case parent.threadID != "":
		m.threadID, m.rootID, m.parentID = parent.threadID, root, root
	case in.ReplyInThread:
		parent.threadID = "omt_" + randHex(12)
		m.threadID, m.rootID, m.parentID = parent.threadID, parent.id, parent.id
	default:
		m.parentID, m.rootID = parent.id, root
	}
	s.addBotMessageLocked(q.app, ch, m, in.UUID, now)
	return s.wireMessageLocked(m), nil
}

// botInChat answers 230002 when the app's bot is not in a group ("The bot can not be outside
// the group.") and 230013 in a p2p chat ("Bot has NO availability to this user.").
func botInChat(ch *chatState, appID string) *apiError {
	if ch.hasBot(appID) {
		return nil
	}
	if ch.kind == "p2p" {
		return badRequest(230013, "Bot has NO availability to this user.")
	}
	return badRequest(230002, "The bot can not be outside the group.")
}

// dedupLocked returns the message an app sent with a uuid less than an hour ago, or nil.
// s.mu is held.
func (s *Server) dedupLocked(app *appState, uuid string, now time.Time) *message {
	if uuid == "" {
		return nil
	}
	m := s.msgs[app.uuids[uuid]]
	if m == nil || !now.Before(m.at.Add(uuidWindow)) {
		return nil
	}
	return m
}

// receiverChatLocked finds the chat of a receive_id. s.mu is held.
func (s *Server) receiverChatLocked(idType, id string) (*chatState, *apiError) {
	if idType == "chat_id" {
		ch := s.chats[id]
		if ch == nil {
			return nil, invalidParam("invalid receive_id")
		}
		return ch, nil
	}
	var u *User
	for _, cand := range s.users {
		if (idType == "open_id" && cand.OpenID == id) || (idType == "union_id" && cand.UnionID == id) ||
			(idType == "user_id" && cand.UserID == id) {
			u = cand
			break
		}
	}
	if u == nil || id == "" { // the fake's persons have no e-mail address
		return nil, invalidParam("invalid receive_id")
	}
	for _, cid := range s.chatOrder {
		if ch := s.chats[cid]; ch.kind == "p2p" && ch.members[0] == u.OpenID {
			return ch, nil
		}
	}
	ch := &chatState{id: "oc_" + randHex(32), kind: "p2p", members: []string{u.OpenID}, removed: map[string]bool{}}
	s.chats[ch.id] = ch
	s.chatOrder = append(s.chatOrder, ch.id)
	return ch, nil
}

// buildMessageLocked validates content for a msg_type ("Send message content") and returns
// the message without its chat and ids. s.mu is held.
func (s *Server) buildMessageLocked(app *appState, msgType, content string) (*message, *apiError) {
	m := &message{msgType: msgType, content: content}
	tooLong := badRequest(230025, "The length of the message content reaches its limit.")
	invalidContent := invalidParam("invalid message content. validate content fail")
	switch msgType {
	case "text":
		if len(content) > maxTextContent {
			return nil, tooLong
		}
		var t struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal([]byte(content), &t); err != nil || t.Text == nil {
			return nil, invalidContent
		}
		m.text = *t.Text
	case "post":
		if len(content) > maxRichContent {
			return nil, tooLong
		}
		text, ok := postText(content)
		if !ok {
			return nil, invalidContent
		}
		m.text = text
	case "interactive":
		c, e := s.messageCardLocked(app, content)
		if e != nil {
			return nil, e
		}
		m.card = c
	case "image":
		var t struct {
			ImageKey string `json:"image_key"`
		}
		if err := json.Unmarshal([]byte(content), &t); err != nil {
			return nil, invalidContent
		}
		f := s.files[t.ImageKey]
		if f == nil || f.kind != "image" {
			return nil, invalidParam("invalid image_key")
		}
		if f.owner != app.ID {
			return nil, badRequest(230017, "Bot is NOT the owner of the resource.")
		}
		m.file = f
	case "file", "audio", "media":
		var t struct {
			FileKey string `json:"file_key"`
		}
		if err := json.Unmarshal([]byte(content), &t); err != nil {
			return nil, invalidContent
		}
		f := s.files[t.FileKey]
		if f == nil || f.kind != "file" {
			return nil, invalidParam("invalid file_key")
		}
		if f.owner != app.ID {
			return nil, badRequest(230017, "Bot is NOT the owner of the resource.")
		}
		want := map[string]string{"opus": "audio", "mp4": "media"}[f.fileType]
		if want == "" {
			want = "file"
		}
		if want != msgType {
			return nil, badRequest(230055, "The type of file upload does not match the type of message being sent.")
		}
		m.file = f
	case "sticker", "share_chat", "share_user", "system":
		if !json.Valid([]byte(content)) {
			return nil, invalidContent
		}
	default:
		return nil, invalidParam("invalid msg_type")
	}
	return m, nil
}

// messageCardLocked reads the card of an interactive message: a card entity of this app not
// sent before ("Streaming card updates": an entity can be sent once, by the app that created
// it), or inline card JSON of at most 30 KB. s.mu is held.
func (s *Server) messageCardLocked(app *appState, content string) (*cardState, *apiError) {
	cardID, template := cardContent(content)
	switch {
	case template:
		return nil, cardContentError(200380, "template does not exist, please confirm whether this template has been released")
	case cardID != "":
		c := s.cards[cardID]
		switch {
		case c == nil:
			return nil, cardContentError(200740, "The card entity does not exist")
		case c.appID != app.ID:
			return nil, cardContentError(300311, "The current application does not have permission to update/use this card")
		case c.messageID != "":
			return nil, cardContentError(200740, "the card entity has already been sent")
		}
		return c, nil
	}
	if len(content) > maxRichContent {
		return nil, badRequest(230025, "The length of the message content reaches its limit.")
	}
	p, ce := parseCard(content, false)
	if ce != nil {
		if ce.code == 200220 {
			return nil, cardContentError(200621, "parse card json err, please check whether the card json is correct")
		}
		return nil, cardContentError(ce.code, ce.msg)
	}
	c := &cardState{appID: app.ID, created: s.Now(), elements: p.elements}
	if p.streaming != nil {
		c.setStreaming(*p.streaming, s.Now())
	}
	return c, nil
}

// postText reads the text of rich text content: the title and each line's text, link and
// markdown elements, of the zh_cn, en_us or ja_jp post or the post itself.
func postText(content string) (string, bool) {
	var root map[string]json.RawMessage
	if err := json.Unmarshal([]byte(content), &root); err != nil {
		return "", false
	}
	body := content
	for _, loc := range []string{"zh_cn", "en_us", "ja_jp"} {
		if raw, ok := root[loc]; ok {
			body = string(raw)
			break
		}
	}
	var post struct {
		Title   string             `json:"title"`
		Content [][]map[string]any `json:"content"`
	}
	if err := json.Unmarshal([]byte(body), &post); err != nil {
		return "", false
	}
	var lines []string
	if post.Title != "" {
		lines = append(lines, post.Title)
	}
	for _, row := range post.Content {
		var b strings.Builder
		for _, el := range row {
			if t, ok := el["text"].(string); ok {
				b.WriteString(t)
			}
		}
		lines = append(lines, b.String())
	}
	return strings.Join(lines, "\n"), true
}

// addBotMessageLocked gives a bot's message its id and puts it in a chat. s.mu is held.
func (s *Server) addBotMessageLocked(app *appState, ch *chatState, m *message, uuid string, now time.Time) {
	m.id = "om_" + randHex(32)
	m.chatID, m.fromApp, m.uuid, m.at = ch.id, app.ID, uuid, now
	s.msgs[m.id] = m
	ch.msgs = append(ch.msgs, m.id)
	if uuid != "" {
		app.uuids[uuid] = m.id
	}
	if m.card != nil {
		m.card.messageID = m.id
	}
}

// wireMessageLocked is the Message object of a bot's message. s.mu is held.
func (s *Server) wireMessageLocked(m *message) wireMessage {
	return wireMessage{
		MessageID: m.id, RootID: m.rootID, ParentID: m.parentID, ThreadID: m.threadID,
		MsgType: m.msgType, CreateTime: millis(m.at), UpdateTime: millis(m.at), ChatID: m.chatID,
		Sender: wireSender{ID: m.fromApp, IDType: "app_id", SenderType: "app", TenantKey: s.tenantKey},
		Body:   wireMessageBody{Content: m.content},
	}
}

// getChat answers "Get group information" (open.feishu.cn/document/server-docs/group/chat/get-2):
// chat_mode is "p2p" or "group"; chat_type is "private" for a group and absent for a p2p chat,
// as that page documents (chat_type is private/public, not p2p/group).
func (s *Server) getChat(q *request) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.chats[q.params[routeParamChatID]]
	if ch == nil {
		return nil, badRequest(232006, "Your request specifies a chat_id which is invalid.")
	}
	if !ch.hasBot(q.app.ID) {
		return nil, badRequest(232011, "Operator can NOT be out of the chat.")
	}
	bots := 0
	for _, id := range s.appOrder {
		if ch.hasBot(id) {
			bots++
		}
	}
	c := wireChat{
		EditPermission: "all_members", ChatMode: ch.kind, ModerationPermission: "all_members",
		TenantKey: s.tenantKey, UserCount: strconv.Itoa(len(ch.members)), BotCount: strconv.Itoa(bots),
		ChatStatus: "normal",
	}
	if ch.kind == "group" {
		c.Name = ch.name
		c.AddMemberPermission, c.ShareCardPermission, c.AtAllPermission = "all_members", "allowed", "all_members"
		c.ChatType, c.ChatTag, c.GroupMessageType = "private", "inner", "chat"
		c.JoinMessageVisibility, c.LeaveMessageVisibility = "all_members", "all_members"
		c.MembershipApproval = "no_approval_required"
	}
	return c, nil
}
