package telegramtest_test

import (
	"net/http"
	"testing"
	"unicode/utf16"

	"github.com/go-telegram/bot/models"

	"github.com/ximd/ximd/handlers/adapter/telegram/telegramtest"
)

// entityText is the part of text an entity covers (offsets in UTF-16 code units).
func entityText(text string, e models.MessageEntity) string {
	u := utf16.Encode([]rune(text))
	return string(utf16.Decode(u[e.Offset : e.Offset+e.Length]))
}

// API #message "entities": mentions and bot commands in a person's text come as entities, in
// UTF-16 code units; a text_mention carries its user.
func TestEntitiesOfMentionsAndCommands(t *testing.T) {
	w := newWorld(t)
	group := w.s.AddChat("group", "Team", w.ann.ID)
	w.s.Post(group, w.ann, "😀 @ximd_bot hi /help@ximd_bot now, a@b.example /x/y @abc")
	w.s.PostEntities(group, w.ann, "Ximd, hello", telegramtest.Entity{Type: "text_mention", Offset: 0, Length: 4, User: w.bot.ID})
	ups, _ := getUpdates(t, w.s.URL(), nil)
	if len(ups) != 2 {
		t.Fatalf("%d updates", len(ups))
	}
	m := ups[0].Message
	var got []string
	for _, e := range m.Entities {
		got = append(got, string(e.Type)+":"+entityText(m.Text, e))
	}
	if want := []string{"mention:@ximd_bot", "bot_command:/help@ximd_bot"}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("entities %v, want %v", got, want)
	}
	if e := ups[1].Message.Entities; len(e) != 1 || e[0].Type != "text_mention" || e[0].User == nil || e[0].User.ID != w.bot.ID || !e[0].User.IsBot {
		t.Fatalf("text_mention %+v", e)
	}
}

// API #message message_thread_id, is_topic_message; core.telegram.org/api/forum: a topic is the
// thread of its service message, which its messages reply to; sends into a topic need it to exist.
func TestForumTopics(t *testing.T) {
	w := newWorld(t)
	w.s.SetLimits(noLimits)
	forum := w.s.AddForum("Forum", w.ann.ID)
	topic := w.s.AddTopic(forum, w.ann, "Support")
	w.s.PostInTopic(forum, topic, w.ann, "in the topic")
	w.s.Post(forum, w.ann, "in General")
	ups, _ := getUpdates(t, w.s.URL(), nil)
	if len(ups) != 3 {
		t.Fatalf("%d updates", len(ups))
	}
	if c := ups[0].Message.ForumTopicCreated; c == nil || c.Name != "Support" || ups[0].Message.ID != topic || !ups[0].Message.Chat.IsForum {
		t.Fatalf("topic service message %+v", ups[0].Message)
	}
	if m := ups[1].Message; !m.IsTopicMessage || m.MessageThreadID != topic || m.ReplyToMessage == nil || m.ReplyToMessage.ForumTopicCreated == nil {
		t.Fatalf("topic message %+v", m)
	}
	if m := ups[2].Message; m.IsTopicMessage || m.MessageThreadID != 0 || m.ReplyToMessage != nil {
		t.Fatalf("General message %+v", m)
	}
	if e := callJSON(t, w.s.URL(), token, "sendMessage", map[string]any{"chat_id": forum, "message_thread_id": topic, "text": "answer"}); !e.OK {
		t.Fatalf("send into the topic: %+v", e)
	}
	if e := callJSON(t, w.s.URL(), token, "sendChatAction", map[string]any{"chat_id": forum, "message_thread_id": topic, "action": "typing"}); !e.OK {
		t.Fatalf("typing in the topic: %+v", e)
	}
	wantError(t, callJSON(t, w.s.URL(), token, "sendMessage", map[string]any{"chat_id": forum, "message_thread_id": topic + 100, "text": "x"}),
		http.StatusBadRequest, "Bad Request: message thread not found")
	wantError(t, callJSON(t, w.s.URL(), token, "sendMessage", map[string]any{"chat_id": w.private, "message_thread_id": topic, "text": "x"}),
		http.StatusBadRequest, "Bad Request: message thread not found")
	if ms := w.s.Messages(forum); len(ms) != 1 || ms[0].Thread != topic {
		t.Fatalf("the forum shows %+v", ms)
	}
	if a := w.s.Actions(forum); len(a) != 1 || a[0].Thread != topic {
		t.Fatalf("actions %+v", a)
	}
}

// FAQ: bots do not see other bots' messages; Bot-to-Bot Communication lets a bot see a command
// addressed to it, a reply to it, or (its own mode on) every bot's message in a group.
func TestOtherBotsMessages(t *testing.T) {
	w := newWorld(t)
	other := w.s.AddBot("5550001:other-secret", "other_bot")
	group := w.s.AddChat("group", "Team", w.ann.ID)
	w.s.PostAsBot(group, other, "/help@ximd_bot without the mode")
	if n := w.s.PendingUpdates(w.bot.ID); n != 0 {
		t.Fatalf("a bot's message reached another bot without Bot-to-Bot Communication (%d updates)", n)
	}
	w.s.SetBotToBot(other.ID, true)
	w.s.PostAsBot(group, other, "chatter")
	w.s.PostAsBot(group, other, "/help@ximd_bot please")
	ups, _ := getUpdates(t, w.s.URL(), nil)
	if len(ups) != 1 || ups[0].Message.Text != "/help@ximd_bot please" || !ups[0].Message.From.IsBot || ups[0].Message.From.ID != other.ID {
		t.Fatalf("updates %+v", ups)
	}
	w.s.SetBotToBot(w.bot.ID, true)
	w.s.SetBotToBot(other.ID, false)
	w.s.PostAsBot(group, other, "chatter seen by a bot with the mode on")
	if n := w.s.PendingUpdates(w.bot.ID); n != 2 { // the one confirmed is still held until the next offset
		t.Fatalf("%d pending updates, want the earlier one and the chatter", n)
	}
}
