package telegramtest

import (
	"encoding/json"
	"net/http"
)

// The JSON objects of the Bot API the fake answers with (https://core.telegram.org/bots/api
// "Available types"), reduced to the fields it fills.

type wireUser struct {
	ID        int64  `json:"id"`
	IsBot     bool   `json:"is_bot"`
	FirstName string `json:"first_name"`
	Username  string `json:"username,omitempty"`
}

// wireMe is the User getMe returns, with the fields "returned only in getMe".
type wireMe struct {
	wireUser
	CanJoinGroups           bool `json:"can_join_groups"`
	CanReadAllGroupMessages bool `json:"can_read_all_group_messages"`
	SupportsInlineQueries   bool `json:"supports_inline_queries"`
	CanConnectToBusiness    bool `json:"can_connect_to_business"`
	HasMainWebApp           bool `json:"has_main_web_app"`
	HasTopicsEnabled        bool `json:"has_topics_enabled"`
}

type wireChat struct {
	ID        int64  `json:"id"`
	Type      string `json:"type"`
	Title     string `json:"title,omitempty"`
	FirstName string `json:"first_name,omitempty"`
	IsForum   bool   `json:"is_forum,omitempty"`
}

// wireChatFullInfo is the ChatFullInfo of getChat with its required fields.
type wireChatFullInfo struct {
	wireChat
	AccentColorID     int               `json:"accent_color_id"`
	MaxReactionCount  int               `json:"max_reaction_count"`
	AcceptedGiftTypes wireAcceptedGifts `json:"accepted_gift_types"`
}

type wireAcceptedGifts struct {
	UnlimitedGifts      bool `json:"unlimited_gifts"`
	LimitedGifts        bool `json:"limited_gifts"`
	UniqueGifts         bool `json:"unique_gifts"`
	PremiumSubscription bool `json:"premium_subscription"`
	GiftsFromChannels   bool `json:"gifts_from_channels"`
}

type wirePhotoSize struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	Width        int    `json:"width"`
	Height       int    `json:"height"`
	FileSize     int    `json:"file_size"`
}

type wireDocument struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	FileName     string `json:"file_name,omitempty"`
	MimeType     string `json:"mime_type,omitempty"`
	FileSize     int    `json:"file_size,omitempty"`
}

type wireVideo struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	Width        int    `json:"width"`
	Height       int    `json:"height"`
	Duration     int    `json:"duration"`
	FileName     string `json:"file_name,omitempty"`
	MimeType     string `json:"mime_type,omitempty"`
	FileSize     int    `json:"file_size,omitempty"`
}

type wireAudio struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	Duration     int    `json:"duration"`
	FileName     string `json:"file_name,omitempty"`
	MimeType     string `json:"mime_type,omitempty"`
	FileSize     int    `json:"file_size,omitempty"`
}

type wireFile struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	FileSize     int    `json:"file_size,omitempty"`
	FilePath     string `json:"file_path,omitempty"`
}

type wireMessage struct {
	MessageID         int                    `json:"message_id"`
	MessageThreadID   int                    `json:"message_thread_id,omitempty"`
	IsTopicMessage    bool                   `json:"is_topic_message,omitempty"`
	From              *wireUser              `json:"from,omitempty"`
	Chat              wireChat               `json:"chat"`
	Date              int64                  `json:"date"`
	EditDate          int64                  `json:"edit_date,omitempty"`
	ReplyToMessage    *wireMessage           `json:"reply_to_message,omitempty"`
	Text              string                 `json:"text,omitempty"`
	RichMessage       *wireRichMessage       `json:"rich_message,omitempty"`
	Entities          []wireEntity           `json:"entities,omitempty"`
	Caption           string                 `json:"caption,omitempty"`
	CaptionEntities   []wireEntity           `json:"caption_entities,omitempty"`
	Photo             []wirePhotoSize        `json:"photo,omitempty"`
	Document          *wireDocument          `json:"document,omitempty"`
	Video             *wireVideo             `json:"video,omitempty"`
	Audio             *wireAudio             `json:"audio,omitempty"`
	NewChatMembers    []wireUser             `json:"new_chat_members,omitempty"`
	ForumTopicCreated *wireForumTopicCreated `json:"forum_topic_created,omitempty"`
}

// wireEntity is a MessageEntity: offset and length in UTF-16 code units; user for
// "text_mention" only.
type wireEntity struct {
	Type     string    `json:"type"`
	Offset   int       `json:"offset"`
	Length   int       `json:"length"`
	URL      string    `json:"url,omitempty"`
	User     *wireUser `json:"user,omitempty"`
	Language string    `json:"language,omitempty"`
}

// wireRichMessage is a rich message's RichMessage, its blocks reduced to their type.
type wireRichMessage struct {
	Blocks []wireRichBlock `json:"blocks"`
}

type wireRichBlock struct {
	Type string `json:"type"`
}

// wireForumTopicCreated is the ForumTopicCreated of the service message that opens a topic.
type wireForumTopicCreated struct {
	Name      string `json:"name"`
	IconColor int    `json:"icon_color"`
}

type wireWebhookInfo struct {
	URL                  string   `json:"url"`
	HasCustomCertificate bool     `json:"has_custom_certificate"`
	PendingUpdateCount   int      `json:"pending_update_count"`
	LastErrorDate        int64    `json:"last_error_date,omitempty"`
	LastErrorMessage     string   `json:"last_error_message,omitempty"`
	MaxConnections       int      `json:"max_connections,omitempty"`
	AllowedUpdates       []string `json:"allowed_updates,omitempty"`
}

// wireOK and wireError are the two answer envelopes ("Making requests").
type wireOK struct {
	OK          bool   `json:"ok"`
	Result      any    `json:"result"`
	Description string `json:"description,omitempty"`
}

type wireError struct {
	OK          bool            `json:"ok"`
	ErrorCode   int             `json:"error_code"`
	Description string          `json:"description"`
	Parameters  *wireParameters `json:"parameters,omitempty"`
}

type wireParameters struct {
	RetryAfter int `json:"retry_after,omitempty"`
}

// apiError is an error answer.
type apiError struct {
	code       int
	desc       string
	retryAfter int
}

func (e *apiError) Error() string { return e.desc }

// badRequest is a 400 answer; desc follows "Bad Request: ".
func badRequest(desc string) *apiError {
	return &apiError{code: http.StatusBadRequest, desc: "Bad Request: " + desc}
}

// forbidden is a 403 answer; desc follows "Forbidden: ".
func forbidden(desc string) *apiError {
	return &apiError{code: http.StatusForbidden, desc: "Forbidden: " + desc}
}

// writeAnswer writes an answer envelope with the HTTP status equal to error_code.
func writeAnswer(w http.ResponseWriter, result any, desc string, e *apiError) int {
	w.Header().Set("Content-Type", "application/json")
	if e != nil {
		body := wireError{ErrorCode: e.code, Description: e.desc}
		if e.retryAfter > 0 {
			body.Parameters = &wireParameters{RetryAfter: e.retryAfter}
		}
		w.WriteHeader(e.code)
		_ = json.NewEncoder(w).Encode(body) // the client may be gone; nothing to do then
		return e.code
	}
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(wireOK{OK: true, Result: result, Description: desc})
	return http.StatusOK
}

// userJSON renders a person or a bot as a User object. s.mu is held.
func (s *Server) userJSON(id int64) *wireUser {
	if b := s.bots[id]; b != nil {
		return &wireUser{ID: b.ID, IsBot: true, FirstName: b.Username, Username: b.Username}
	}
	u := s.users[id]
	return &wireUser{ID: id, FirstName: u.FirstName}
}

// chatJSON renders a chat as a Chat object.
func chatJSON(ch *chatState) wireChat {
	c := wireChat{ID: ch.id, Type: ch.kind, IsForum: ch.forum}
	if ch.kind == "private" {
		c.FirstName = ch.title
	} else {
		c.Title = ch.title
	}
	return c
}

// messageJSON renders a message as a Message object; a reply carries the replied-to message
// one level deep, as Telegram does. s.mu is held.
func (s *Server) messageJSON(ch *chatState, m *message, depth int) *wireMessage {
	w := &wireMessage{
		MessageID: m.id,
		From:      s.userJSON(m.from),
		Chat:      chatJSON(ch),
		Date:      m.date.Unix(),
		Text:      m.text,
		Caption:   m.caption,
	}
	if !m.editDate.IsZero() {
		w.EditDate = m.editDate.Unix()
	}
	if m.form == "rich" { // "text" is empty for a rich message
		w.Text, w.RichMessage = "", &wireRichMessage{}
		for _, b := range m.blocks {
			w.RichMessage.Blocks = append(w.RichMessage.Blocks, wireRichBlock{Type: b})
		}
	}
	if m.replyTo != 0 && depth == 0 {
		if r := ch.find(m.replyTo); r != nil {
			w.ReplyToMessage = s.messageJSON(ch, r, depth+1)
		}
	}
	if m.thread != 0 {
		// A topic is the message thread of the service message that opened it
		// (core.telegram.org/api/forum): that message is its id, and every message of the topic
		// that replies to nothing else replies to it.
		w.MessageThreadID, w.IsTopicMessage = m.thread, true
		if m.replyTo == 0 && m.id != m.thread && depth == 0 {
			if r := ch.find(m.thread); r != nil {
				w.ReplyToMessage = s.messageJSON(ch, r, depth+1)
			}
		}
	}
	if m.topic != "" {
		w.ForumTopicCreated = &wireForumTopicCreated{Name: m.topic, IconColor: 0x6FB9F0}
	}
	if len(m.entities) > 0 {
		ents := make([]wireEntity, 0, len(m.entities))
		for _, e := range m.entities {
			we := wireEntity{Type: e.Type, Offset: e.Offset, Length: e.Length, URL: e.URL, Language: e.Language}
			if e.Type == "text_mention" {
				we.User = s.userJSON(e.User)
			}
			ents = append(ents, we)
		}
		if m.text != "" {
			w.Entities = ents
		} else {
			w.CaptionEntities = ents
		}
	}
	for _, u := range m.joined {
		w.NewChatMembers = append(w.NewChatMembers, wireUser{ID: u.ID, FirstName: u.FirstName})
	}
	if f := m.media; f != nil {
		switch f.kind {
		case "photo":
			for _, p := range f.sizes {
				w.Photo = append(w.Photo, wirePhotoSize{
					FileID: p.id, FileUniqueID: p.uniqueID, Width: p.width, Height: p.height, FileSize: len(p.data),
				})
			}
		case "document":
			w.Document = &wireDocument{FileID: f.id, FileUniqueID: f.uniqueID, FileName: f.name, MimeType: f.mime, FileSize: len(f.data)}
		case "video":
			w.Video = &wireVideo{
				FileID: f.id, FileUniqueID: f.uniqueID, Width: f.width, Height: f.height, Duration: f.duration,
				FileName: f.name, MimeType: f.mime, FileSize: len(f.data),
			}
		case "audio":
			w.Audio = &wireAudio{
				FileID: f.id, FileUniqueID: f.uniqueID, Duration: f.duration,
				FileName: f.name, MimeType: f.mime, FileSize: len(f.data),
			}
		}
	}
	return w
}
