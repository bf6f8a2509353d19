package telegram

import (
	"encoding/json"
	"testing"

	"github.com/go-telegram/bot/models"

	"github.com/ximd/ximd/handlers/adapter"
)

// edge-api §7.2.2: a mention is a "mention" entity of the bot's username, a "text_mention" of
// its user id, a /command@botname, or a reply to one of its messages; the mention is removed
// from the text (the command kept), offsets counting UTF-16 code units.
func TestAddressed_MentionsAndTheirRemoval(t *testing.T) {
	const botID, name = 42, "ximd_bot"
	ent := func(typ models.MessageEntityType, off, n int) models.MessageEntity {
		return models.MessageEntity{Type: typ, Offset: off, Length: n}
	}
	botMsg := &models.Message{ID: 1, From: &models.User{ID: botID, IsBot: true}}
	topicByBot := &models.Message{ID: 2, From: &models.User{ID: botID, IsBot: true}, ForumTopicCreated: &models.ForumTopicCreated{Name: "t"}}
	for _, tt := range []struct {
		name      string
		m         models.Message
		text      string
		mentioned bool
	}{
		{"no mention", models.Message{Text: "just chatter"}, "just chatter", false},
		{"leading @mention", models.Message{Text: "@ximd_bot, what is up?", Entities: []models.MessageEntity{ent("mention", 0, 9)}}, "what is up?", true},
		{"@mention in the middle, case-insensitive", models.Message{Text: "hey @Ximd_Bot  how  are you", Entities: []models.MessageEntity{ent("mention", 4, 9)}}, "hey  how  are you", true},
		{"after an emoji (UTF-16 offsets)", models.Message{Text: "😀 @ximd_bot hi", Entities: []models.MessageEntity{ent("mention", 3, 9)}}, "😀 hi", true},
		{"another bot's @mention", models.Message{Text: "@other_bot hi", Entities: []models.MessageEntity{ent("mention", 0, 10)}}, "@other_bot hi", false},
		{"text_mention of the bot", models.Message{Text: "Ximd: help", Entities: []models.MessageEntity{{Type: "text_mention", Offset: 0, Length: 4, User: &models.User{ID: botID}}}}, "help", true},
		{"text_mention of a person", models.Message{Text: "Ann: help", Entities: []models.MessageEntity{{Type: "text_mention", Offset: 0, Length: 3, User: &models.User{ID: 7}}}}, "Ann: help", false},
		{"/command@botname", models.Message{Text: "/help@ximd_bot me", Entities: []models.MessageEntity{ent("bot_command", 0, 14)}}, "/help me", true},
		{"/command without a name", models.Message{Text: "/help me", Entities: []models.MessageEntity{ent("bot_command", 0, 5)}}, "/help me", false},
		{"/command@otherbot", models.Message{Text: "/help@other_bot", Entities: []models.MessageEntity{ent("bot_command", 0, 15)}}, "/help@other_bot", false},
		{"reply to the bot", models.Message{Text: "and then?", ReplyToMessage: botMsg}, "and then?", true},
		{"in a topic the bot opened", models.Message{Text: "hello", ReplyToMessage: topicByBot}, "hello", false},
		{"caption with a mention", models.Message{Caption: "@ximd_bot look", CaptionEntities: []models.MessageEntity{ent("mention", 0, 9)}}, "look", true},
		{"entity out of range", models.Message{Text: "@x", Entities: []models.MessageEntity{ent("mention", 0, 9)}}, "@x", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			text, mentioned := addressed(&tt.m, botID, name)
			if text != tt.text || mentioned != tt.mentioned {
				t.Fatalf("addressed = %q, %v; want %q, %v", text, mentioned, tt.text, tt.mentioned)
			}
		})
	}
}

// Bind names the conversation's chat (and topic); "draft" in a bot's config holds for its
// private chats, its groups stream by "edit"; a bot config parses with the zero Conversation.
func TestBind_ChatTopicAndStreaming(t *testing.T) {
	a := New(Options{})
	bot := json.RawMessage(`{"token":"5:tok","streaming":"draft"}`)
	for _, tt := range []struct {
		name      string
		conv      adapter.Conversation
		chat      int64
		thread    int
		streaming adapter.Streaming
		wantErr   bool
	}{
		{name: "no conversation", conv: adapter.Conversation{}, chat: placeholderChat, streaming: adapter.StreamingDraft},
		{name: "private chat", conv: adapter.Conversation{Kind: adapter.Direct, ID: "4242"}, chat: 4242, streaming: adapter.StreamingDraft},
		{name: "group", conv: adapter.Conversation{Kind: adapter.Group, ID: "-1001234"}, chat: -1001234, streaming: adapter.StreamingEdit},
		{name: "topic", conv: adapter.Conversation{Kind: adapter.Thread, ID: "-1001234", Thread: "17"}, chat: -1001234, thread: 17, streaming: adapter.StreamingEdit},
		{name: "not a chat id", conv: adapter.Conversation{Kind: adapter.Group, ID: "room"}, wantErr: true},
		{name: "not a topic id", conv: adapter.Conversation{Kind: adapter.Thread, ID: "-1001234", Thread: "x"}, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := a.Bind(bot, tt.conv)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Bind: %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			c, err := parseConfig(raw)
			if err != nil {
				t.Fatalf("the bound config does not parse: %v", err)
			}
			if c.chatID != tt.chat || c.threadID != tt.thread || c.streaming != tt.streaming {
				t.Fatalf("bound chat %d thread %d streaming %s", c.chatID, c.threadID, c.streaming)
			}
		})
	}
	if keys := a.ConversationKeys(); len(keys) != 2 || keys[0] != "chat_id" || keys[1] != "message_thread_id" {
		t.Fatalf("ConversationKeys %v", keys)
	}
	if k := (adapter.Conversation{ID: "-1001234", Thread: "17"}).Key(); k != "-1001234_17" {
		t.Fatalf("a topic's key %q", k)
	}
}
