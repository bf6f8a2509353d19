package telegramtest

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf16"
)

// Entity is a MessageEntity of a person's message (API #messageentity): Offset and Length
// count UTF-16 code units.
type Entity struct {
	Type   string // "mention", "text_mention", "bot_command", ...
	Offset int
	Length int
	User   int64 // "text_mention": the user mentioned (a person or a bot)
	// URL is a "text_link"'s address, Language a "pre" block's language.
	URL      string
	Language string
}

// PostEntities is Post with the message's entities given instead of found in the text; none
// given: the message has none.
func (s *Server) PostEntities(chatID int64, from User, text string, entities ...Entity) int {
	return s.post(chatID, from, "PostEntities", func(m *message) {
		m.text = text
		m.entities = append([]Entity{}, entities...)
	})
}

// AddForum adds a supergroup with topics enabled (Chat.is_forum) and returns its id. Messages
// posted with Post go to its General topic (no message_thread_id).
func (s *Server) AddForum(title string, members ...int64) int64 {
	id := s.AddChat("supergroup", title, members...)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chats[id].forum = true
	return id
}

// AddTopic makes a person open a topic in a forum: a service message with forum_topic_created,
// whose message id is the topic's message_thread_id (core.telegram.org/api/forum: a topic is the
// message thread of the service message that created it). Every bot in the chat gets its
// update. It panics on a chat that is not a forum.
func (s *Server) AddTopic(chatID int64, from User, name string) int {
	s.mu.Lock()
	if ch := s.mustChat(chatID, "AddTopic"); !ch.forum {
		s.mu.Unlock()
		panic(fmt.Sprintf("telegramtest: AddTopic: chat %d is not a forum", chatID))
	}
	s.mu.Unlock()
	return s.post(chatID, from, "AddTopic", func(m *message) { m.topic, m.thread = name, m.id })
}

// PostInTopic is Post in a forum topic: the message has message_thread_id and
// is_topic_message, and replies to the topic's service message. It panics on an unknown topic.
func (s *Server) PostInTopic(chatID int64, topic int, from User, text string) int {
	s.mu.Lock()
	if t := s.mustChat(chatID, "PostInTopic").find(topic); t == nil || t.topic == "" {
		s.mu.Unlock()
		panic(fmt.Sprintf("telegramtest: PostInTopic: chat %d has no topic %d", chatID, topic))
	}
	s.mu.Unlock()
	return s.post(chatID, from, "PostInTopic", func(m *message) { m.text, m.thread = text, topic })
}

// SetBotToBot turns a bot's Bot-to-Bot Communication Mode on or off (set in @BotFather; off
// by default). See PostAsBot.
func (s *Server) SetBotToBot(botID int64, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.bots[botID]; b != nil {
		b.botToBot = on
	}
}

// PostAsBot makes a bot write text in a group or supergroup, as sendMessage does. Bots do not
// see other bots' messages (FAQ "Why doesn't my bot see messages from other bots?") except by
// Bot-to-Bot Communication (core.telegram.org/api/bots/bot-to-bot): another bot gets the update
// when one of the two has the mode on and the message holds /command@its_username or replies to
// one of its messages, or when it has the mode on itself (it is taken to be an admin, and
// privacy mode is off in the fake). It panics on a private chat (bots' private chats are not
// modelled).
func (s *Server) PostAsBot(chatID int64, sender Bot, text string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.mustChat(chatID, "PostAsBot")
	b := s.bots[sender.ID]
	if b == nil || !ch.isGroup() {
		panic(fmt.Sprintf("telegramtest: PostAsBot: unknown bot %d or chat %d not a group", sender.ID, chatID))
	}
	m := s.addMessageLocked(ch, b.ID, true)
	m.text = text
	s.publishLocked(ch, m, b)
	return m.id
}

// publishLocked completes a new message (its entities, when none were given) and queues its
// update for every bot in the chat that sees it: all of them for a person's message; for a
// bot's (sender), those Bot-to-Bot Communication lets see it. s.mu is held.
func (s *Server) publishLocked(ch *chatState, m *message, sender *botState) {
	if m.entities == nil {
		m.entities = findEntities(m.text)
		if m.text == "" {
			m.entities = findEntities(m.caption)
		}
	}
	ids := make([]int64, 0, len(s.bots))
	for id := range s.bots {
		if !ch.removed[id] && (sender == nil || s.seesBotLocked(ch, m, sender, s.bots[id])) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		s.enqueueLocked(s.bots[id], "message", s.messageJSON(ch, m, 0))
	}
}

// seesBotLocked reports whether bot r gets the message m that bot sender wrote in ch. s.mu is
// held.
func (s *Server) seesBotLocked(ch *chatState, m *message, sender, r *botState) bool {
	if r == sender || !ch.isGroup() {
		return false
	}
	if r.botToBot {
		return true
	}
	if !sender.botToBot {
		return false
	}
	if m.replyTo != 0 {
		if to := ch.find(m.replyTo); to != nil && to.from == r.ID {
			return true
		}
	}
	units := utf16.Encode([]rune(m.text))
	for _, e := range m.entities {
		if e.Type == "bot_command" && e.Offset+e.Length <= len(units) {
			cmd := string(utf16.Decode(units[e.Offset : e.Offset+e.Length]))
			if _, to, ok := strings.Cut(cmd, "@"); ok && strings.EqualFold(to, r.Username) {
				return true
			}
		}
	}
	return false
}

// findEntities finds the mentions (@username, 5-32 letters, digits and underscores) and bot
// commands (/command, optionally @username, at the start or after a space) in a person's text,
// as Telegram gives them to bots (API #message "entities": "special entities like usernames,
// URLs, bot commands, etc. that appear in the text"). Hashtags, URLs and the rest are not
// found.
func findEntities(text string) []Entity {
	rs := []rune(text)
	off := make([]int, len(rs)+1) // UTF-16 offset of each rune
	for i, r := range rs {
		off[i+1] = off[i] + max(utf16.RuneLen(r), 1)
	}
	word := func(r rune) bool {
		return r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
	}
	run := func(from int) int { // the end of the word starting at from
		for from < len(rs) && word(rs[from]) {
			from++
		}
		return from
	}
	var out []Entity
	for i := 0; i < len(rs); i++ {
		switch {
		case rs[i] == '@' && (i == 0 || !word(rs[i-1]) && rs[i-1] != '@'):
			if j := run(i + 1); j-i-1 >= 5 && j-i-1 <= 32 {
				out = append(out, Entity{Type: "mention", Offset: off[i], Length: off[j] - off[i]})
				i = j - 1
			}
		case rs[i] == '/' && (i == 0 || unicode.IsSpace(rs[i-1])):
			j := run(i + 1)
			if j-i-1 < 1 || j-i-1 > 64 {
				continue
			}
			if j < len(rs) && rs[j] == '@' {
				if k := run(j + 1); k-j-1 >= 3 && k-j-1 <= 32 {
					j = k
				}
			}
			if j == len(rs) || !word(rs[j]) && rs[j] != '@' && rs[j] != '/' {
				out = append(out, Entity{Type: "bot_command", Offset: off[i], Length: off[j] - off[i]})
				i = j - 1
			}
		}
	}
	return out
}
