package test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"maunium.net/go/mautrix/event"

	"github.com/ximd/ximd/handlers/adapter/markdown"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/test/dendrite"
)

// edge-api §7.3 end to end against a real Dendrite: the agent's Markdown answer is in the room as
// org.matrix.custom.html (a table and a code block), and a person's formatted message (as
// Element sends it, a reply to the bot with its mx-reply fallback) reaches the agent as the same
// Markdown.
func TestMatrix_MarkdownBothWays(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{})
	bot, alice := s.Register(t, "bot"), s.Register(t, "alice")
	room := s.Room(t, bot, false, alice)
	e := newEnv(t, envOptions{})
	cfg := map[string]any{"homeserver": s.URL, "access_token": bot.Token, "room_id": string(room)}
	if status, body, err := openMatrix(e.node, "mxmd", cfg); err != nil || status != http.StatusOK {
		t.Fatalf("PUT matrix channel: %d %s %v", status, body, err)
	}
	ctx := context.Background()

	text := "## Plan\n\n| step | who |\n|---|---|\n| build | **ximd** |\n\n```sh\ngo test ./...\n```"
	pid := e.sendTo("mxmd", profile.TypeMessage, msg("m_md", text))
	if a := e.ackOf(pid); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	shown := alice.Messages(t, room)
	if len(shown) != 1 {
		t.Fatalf("alice sees %+v", shown)
	}
	ev, err := alice.Client.GetEvent(ctx, room, shown[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Body          string `json:"body"`
		Format        string `json:"format"`
		FormattedBody string `json:"formatted_body"`
	}
	if err := json.Unmarshal(ev.Content.VeryRaw, &c); err != nil {
		t.Fatal(err)
	}
	if c.Format != "org.matrix.custom.html" || !strings.Contains(c.FormattedBody, "<table>") || !strings.Contains(c.FormattedBody, "<td><strong>ximd</strong></td>") ||
		!strings.Contains(c.FormattedBody, `<pre><code class="language-sh">go test ./...</code></pre>`) || c.Body != markdown.Parse(text).Plain() || strings.Contains(c.Body, "**") {
		t.Fatalf("the answer in the room: %+v", c)
	}

	formatted := `<mx-reply><blockquote><a href="https://matrix.to/#/` + string(room) + `/` + string(shown[0].ID) + `">In reply to</a> <a href="https://matrix.to/#/` + string(bot.ID) + `">` + string(bot.ID) + `</a><br>Plan</blockquote></mx-reply>` +
		`<p>Thanks <a href="https://matrix.to/#/` + string(bot.ID) + `">bot</a>! Two things:</p><ol><li>run <code>make</code> <em>first</em></li><li>then <strong>deploy</strong></li></ol><pre><code class="language-go">x := 2*3</code></pre>`
	_, err = alice.Client.SendMessageEvent(ctx, room, event.EventMessage, map[string]any{
		"msgtype": "m.text", "body": "> <" + string(bot.ID) + "> Plan\n\nThanks bot! Two things: 1. run make first 2. then deploy",
		"format": "org.matrix.custom.html", "formatted_body": formatted,
		"m.relates_to": map[string]any{"m.in_reply_to": map[string]any{"event_id": string(shown[0].ID)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	uenv, um := userMessage(t, e.agent, wait)
	want := "Thanks bot! Two things:\n\n1. run `make` *first*\n2. then **deploy**\n\n```go\nx := 2*3\n```"
	if um.Text != want || uenv.ChannelID != "mxmd" {
		t.Fatalf("the agent got %q, want %q", um.Text, want)
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})

	// A message without formatting is its body, as before.
	if _, err := alice.Client.SendText(ctx, room, "plain *not bold*"); err != nil {
		t.Fatal(err)
	}
	uenv, um = userMessage(t, e.agent, wait)
	if um.Text != "plain *not bold*" {
		t.Fatalf("a plain message reached the agent as %q", um.Text)
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	e.quiet(time.Second)
}
