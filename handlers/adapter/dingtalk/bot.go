package dingtalk

import (
	"context"
	"encoding/json"

	"github.com/ximd/ximd/handlers/adapter"
)

var (
	_ adapter.BotTaker  = (*Adapter)(nil)
	_ adapter.BotProber = (*Adapter)(nil)
)

// placeholderUser is the user_id a bot's config is checked with (Bind with no conversation); no
// call is ever made to it.
const placeholderUser = "bot"

// ConversationKeys implements adapter.BotTaker: a bot's config names no conversation.
func (a *Adapter) ConversationKeys() []string { return []string{"conversation_id", "user_id"} }

// Bind implements adapter.BotTaker: a direct conversation's user_id is the person's staff id
// (its id); a group's conversation_id is its conversationId.
func (a *Adapter) Bind(bot json.RawMessage, c adapter.Conversation) (json.RawMessage, error) {
	switch {
	case c.ID == "":
		return adapter.BindConfig(bot, map[string]any{"user_id": placeholderUser})
	case c.Kind == adapter.Direct:
		return adapter.BindConfig(bot, map[string]any{"user_id": c.ID})
	}
	return adapter.BindConfig(bot, map[string]any{"conversation_id": c.ID})
}

// botConfig is a bot's config, bound to the placeholder conversation: its app.
func (a *Adapter) botConfig(b adapter.Bot) (*config, error) {
	raw, err := a.Bind(b.Target.Config, adapter.Conversation{})
	if err != nil {
		return nil, err
	}
	return parseConfig(raw)
}

// ProbeBot implements adapter.BotProber: the app's credentials give an access token.
func (a *Adapter) ProbeBot(ctx context.Context, b adapter.Bot) error {
	c, err := a.botConfig(b)
	if err != nil {
		return err
	}
	return probe(ctx, a.client(c))
}

// toBots offers a robot message of a conversation no channel PUT binds to each bot of the same
// app: the first outcome that is not Ignored is the message's.
func (a *Adapter) toBots(ctx context.Context, m botMessage, bots []adapter.Bot, in adapter.Inboxes, same func(*config) bool) (adapter.Received, error) {
	return adapter.Offer(bots, func(b adapter.Bot) (adapter.Received, error) {
		c, err := a.botConfig(b)
		if err != nil || !same(c) {
			return adapter.Ignored, nil
		}
		return a.toBot(ctx, c, b, m, in)
	})
}

// toBot passes a robot message to bot b: conversationType "1" is direct (id: the sender's staff
// id), "2" group (id: its conversationId); mentioned is isInAtList (DingTalk has removed the
// mention from the text); then Admit, and the user message through the admitted channel's inbox.
func (a *Adapter) toBot(ctx context.Context, c *config, b adapter.Bot, m botMessage, in adapter.Inboxes) (adapter.Received, error) {
	if b.Predates(m.CreateAt) {
		return adapter.Ignored, nil
	}
	seen := b.ID + "\x00" + m.MsgID
	if a.handled.Has(seen) {
		return adapter.Duplicate, nil
	}
	arr := adapter.Arrival{
		Author:    adapter.Author{ID: m.SenderStaffID, DisplayName: m.SenderNick},
		Mentioned: m.IsInAtList,
	}
	if m.ConversationType == "2" {
		arr.Conversation = adapter.Conversation{Kind: adapter.Group, ID: m.ConversationID, Title: m.ConversationName}
	} else {
		arr.Conversation = adapter.Conversation{Kind: adapter.Direct, ID: m.SenderStaffID, Title: m.SenderNick}
		arr.Mentioned = true
	}
	if arr.Author.ID == "" {
		arr.Author.ID = m.SenderID // a sender outside the organisation has no staff id
	}
	if arr.Conversation.ID == "" {
		return adapter.Ignored, nil
	}
	adm, err := in.Admit(ctx, b, arr)
	if err != nil {
		return "", err
	}
	if !adm.Admitted() {
		a.handled.Add(seen)
		return adapter.Ignored, nil
	}
	outcome, err := a.receive(ctx, c, m, adm.Channel.ID, adm.Inbox)
	if err == nil {
		a.handled.Add(seen)
	}
	return outcome, err
}
