package test

import (
	"slices"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/telegram/telegramtest"
	"github.com/ximd/ximd/profile"
)

// edge-api §7.3 end to end: xAgent's Markdown answer shows in the chat as a rich message (its
// table and code block Telegram's own), and a person's formatting reaches xAgent as the same
// Markdown.
func TestTelegramMarkdown_RichAnswerAndFormattedQuestion(t *testing.T) {
	w := newTelegramWorld(t, nil)
	alice := w.fake.AddUser("Alice")
	chat := w.fake.AddChat("private", "", alice.ID)
	w.bind("tgmd", chat, map[string]any{"streaming": "none"})

	text := "Here:\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```sh\nls -l\n```"
	if a := w.ackOf(w.sendTo("tgmd", profile.TypeMessage, msg("m_md", text))); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	shown := w.fake.Messages(chat)
	if len(shown) != 1 || shown[0].Form != "rich" || !slices.Equal(shown[0].Blocks, []string{"paragraph", "table", "pre"}) {
		t.Fatalf("the chat shows %+v, want one rich message with a table and a code block", shown)
	}

	w.fake.PostEntities(chat, alice, "please make this bold and see docs",
		telegramtest.Entity{Type: "bold", Offset: 12, Length: 9},
		telegramtest.Entity{Type: "text_link", Offset: 30, Length: 4, URL: "https://e.org/docs"})
	uenv, um := userMessage(t, w.agent, wait)
	if want := "please make **this bold** and see [docs](https://e.org/docs)"; um.Text != want {
		t.Fatalf("user message %q, want %q", um.Text, want)
	}
	ackUser(t, w.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	w.quiet(time.Second)
}
