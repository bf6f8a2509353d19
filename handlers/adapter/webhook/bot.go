package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

var (
	_ adapter.BotTaker    = (*Adapter)(nil)
	_ adapter.BotReceiver = (*Adapter)(nil)
)

// placeholderChat is the chat_id a bot's config is checked with (adapter.BotTaker.Bind with no
// conversation).
const placeholderChat = "bot"

// ConversationKeys implements adapter.BotTaker: a bot's config has no chat_id.
func (a *Adapter) ConversationKeys() []string { return []string{"chat_id"} }

// Bind implements adapter.BotTaker: the bot's config with chat_id = the conversation's id.
func (a *Adapter) Bind(bot json.RawMessage, c adapter.Conversation) (json.RawMessage, error) {
	chat := c.ID
	if chat == "" {
		chat = placeholderChat
	}
	return adapter.BindConfig(bot, map[string]any{"chat_id": chat})
}

// wireBotMessage is the body a target posts to a bot's route (edge-api §7.1).
type wireBotMessage struct {
	Conversation *struct {
		ID    string                   `json:"id"`
		Kind  adapter.ConversationKind `json:"kind"`
		Title string                   `json:"title"`
	} `json:"conversation"`
	Sender *struct {
		ID          string `json:"id"`
		IsBot       bool   `json:"is_bot"`
		DisplayName string `json:"display_name"`
	} `json:"sender"`
	Mentioned       bool           `json:"mentioned"`
	TargetMessageID string         `json:"target_message_id"`
	Text            string         `json:"text"`
	Files           []wireUserFile `json:"files"`
}

// maxConversationID bounds a posted conversation's or sender's id.
const maxConversationID = 1024

// ReceiveBot implements adapter.BotReceiver for POST /v1/targets/webhook/bots/{bot_id}/messages
// (edge-api §7.1): signed with the bot's secret, the message of any of the bot's conversations.
// A conversation bound by a channel PUT (same url, chat_id = the conversation's id) gets it;
// otherwise the bot's policy admits it (202 {"message_id", "connector_channel_id"}, its
// conversation's channel opened when new) or refuses it (202 {"refused": reason}).
func (a *Adapter) ReceiveBot(w http.ResponseWriter, r *http.Request, b adapter.Bot, in adapter.Inboxes) (adapter.Received, error) {
	if r.PathValue("path") != "messages" {
		return "", profile.Errorf(profile.CodeNotFound, "no route %s %s", r.Method, r.URL.Path)
	}
	body, err := adapter.ReadBody(r)
	if err != nil {
		return "", err
	}
	bound, err := a.Bind(b.Target.Config, adapter.Conversation{})
	if err != nil {
		return "", badSignature
	}
	cfg, err := a.InboundOf(bound)
	if err != nil || !cfg.Verify(body, r.Header, time.Now()) {
		return "", badSignature
	}
	var m wireBotMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return "", profile.Errorf(profile.CodeInvalidPacket, "body: %v", err)
	}
	arrival, err := arrivalOf(m)
	if err != nil {
		return "", err
	}
	if ch, ok := putChannel(in, bound, arrival.Conversation.ID); ok {
		return a.receive(r.Context(), w, ch, in.Inbox(ch.ID), m.userMessage(), cfg.FileHosts, nil)
	}
	adm, err := in.Admit(r.Context(), b, arrival)
	if err != nil {
		return "", profile.Errorf(profile.CodeUnavailable, "bot %s: %v", b.ID, err)
	}
	if !adm.Admitted() {
		writeAccepted(w, map[string]any{"refused": adm.Refused})
		return adapter.Ignored, nil
	}
	return a.receive(r.Context(), w, adm.Channel, adm.Inbox, m.userMessage(), cfg.FileHosts, map[string]any{"connector_channel_id": adm.Channel.ID})
}

func arrivalOf(m wireBotMessage) (adapter.Arrival, error) {
	switch {
	case m.Conversation == nil || m.Conversation.ID == "":
		return adapter.Arrival{}, profile.Errorf(profile.CodeInvalidPacket, "conversation.id: required")
	case m.Conversation.Kind != adapter.Direct && m.Conversation.Kind != adapter.Group:
		return adapter.Arrival{}, profile.Errorf(profile.CodeInvalidPacket, `conversation.kind: must be "direct" or "group"`)
	case m.Sender == nil || m.Sender.ID == "":
		return adapter.Arrival{}, profile.Errorf(profile.CodeInvalidPacket, "sender.id: required")
	case len(m.Conversation.ID) > maxConversationID || len(m.Sender.ID) > maxConversationID:
		return adapter.Arrival{}, profile.Errorf(profile.CodeInvalidPacket, "conversation.id, sender.id: at most %d bytes", maxConversationID)
	case m.TargetMessageID == "":
		return adapter.Arrival{}, profile.Errorf(profile.CodeInvalidPacket, "target_message_id: required")
	}
	return adapter.Arrival{
		Conversation: adapter.Conversation{Kind: m.Conversation.Kind, ID: m.Conversation.ID, Title: m.Conversation.Title},
		Author:       adapter.Author{ID: m.Sender.ID, DisplayName: m.Sender.DisplayName, IsBot: m.Sender.IsBot},
		Mentioned:    m.Mentioned,
	}, nil
}

func (m wireBotMessage) userMessage() wireUserMessage {
	return wireUserMessage{TargetMessageID: m.TargetMessageID, Text: m.Text, Files: m.Files}
}

// putChannel is the channel PUT on the same target (url) for the conversation chat, which wins
// over the bot (edge-api §4.1).
func putChannel(in adapter.Inboxes, bound json.RawMessage, chat string) (adapter.Channel, bool) {
	bc, err := parseConfig(bound)
	if err != nil {
		return adapter.Channel{}, false
	}
	for _, ch := range in.Channels() {
		c, err := parseConfig(ch.Target.Config)
		if err == nil && c.chatID == chat && strings.TrimRight(c.url.String(), "/") == strings.TrimRight(bc.url.String(), "/") {
			return ch, true
		}
	}
	return adapter.Channel{}, false
}
