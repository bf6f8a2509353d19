package discord

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/bwmarrin/discordgo"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

var (
	_ adapter.BotTaker  = (*Adapter)(nil)
	_ adapter.BotProber = (*Adapter)(nil)
)

// placeholderChannel is the channel_id a bot's config is checked with (adapter.BotTaker.Bind
// with no conversation); no call is ever made to it.
const placeholderChannel = "0"

// Discord channel types of threads (Channel Object, Channel Types).
var threadTypes = map[discordgo.ChannelType]bool{
	discordgo.ChannelTypeGuildNewsThread: true, discordgo.ChannelTypeGuildPublicThread: true, discordgo.ChannelTypeGuildPrivateThread: true,
}

// ConversationKeys implements adapter.BotTaker: a bot's config names no channel.
func (a *Adapter) ConversationKeys() []string { return []string{"channel_id"} }

// Bind implements adapter.BotTaker: the bot's config with channel_id = the conversation's
// channel (a thread's own channel id for a thread: Discord's threads are channels).
func (a *Adapter) Bind(bot json.RawMessage, c adapter.Conversation) (json.RawMessage, error) {
	id := placeholderChannel
	switch {
	case c.Thread != "":
		id = c.Thread
	case c.ID != "":
		id = c.ID
	}
	return adapter.BindConfig(bot, map[string]any{"channel_id": id})
}

// botConfig is a bot's config, bound to the placeholder channel: its account.
func (a *Adapter) botConfig(b adapter.Bot) (*config, error) {
	raw, err := a.Bind(b.Target.Config, adapter.Conversation{})
	if err != nil {
		return nil, err
	}
	return parseConfig(raw)
}

// ProbeBot implements adapter.BotProber: the bot token works (GET /users/@me, asked afresh).
func (a *Adapter) ProbeBot(ctx context.Context, b adapter.Bot) error {
	c, err := a.botConfig(b)
	if err != nil {
		return err
	}
	return a.account(c).probeToken(ctx)
}

// toBots passes a message of a conversation no channel binds to the bots of the token: a DM
// channel (no guild_id) is direct, a guild channel a group, a thread with scope "thread" a
// thread of its parent; a mention is the bot in mentions, <@ID> or <@!ID> in the content (removed
// from the text), or a reply to one of the bot's messages. served reports whether any bot serves
// the conversation (its cursor is then kept).
func (g *gateway) toBots(ctx context.Context, m *discordgo.Message, own bool) (served bool, err error) {
	for _, b := range g.bots {
		bc, err := g.a.botConfig(b)
		if err != nil || bc.accountKey() != g.cfg.accountKey() {
			continue
		}
		served = true
		if b.Predates(timeOf(m.ID)) || !userMessage(m) {
			continue
		}
		conv, err := g.conversation(ctx, b, m)
		if err != nil {
			return served, err
		}
		text, mentioned := g.addressed(m)
		name := m.Author.GlobalName
		if name == "" {
			name = m.Author.Username
		}
		adm, err := g.feed.Admit(ctx, b, adapter.Arrival{Conversation: conv, Mentioned: mentioned,
			Author: adapter.Author{ID: m.Author.ID, DisplayName: name, IsBot: own}})
		if err != nil {
			return served, err
		}
		if !adm.Admitted() {
			continue
		}
		if _, err := g.a.receive(ctx, m, text, adm.Channel.ID, adm.Inbox); err != nil {
			return served, err
		}
	}
	return served, nil
}

// conversation is where m was written, as bot b sees it.
func (g *gateway) conversation(ctx context.Context, b adapter.Bot, m *discordgo.Message) (adapter.Conversation, error) {
	if m.GuildID == "" {
		return adapter.Conversation{Kind: adapter.Direct, ID: m.ChannelID, Title: m.Author.Username}, nil
	}
	if b.Conversations.Scope == adapter.ScopeThread {
		ch, err := g.channelOf(ctx, m.ChannelID)
		if err != nil {
			return adapter.Conversation{}, err
		}
		if threadTypes[ch.Type] && ch.ParentID != "" {
			return adapter.Conversation{Kind: adapter.Thread, ID: ch.ParentID, Thread: ch.ID, Title: ch.Name}, nil
		}
		return adapter.Conversation{Kind: adapter.Group, ID: m.ChannelID, Title: ch.Name}, nil
	}
	return adapter.Conversation{Kind: adapter.Group, ID: m.ChannelID}, nil
}

// channelOf is GET /channels/{id}, asked once a connection.
func (g *gateway) channelOf(ctx context.Context, id string) (*discordgo.Channel, error) {
	if ch, ok := g.kinds[id]; ok {
		return ch, nil
	}
	ch, err := g.acc.channel(ctx, id)
	if err != nil {
		return nil, profile.Errorf(profile.CodeTargetUnavailable, "discord: reading the channel of a message: %s", profile.AsError(err).Message)
	}
	if g.kinds == nil {
		g.kinds = map[string]*discordgo.Channel{}
	}
	g.kinds[id] = ch
	return ch, nil
}

// addressed is m's text without the bot's mention, and whether m addresses the bot.
func (g *gateway) addressed(m *discordgo.Message) (string, bool) {
	self := g.self.ID
	text := m.Content
	mentioned := false
	for _, tag := range []string{"<@" + self + ">", "<@!" + self + ">"} {
		if strings.Contains(text, tag) {
			mentioned = true
			text = strings.ReplaceAll(text, tag, "")
		}
	}
	for _, u := range m.Mentions {
		if u != nil && u.ID == self {
			mentioned = true
		}
	}
	if m.Type == discordgo.MessageTypeReply && m.ReferencedMessage != nil && m.ReferencedMessage.Author != nil && m.ReferencedMessage.Author.ID == self {
		mentioned = true
	}
	if mentioned {
		text = strings.TrimSpace(strings.ReplaceAll(text, "  ", " "))
	}
	return text, mentioned
}
