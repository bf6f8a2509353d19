package wecom

import (
	"context"
	"encoding/json"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
)

var (
	_ adapter.BotTaker  = (*Adapter)(nil)
	_ adapter.BotProber = (*Adapter)(nil)
	_ adapter.Poller    = (*Adapter)(nil)
)

// placeholderUser names the conversation of a bot's config bound to none ([adapter.BotTaker]).
const placeholderUser = "ximd-bot-placeholder"

// ConversationKeys implements adapter.BotTaker.
func (a *Adapter) ConversationKeys() []string { return []string{"chat_id", "user_id"} }

// Bind implements adapter.BotTaker: the bot's config with chat_id = a group's chatid, or
// user_id = a direct conversation's person.
func (a *Adapter) Bind(bot json.RawMessage, c adapter.Conversation) (json.RawMessage, error) {
	switch {
	case c.Kind == adapter.Group:
		return adapter.BindConfig(bot, map[string]any{"chat_id": c.ID})
	case c.ID != "":
		return adapter.BindConfig(bot, map[string]any{"user_id": c.ID})
	}
	return adapter.BindConfig(bot, map[string]any{"user_id": placeholderUser})
}

// botConfig is a bot's config, bound to the placeholder conversation: its robot.
func (a *Adapter) botConfig(b adapter.Bot) (*config, error) {
	raw, err := a.Bind(b.Target.Config, adapter.Conversation{})
	if err != nil {
		return nil, err
	}
	return parseConfig(raw)
}

// ProbeBot implements adapter.BotProber: the robot's subscribe succeeds.
func (a *Adapter) ProbeBot(ctx context.Context, b adapter.Bot) error {
	c, err := a.botConfig(b)
	if err != nil {
		return err
	}
	return a.probe(ctx, c)
}

// toBots gives a message of a conversation no channel binds to the robot's bots: a single chat
// is direct (its key the person's userid), a group is group (its key from the chatid); WeCom
// calls a group's messages back only when they mention the robot, so each is mentioned, its
// leading @name removed.
func (a *Adapter) toBots(ctx context.Context, feed adapter.Feed, acct *config, m inMsg, at time.Time) (adapter.Received, error) {
	outcome := adapter.Ignored
	for _, b := range feed.Bots() {
		c, err := a.botConfig(b)
		if err != nil || c.pollKey() != acct.pollKey() || b.Predates(at.UnixMilli()) {
			continue
		}
		arr := adapter.Arrival{Author: adapter.Author{ID: m.From.UserID}}
		if m.ChatType == "group" {
			arr.Conversation = adapter.Conversation{Kind: adapter.Group, ID: m.ChatID}
			arr.Mentioned = true
		} else {
			arr.Conversation = adapter.Conversation{Kind: adapter.Direct, ID: m.From.UserID}
		}
		adm, err := feed.Admit(ctx, b, arr)
		if err != nil {
			return "", err
		}
		if !adm.Admitted() {
			if outcome == adapter.Ignored {
				outcome = adapter.Received(adm.Refused)
			}
			continue
		}
		got, err := a.receive(ctx, c, m, adm.Channel.ID, adm.Inbox, at)
		if err != nil {
			return "", err
		}
		outcome = got
	}
	return outcome, nil
}

// pollAccount is the robot a poll loop reads for: its first channel's, else its first bot's.
func (a *Adapter) pollAccount(feed adapter.Feed) (*config, error) {
	for _, ch := range feed.Channels() {
		return parseConfig(ch.Target.Config)
	}
	for _, b := range feed.Bots() {
		return a.botConfig(b)
	}
	return nil, nil
}
