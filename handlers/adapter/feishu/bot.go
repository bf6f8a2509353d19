package feishu

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

var (
	_ adapter.BotTaker    = (*Adapter)(nil)
	_ adapter.BotProber   = (*Adapter)(nil)
	_ adapter.BotReceiver = (*Adapter)(nil)
)

// placeholderChat is the chat_id a bot's config is checked with (adapter.BotTaker.Bind with no
// conversation); no call is made to it.
const placeholderChat = "bot"

// ConversationKeys implements adapter.BotTaker: a bot's config has no chat_id.
func (a *Adapter) ConversationKeys() []string { return []string{"chat_id"} }

// Bind implements adapter.BotTaker: the bot's config with chat_id = the conversation's chat id.
func (a *Adapter) Bind(bot json.RawMessage, c adapter.Conversation) (json.RawMessage, error) {
	chat := c.ID
	if chat == "" {
		chat = placeholderChat
	}
	return adapter.BindConfig(bot, map[string]any{"chat_id": chat})
}

// botConfig is a bot's config, bound to the placeholder chat.
func (a *Adapter) botConfig(b adapter.Bot) (*config, error) {
	bound, err := a.Bind(b.Target.Config, adapter.Conversation{})
	if err != nil {
		return nil, err
	}
	return parseConfig(bound)
}

// ProbeBot implements adapter.BotProber: the config takes events (a bot's messages come only
// through them), the app's credentials give a tenant access token, and the app has a bot (GET
// /open-apis/bot/v3/info, whose open_id is then known for the bot's mentions).
func (a *Adapter) ProbeBot(ctx context.Context, b adapter.Bot) error {
	c, err := a.botConfig(b)
	if err != nil {
		return err
	}
	if !c.events() {
		return profile.Errorf(profile.CodeTargetConfigInvalid,
			"a bot takes Feishu's events: set encrypt_key (or verification_token) and point the app's request URL at /v1/targets/feishu/bots/%s/events", b.ID)
	}
	ap := a.app(c)
	if _, err := ap.tokenFor(ctx, ""); err != nil {
		return profile.Errorf(profile.CodeTargetConfigInvalid, "feishu refused the app: %s", profile.AsError(err).Message)
	}
	if _, err := ap.botOpenID(ctx); err != nil {
		return profile.Errorf(profile.CodeTargetConfigInvalid, "feishu gave no bot of the app (is the Bot capability added and published?): %s", profile.AsError(err).Message)
	}
	return nil
}

// ReceiveBot implements adapter.BotReceiver for POST /v1/targets/feishu/bots/{bot_id}/events,
// the request URL of the bot's app: the URL verification, signature and decryption as
// [Adapter.Receive] does them with the bot's verification_token and encrypt_key; an event_id
// handled already answers 200 and does nothing. A message of a chat a channel PUT binds (same
// app) goes to that channel; any other goes to the bot's policy, as a conversation of kind
// direct (a p2p chat) or group, keyed by its chat_id, mentioning the bot when the bot's open_id
// is among its mentions, from a bot when its sender is not a person. Messages written before
// the bot was put are not passed on. 200 once what is passed on is durable.
func (a *Adapter) ReceiveBot(w http.ResponseWriter, r *http.Request, b adapter.Bot, in adapter.Inboxes) (adapter.Received, error) {
	if r.PathValue("path") != eventsRoute.Path {
		return "", profile.Errorf(profile.CodeNotFound, "no route %s %s", r.Method, r.URL.Path)
	}
	c, err := a.botConfig(b)
	if err != nil || !c.events() {
		return "", errRefused
	}
	body, err := adapter.ReadBody(r)
	if err != nil {
		return "", err
	}
	cb, answered, err := a.openEvent(w, r, c, body)
	if err != nil || answered != "" {
		return answered, err
	}
	if cb.Header.EventType != eventMessage {
		writeJSON(w, map[string]string{})
		return adapter.Ignored, nil
	}
	seen := c.appKey() + "\x00" + cb.Header.EventID
	if cb.Header.EventID != "" && a.events.Has(seen) {
		writeJSON(w, map[string]string{})
		return adapter.Duplicate, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), eventTimeout)
	defer cancel()
	outcome, err := a.receiveBot(ctx, c, b, cb, in)
	if err != nil {
		return "", err
	}
	if cb.Header.EventID != "" {
		a.events.Add(seen)
	}
	writeJSON(w, map[string]string{})
	return outcome, nil
}

// receiveBot passes one message event of a bot's app on: to the channels PUT for its chat, or
// through the bot's policy to its conversation's channel.
func (a *Adapter) receiveBot(ctx context.Context, c *config, b adapter.Bot, cb callback, in adapter.Inboxes) (adapter.Received, error) {
	ap := a.app(c)
	self, err := ap.botOpenID(ctx)
	if err != nil {
		a.Logger.Warn("feishu_bot_info_failed", "bot", b.ID, "err", err)
		return "", profile.Errorf(profile.CodeUnavailable, "the bot's identity is unknown for now; Feishu sends the event again")
	}
	msg, sender := cb.Event.Message, cb.Event.Sender
	if sender.SenderID.OpenID == self {
		return adapter.Ignored, nil // the bot's own message
	}
	if created, err := strconv.ParseInt(msg.CreateTime, 10, 64); err == nil && b.Predates(created) {
		return adapter.Ignored, nil
	}
	person := sender.SenderType == senderUser
	if put := a.channelsOf(in.Channels(), c.appKey(), msg.ChatID); len(put) > 0 {
		if !person {
			return adapter.Ignored, nil
		}
		return a.toChannels(ctx, c, cb, in, self, put)
	}
	arrival := adapter.Arrival{
		Conversation: adapter.Conversation{Kind: adapter.Group, ID: msg.ChatID},
		Author:       adapter.Author{ID: sender.SenderID.OpenID, IsBot: !person},
		Mentioned:    mentionNames(msg.Mentions, self).self,
	}
	if msg.ChatType == "p2p" {
		arrival.Conversation.Kind = adapter.Direct
	}
	if arrival.Conversation.Kind == adapter.Group && b.Conversations.Decide(arrival).Refused == "" {
		arrival.Conversation.Title = ap.chatTitle(ctx, msg.ChatID) // only for a group the policy passes
	}
	adm, err := in.Admit(ctx, b, arrival)
	if err != nil {
		a.Logger.Warn("feishu_bot_admit_failed", "bot", b.ID, "event_id", cb.Header.EventID, "err", err)
		return "", profile.Errorf(profile.CodeUnavailable, "the event could not be passed on; Feishu sends it again")
	}
	if !adm.Admitted() {
		return adapter.Ignored, nil
	}
	outcome, err := a.receive(ctx, c, cb, adm.Channel.ID, adm.Inbox, self)
	if err != nil {
		a.Logger.Warn("feishu_event_failed", "channel", adm.Channel.ID, "event_id", cb.Header.EventID, "err", err)
		return "", profile.Errorf(profile.CodeUnavailable, "the event could not be stored; Feishu sends it again")
	}
	return outcome, nil
}

// botOpenID is the open_id of the app's bot (GET /open-apis/bot/v3/info), fetched once.
func (a *app) botOpenID(ctx context.Context) (string, error) {
	a.mu.Lock()
	self := a.self
	a.mu.Unlock()
	if self != "" {
		return self, nil
	}
	var info struct {
		OpenID string `json:"open_id"`
	}
	if err := a.do(ctx, request{method: http.MethodGet, path: "/open-apis/bot/v3/info", bot: true}, &info); err != nil {
		return "", err
	}
	if info.OpenID == "" {
		return "", profile.Errorf(profile.CodeTargetDeliveryFailed, "feishu bot info: no open_id")
	}
	a.mu.Lock()
	a.self = info.OpenID
	a.mu.Unlock()
	return info.OpenID, nil
}

// maxTitles bounds the chat names an app keeps.
const maxTitles = 10000

// chatTitle is a group's name (GET /open-apis/im/v1/chats/{chat_id}), kept once known; "" when
// Feishu gives none.
func (a *app) chatTitle(ctx context.Context, chat string) string {
	a.mu.Lock()
	title, ok := a.titles[chat]
	a.mu.Unlock()
	if ok {
		return title
	}
	var info struct {
		Name string `json:"name"`
	}
	if err := a.do(ctx, request{method: http.MethodGet, path: "/open-apis/im/v1/chats/" + pathEscape(chat)}, &info); err != nil {
		return ""
	}
	a.mu.Lock()
	if len(a.titles) >= maxTitles {
		clear(a.titles)
	}
	a.titles[chat] = info.Name
	a.mu.Unlock()
	return info.Name
}

// recentEventsKept is how many event ids the bots' route remembers.
const recentEventsKept = 4096
