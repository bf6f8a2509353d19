package telegram

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"

	"github.com/go-telegram/bot/models"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

var (
	_ adapter.BotTaker    = (*Adapter)(nil)
	_ adapter.BotProber   = (*Adapter)(nil)
	_ adapter.BotReceiver = (*Adapter)(nil)
)

// placeholderChat is the chat_id a bot's config is checked with (Bind with no conversation): a
// private chat's, so that a bot's "streaming": "draft" parses.
const placeholderChat = 1

// ConversationKeys implements adapter.BotTaker: a bot's config names no chat and no topic.
func (a *Adapter) ConversationKeys() []string { return []string{"chat_id", "message_thread_id"} }

// Bind implements adapter.BotTaker: the bot's config with chat_id the conversation's chat and,
// for a forum topic, message_thread_id the topic, so that answers go to that topic. A bot whose
// config asks for "draft" streaming, which works in private chats only, streams by "edit" in its
// groups.
func (a *Adapter) Bind(bot json.RawMessage, c adapter.Conversation) (json.RawMessage, error) {
	if c.ID == "" {
		return adapter.BindConfig(bot, map[string]any{"chat_id": placeholderChat})
	}
	chat, err := strconv.ParseInt(c.ID, 10, 64)
	if err != nil || chat == 0 {
		return nil, profile.Errorf(profile.CodeInvalidDescriptor, "telegram: conversation %q is not a chat id", c.ID)
	}
	set := map[string]any{"chat_id": chat}
	if c.Thread != "" {
		topic, err := strconv.Atoi(c.Thread)
		if err != nil || topic <= 0 {
			return nil, profile.Errorf(profile.CodeInvalidDescriptor, "telegram: thread %q is not a message_thread_id", c.Thread)
		}
		set["message_thread_id"] = topic
	}
	if chat < 0 {
		var w struct {
			Streaming string `json:"streaming"`
		}
		if json.Unmarshal(bot, &w) == nil && w.Streaming == string(adapter.StreamingDraft) {
			set["streaming"] = adapter.StreamingEdit
		}
	}
	return adapter.BindConfig(bot, set)
}

// botConfig is a bot's account config (its config bound to no conversation).
func (a *Adapter) botConfig(b adapter.Bot) (*config, error) {
	bound, err := a.Bind(b.Target.Config, adapter.Conversation{})
	if err != nil {
		return nil, err
	}
	return parseConfig(bound)
}

// ProbeBot implements adapter.BotProber: the token is a bot's (getMe); with "inbound":
// "webhook" the bot's webhook is set to its route, POST /v1/targets/telegram/bots/{bot_id}/updates,
// and with polling a webhook left set is removed (Telegram refuses getUpdates while one is).
func (a *Adapter) ProbeBot(ctx context.Context, b adapter.Bot) error {
	c, err := a.botConfig(b)
	if err != nil {
		return err
	}
	acc := a.account(c)
	if _, err := acc.identity(ctx); err != nil {
		return err
	}
	return a.setInbound(ctx, acc, c, "bots/"+b.ID)
}

// identity is the bot's username (getMe), asked once per account: a mention names it.
func (acc *account) identity(ctx context.Context) (string, error) {
	acc.mu.Lock()
	name := acc.username
	acc.mu.Unlock()
	if name != "" {
		return name, nil
	}
	var me *models.User
	if err := acc.call(ctx, "getMe", 0, func(ctx context.Context) (err error) { me, err = acc.bot.GetMe(ctx); return err }); err != nil {
		return "", refused("token", err)
	}
	if !me.IsBot || me.Username == "" {
		return "", profile.Errorf(profile.CodeTargetConfigInvalid, "telegram: the token is not a bot's")
	}
	acc.mu.Lock()
	acc.username = me.Username
	acc.mu.Unlock()
	return me.Username, nil
}

// topicOf is the forum topic a message was written in (its message_thread_id in a forum
// supergroup), 0 for none: the General topic, a chat without topics, a reply thread of a
// channel's comments.
func topicOf(m *models.Message) int {
	if m.Chat.IsForum && m.IsTopicMessage {
		return m.MessageThreadID
	}
	return 0
}

// arrivalOf is a message as bot b's policy sees it: its conversation (a private chat is
// direct; a group or supergroup a group; a forum topic a thread when b's scope is "thread"),
// its author, whether it addresses the bot, and its text without the bot's mention. ok is false
// for a chat a bot does not serve (a channel).
func arrivalOf(m *models.Message, b adapter.Bot, botID int64, username string) (a adapter.Arrival, text string, ok bool) {
	chat := strconv.FormatInt(m.Chat.ID, 10)
	switch m.Chat.Type {
	case models.ChatTypePrivate:
		a.Conversation = adapter.Conversation{Kind: adapter.Direct, ID: chat, Title: nameOf(m.Chat.FirstName, m.Chat.LastName, m.Chat.Username)}
	case models.ChatTypeGroup, models.ChatTypeSupergroup:
		a.Conversation = adapter.Conversation{Kind: adapter.Group, ID: chat, Title: m.Chat.Title}
		if topic := topicOf(m); topic != 0 && b.Conversations.Scope == adapter.ScopeThread {
			a.Conversation.Kind, a.Conversation.Thread = adapter.Thread, strconv.Itoa(topic)
			if r := m.ReplyToMessage; r != nil && r.ForumTopicCreated != nil && r.ForumTopicCreated.Name != "" {
				a.Conversation.Title += " / " + r.ForumTopicCreated.Name
			}
		}
	default:
		return a, "", false
	}
	a.Author = adapter.Author{ID: strconv.FormatInt(m.From.ID, 10), DisplayName: nameOf(m.From.FirstName, m.From.LastName, m.From.Username), IsBot: m.From.IsBot}
	text, a.Mentioned = addressed(m, botID, username)
	return a, text, true
}

// nameOf is a person's name to show: first and last name, else @username.
func nameOf(first, last, username string) string {
	if name := strings.TrimSpace(first + " " + last); name != "" {
		return name
	}
	if username != "" {
		return "@" + username
	}
	return ""
}

// addressed reports whether a message addresses the bot, and returns its text (or caption)
// without the bot's mention. A message addresses the bot with a "mention" entity of its
// @username, a "text_mention" entity of its user, a "bot_command" entity /command@username (of
// which "@username" is removed, the command kept), or as a reply to one of its messages (not the
// service message that opened a forum topic, which every message of the topic replies to).
// Entities count UTF-16 code units (Bot API "MessageEntity").
func addressed(m *models.Message, botID int64, username string) (string, bool) {
	text, entities := m.Text, m.Entities
	if text == "" {
		text, entities = m.Caption, m.CaptionEntities
	}
	mentioned := false
	if r := m.ReplyToMessage; r != nil && r.From != nil && r.From.ID == botID && r.ForumTopicCreated == nil {
		mentioned = true
	}
	units := utf16.Encode([]rune(text))
	type cut struct{ from, to int }
	var cuts []cut
	for _, e := range entities {
		if e.Offset < 0 || e.Length <= 0 || e.Offset+e.Length > len(units) {
			continue
		}
		seg := string(utf16.Decode(units[e.Offset : e.Offset+e.Length]))
		switch e.Type {
		case models.MessageEntityTypeMention:
			if username != "" && strings.EqualFold(seg, "@"+username) {
				cuts = append(cuts, cut{e.Offset, e.Offset + e.Length})
			}
		case models.MessageEntityTypeTextMention:
			if e.User != nil && e.User.ID == botID {
				cuts = append(cuts, cut{e.Offset, e.Offset + e.Length})
			}
		case models.MessageEntityTypeBotCommand:
			if at := strings.LastIndexByte(seg, '@'); at > 0 && username != "" && strings.EqualFold(seg[at+1:], username) {
				suffix := len(utf16.Encode([]rune(seg[at:])))
				cuts = append(cuts, cut{e.Offset + e.Length - suffix, e.Offset + e.Length})
			}
		}
	}
	if len(cuts) == 0 {
		return markdownOf(text, entities), mentioned
	}
	// Entities do not overlap and come in order of offset. Where a mention is cut out, no space
	// is left doubled, and an address that began the text takes its "," or ":" with it ("@bot,
	// help" is "help"); the rest of the text stays as written, its formatting with it.
	var out []uint16
	pos := make([]int, len(units)+1) // where each unit of text is in out (a cut one: where it was)
	last := 0
	keep := func(from, to int) {
		for i := from; i < to; i++ {
			pos[i] = len(out)
			out = append(out, units[i])
		}
	}
	drop := func(from, to int) {
		for i := from; i < to; i++ {
			pos[i] = len(out)
		}
	}
	for _, c := range cuts {
		if c.from < last {
			continue
		}
		keep(last, c.from)
		drop(c.from, c.to)
		last = c.to
		if strings.TrimSpace(string(utf16.Decode(out))) == "" {
			for last < len(units) && (units[last] == ',' || units[last] == ':') {
				drop(last, last+1)
				last++
			}
			for last < len(units) && unicode.IsSpace(rune(units[last])) {
				drop(last, last+1)
				last++
			}
		} else if len(out) > 0 && out[len(out)-1] == ' ' && last < len(units) && units[last] == ' ' {
			drop(last, last+1)
			last++
		}
	}
	keep(last, len(units))
	pos[len(units)] = len(out)
	// Leading and trailing spaces go; entities move with their text.
	lead := 0
	for lead < len(out) && unicode.IsSpace(rune(out[lead])) {
		lead++
	}
	end := len(out)
	for end > lead && unicode.IsSpace(rune(out[end-1])) {
		end--
	}
	var moved []models.MessageEntity
	for _, e := range entities {
		if e.Offset < 0 || e.Length <= 0 || e.Offset+e.Length > len(units) {
			continue
		}
		from, to := max(pos[e.Offset]-lead, 0), min(pos[e.Offset+e.Length], end)-lead
		if to > from {
			e.Offset, e.Length = from, to-from
			moved = append(moved, e)
		}
	}
	return markdownOf(string(utf16.Decode(out[lead:end])), moved), true
}
