package matrix_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/markdown"
	"github.com/ximd/ximd/handlers/adapter/matrix"
	"github.com/ximd/ximd/test/dendrite"
)

// richContent is what a client reads of a text event's forms.
type richContent struct {
	Body          string       `json:"body"`
	Format        string       `json:"format"`
	FormattedBody string       `json:"formatted_body"`
	NewContent    *richContent `json:"m.new_content"`
	RelatesTo     *struct {
		RelType string     `json:"rel_type"`
		EventID id.EventID `json:"event_id"`
	} `json:"m.relates_to"`
}

// roomEvents is the room's message events as alice reads them, newest first.
func roomEvents(t *testing.T, u *dendrite.User, room id.RoomID) map[id.EventID]richContent {
	t.Helper()
	resp, err := u.Client.Messages(context.Background(), room, "", "", mautrix.DirectionBackward, &mautrix.FilterPart{Types: []event.Type{event.EventMessage}}, 200)
	if err != nil {
		t.Fatal(err)
	}
	out := map[id.EventID]richContent{}
	for _, ev := range resp.Chunk {
		var c richContent
		if err := json.Unmarshal(ev.Content.VeryRaw, &c); err != nil {
			t.Fatal(err)
		}
		out[ev.ID] = c
	}
	return out
}

// eventContent is one event's content as alice reads it.
func eventContent(t *testing.T, u *dendrite.User, room id.RoomID, ev string) richContent {
	t.Helper()
	var e *event.Event
	var err error
	eventually(t, "the event readable by "+u.Client.UserID.String(), func() bool { // Dendrite serves it a moment after accepting it
		e, err = u.Client.GetEvent(context.Background(), room, id.EventID(ev))
		return err == nil
	})
	var c richContent
	if err := json.Unmarshal(e.Content.VeryRaw, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// eventually polls f until it holds (Dendrite lists an event in /messages a moment after it
// accepted it).
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !f(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not so after 10 s: %s", what)
		}
	}
}

const answer = "Here is **the comparison**:\n\n| Platform | Limit |\n|---|---|\n| Matrix | 64 KiB |\n\n```go\nfmt.Println(\"<hi>\")\n```"

// edge-api §7.3 against a real Dendrite: a Markdown final is in the room as
// org.matrix.custom.html (its table and code block as HTML) with the plain text as body; a
// streamed answer's final edit carries both forms in m.new_content; a long answer in CJK text
// fits the homeserver's event size, cut between blocks.
func TestMatrix_MarkdownInTheRoom(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{})
	bot, alice := s.Register(t, "bot"), s.Register(t, "alice")
	room := s.Room(t, bot, false, alice)
	tg, err := matrix.New(matrix.Options{}).Open(config(t, s, bot, room, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	doc := markdown.Parse(answer)

	direct, err := tg.Send(ctx, adapter.Message{Text: answer, Final: true, IdempotencyKey: "md:direct"})
	if err != nil {
		t.Fatal(err)
	}
	c := eventContent(t, alice, room, direct)
	if c.Format != "org.matrix.custom.html" || c.Body != doc.Plain() || c.FormattedBody != doc.HTML(markdown.Matrix) ||
		!strings.Contains(c.FormattedBody, "<th>Platform</th>") || !strings.Contains(c.FormattedBody, `<pre><code class="language-go">fmt.Println(`) ||
		!strings.Contains(c.FormattedBody, "<strong>the comparison</strong>") {
		t.Fatalf("the final in the room: %+v", c)
	}

	streamed, err := tg.Send(ctx, adapter.Message{Text: "Here is **the", IdempotencyKey: "md:stream"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.(adapter.Editor).Edit(ctx, streamed, adapter.Message{Text: answer, Final: true, IdempotencyKey: "md:stream"}); err != nil {
		t.Fatal(err)
	}
	if first := eventContent(t, alice, room, streamed); first.Format != "org.matrix.custom.html" || first.Body != "Here is **the" {
		t.Errorf("the streamed preview: %+v", first)
	}
	var edit *richContent
	eventually(t, "the edit of the streamed message is in the room", func() bool {
		for _, e := range roomEvents(t, alice, room) {
			if e.RelatesTo != nil && e.RelatesTo.RelType == "m.replace" && e.RelatesTo.EventID == id.EventID(streamed) && e.NewContent != nil {
				edit = &e
			}
		}
		return edit != nil
	})
	if n := edit.NewContent; n.Format != c.Format || n.FormattedBody != c.FormattedBody || n.Body != c.Body {
		t.Errorf("the final edit's m.new_content %+v, want the direct final's forms %+v", n, c)
	}
	if !strings.HasPrefix(edit.Body, "* Here is the comparison") || edit.FormattedBody != "" {
		t.Errorf("the edit's fallback: body %q, formatted_body %q", edit.Body, edit.FormattedBody)
	}

	var long strings.Builder
	for long.Len() < 120000 {
		long.WriteString(strings.Repeat("这是一个很长的回答，", 30) + "\n\n")
	}
	if _, err := tg.Send(ctx, adapter.Message{Text: long.String(), Final: true, IdempotencyKey: "md:long"}); err != nil {
		t.Fatalf("a long CJK answer: %v", err)
	}
	var parts []dendrite.Message
	eventually(t, "the long answer is in the room in three or more events", func() bool {
		parts = parts[:0]
		for _, m := range alice.Messages(t, room) {
			if m.Sender == bot.ID && strings.HasPrefix(m.Body, "这是") {
				parts = append(parts, m)
			}
		}
		return len(parts) >= 3
	})
	for i, p := range parts {
		if strings.Contains(strings.TrimSpace(p.Body), "\n\n") && !strings.HasSuffix(strings.TrimSpace(p.Body), "，") {
			t.Errorf("part %d is cut inside a paragraph: …%q", i, p.Body[len(p.Body)-40:])
		}
	}
}
