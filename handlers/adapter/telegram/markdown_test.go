package telegram_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/telegram"
	"github.com/ximd/ximd/handlers/adapter/telegram/telegramtest"
)

// mdWorld is a private chat with a bot, and a target for it that counts its fall-backs.
type mdWorld struct {
	fake *telegramtest.Server
	chat int64
	fb   *adaptertest.Fallbacks
	tg   adapter.Target
}

func newMDWorld(t *testing.T, extra map[string]any) *mdWorld {
	t.Helper()
	fake := telegramtest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	bot := fake.AddBot("7301:md-secret", "md_bot")
	chat := fake.AddChat("private", "", fake.AddUser("Mia").ID)
	fb := &adaptertest.Fallbacks{}
	cfg := map[string]any{"edits_per_minute": 600}
	for k, v := range extra {
		cfg[k] = v
	}
	tg, err := telegram.New(telegram.Options{Common: adapter.Common{Renders: fb}}).Open(config(t, fake.URL(), bot, chat, cfg))
	if err != nil {
		t.Fatal(err)
	}
	return &mdWorld{fake: fake, chat: chat, fb: fb, tg: tg}
}

func (w *mdWorld) calls(method string) int {
	n := 0
	for _, c := range w.fake.Calls() {
		if c.Method == method {
			n++
		}
	}
	return n
}

// edit is a preview edit, taken when the chat's edit budget has room (a preview edit is refused
// with its retry time while it has none).
func edit(t *testing.T, ed adapter.Editor, id string, m adapter.Message) error {
	t.Helper()
	for {
		err := ed.Edit(ctx5(t), id, m)
		after, ok := adapter.RetryAfterOf(err)
		if !ok || m.Final {
			return err
		}
		time.Sleep(after)
	}
}

func ctx5(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

const answer = "## Results\n\n| Service | Status |\n|---|---|\n| API | ready |\n| Web | building |\n\n" +
	"```go\nfmt.Println(\"<hi>\")\n```\n\n- one\n- **two**\n"

// edge-api §7.3: a final is a rich message: Telegram shows its heading, table, code block and
// list itself, from the agent's Markdown as written.
func TestMarkdown_FinalIsARichMessage(t *testing.T) {
	w := newMDWorld(t, map[string]any{"streaming": "none"})
	if _, err := w.tg.Send(ctx5(t), adapter.Message{Text: answer, Final: true, IdempotencyKey: "md:final"}); err != nil {
		t.Fatal(err)
	}
	shown := w.fake.Messages(w.chat)
	if len(shown) != 1 || shown[0].Form != "rich" || shown[0].Rich != answer {
		t.Fatalf("shown %+v, want one rich message with the Markdown as written", shown)
	}
	if want := []string{"heading", "table", "pre", "list"}; !slices.Equal(shown[0].Blocks, want) {
		t.Fatalf("blocks %v, want %v", shown[0].Blocks, want)
	}
	if strings.Contains(shown[0].Text, "**") || strings.Contains(shown[0].Text, "|---") {
		t.Fatalf("the person sees Markdown source: %q", shown[0].Text)
	}
	if got := w.fb.All(); len(got) != 0 {
		t.Fatalf("fall-backs %v", got)
	}
}

// Raw HTML, a "$" and an image in the agent's Markdown are shown as written, not read by
// Telegram's rich Markdown (edge-api §7.3: raw HTML is text).
func TestMarkdown_RichMessageShowsRawHTMLAsText(t *testing.T) {
	w := newMDWorld(t, map[string]any{"streaming": "none"})
	text := "It costs $5 and $10. <b>not bold</b> ![logo](https://e.org/x.png)\n\n<div>block</div>"
	if _, err := w.tg.Send(ctx5(t), adapter.Message{Text: text, Final: true, IdempotencyKey: "md:raw"}); err != nil {
		t.Fatal(err)
	}
	shown := w.fake.Messages(w.chat)
	want := "It costs \\$5 and \\$10. \\<b>not bold\\</b> \\![logo](https://e.org/x.png)\n\n\\<div>block\\</div>"
	if len(shown) != 1 || shown[0].Rich != want {
		t.Fatalf("rich Markdown sent %q, want %q", shown[0].Rich, want)
	}
	if !strings.Contains(shown[0].Text, "$5 and $10. <b>not bold</b> !logo") || !strings.Contains(shown[0].Text, "<div>block</div>") {
		t.Fatalf("the person reads %q", shown[0].Text)
	}
}

// Draft previews are rich drafts; in "edit" streaming the preview is a rich message edited with
// rich_message, and the final its last edit.
func TestMarkdown_PreviewsAndEditsAreRich(t *testing.T) {
	w := newMDWorld(t, nil) // a private chat: draft streaming
	if err := w.tg.(adapter.Drafter).Draft(ctx5(t), "md:draft", "## Plan\n\n- first"); err != nil {
		t.Fatal(err)
	}
	if d := w.fake.Drafts(w.chat); len(d) != 1 || d[0].Form != "rich" || d[0].Rich != "## Plan\n\n- first" {
		t.Fatalf("drafts %+v, want one rich draft", d)
	}

	e := newMDWorld(t, map[string]any{"streaming": "edit"})
	id, err := e.tg.Send(ctx5(t), adapter.Message{Text: "## Plan\n\n- fir", IdempotencyKey: "md:edit"})
	if err != nil {
		t.Fatal(err)
	}
	ed := e.tg.(adapter.Editor)
	if err := edit(t, ed, id, adapter.Message{Text: "## Plan\n\n- first\n- sec", IdempotencyKey: "md:edit"}); err != nil {
		t.Fatal(err)
	}
	if err := ed.Edit(ctx5(t), id, adapter.Message{Text: answer, Final: true, IdempotencyKey: "md:edit"}); err != nil {
		t.Fatal(err)
	}
	shown := e.fake.Messages(e.chat)
	if len(shown) != 1 || shown[0].Form != "rich" || shown[0].Rich != answer || shown[0].Edits != 2 {
		t.Fatalf("shown %+v, want one rich message edited twice to the final", shown)
	}
	if n := e.calls("sendMessage"); n != 0 {
		t.Fatalf("%d sendMessage calls", n)
	}
}

// A server without rich messages refuses them (404): the final is sent once in Telegram's HTML,
// the fall-back counted once; the account's next message starts with HTML.
func TestMarkdown_RichRefusedFallsBackToHTMLOnce(t *testing.T) {
	w := newMDWorld(t, map[string]any{"streaming": "none"})
	w.fake.SetRich(false)
	if _, err := w.tg.Send(ctx5(t), adapter.Message{Text: "**bold** and `code`", Final: true, IdempotencyKey: "md:old1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.tg.Send(ctx5(t), adapter.Message{Text: "again *here*", Final: true, IdempotencyKey: "md:old2"}); err != nil {
		t.Fatal(err)
	}
	shown := w.fake.Messages(w.chat)
	if len(shown) != 2 || shown[0].Form != "html" || shown[0].Text != "bold and code" || shown[1].Text != "again here" {
		t.Fatalf("shown %+v, want two HTML messages", shown)
	}
	if want := []telegramtest.Entity{{Type: "bold", Offset: 0, Length: 4}, {Type: "code", Offset: 9, Length: 4}}; !slices.Equal(shown[0].Entities, want) {
		t.Fatalf("entities %+v, want %+v", shown[0].Entities, want)
	}
	if got := w.fb.All(); !slices.Equal(got, []string{"telegram/rich_unsupported"}) {
		t.Fatalf("fall-backs %v", got)
	}
	if n := w.calls("sendRichMessage"); n != 1 {
		t.Fatalf("%d sendRichMessage calls, want the one refused", n)
	}
}

// A rich message Telegram refuses for its content (a table of 21 columns: more than rich
// messages hold) is sent once in HTML, the table as a <pre> block.
func TestMarkdown_RichRefusedForItsContentFallsBackToHTML(t *testing.T) {
	w := newMDWorld(t, map[string]any{"streaming": "none"})
	var head, rule, row strings.Builder
	for i := range 21 {
		fmt.Fprintf(&head, "| c%d ", i)
		rule.WriteString("|---")
		fmt.Fprintf(&row, "| %d ", i)
	}
	text := "Wide:\n\n" + head.String() + "|\n" + rule.String() + "|\n" + row.String() + "|\n"
	if _, err := w.tg.Send(ctx5(t), adapter.Message{Text: text, Final: true, IdempotencyKey: "md:wide"}); err != nil {
		t.Fatal(err)
	}
	shown := w.fake.Messages(w.chat)
	if len(shown) != 1 || shown[0].Form != "html" || !slices.ContainsFunc(shown[0].Entities, func(e telegramtest.Entity) bool { return e.Type == "pre" }) {
		t.Fatalf("shown %+v, want one HTML message with the table in pre", shown)
	}
	if got := w.fb.All(); !slices.Equal(got, []string{"telegram/rich_refused"}) {
		t.Fatalf("fall-backs %v", got)
	}
}

// HTML refused too: the message is sent once more, as plain text, and shows once.
func TestMarkdown_HTMLRefusedFallsBackToPlainOnce(t *testing.T) {
	w := newMDWorld(t, map[string]any{"streaming": "none"})
	w.fake.SetRich(false)
	w.fake.FailNext("sendMessage", 1, http.StatusBadRequest, `Bad Request: can't parse entities: Unsupported start tag "x" at byte offset 0`, 0)
	if _, err := w.tg.Send(ctx5(t), adapter.Message{Text: "**bold** [link](https://e.org)", Final: true, IdempotencyKey: "md:plain"}); err != nil {
		t.Fatal(err)
	}
	shown := w.fake.Messages(w.chat)
	if len(shown) != 1 || shown[0].Form != "" || shown[0].Text != "bold link (https://e.org)" {
		t.Fatalf("shown %+v, want one plain message", shown)
	}
	if got := w.fb.All(); !slices.Equal(got, []string{"telegram/rich_unsupported", "telegram/html_refused"}) {
		t.Fatalf("fall-backs %v", got)
	}
}

// A streamed message whose rich preview was refused keeps editing in the form that worked: its
// edits and the final are HTML, with no other rich call.
func TestMarkdown_StreamedMessageKeepsTheFormThatWorked(t *testing.T) {
	w := newMDWorld(t, map[string]any{"streaming": "edit"})
	w.fake.FailNext("sendRichMessage", 1, http.StatusBadRequest, "Bad Request: RICH_MESSAGE_BLOCKS_TOO_MANY", 0)
	id, err := w.tg.Send(ctx5(t), adapter.Message{Text: "first **words**", IdempotencyKey: "md:keep"})
	if err != nil {
		t.Fatal(err)
	}
	ed := w.tg.(adapter.Editor)
	if err := edit(t, ed, id, adapter.Message{Text: "first **words** and", IdempotencyKey: "md:keep"}); err != nil {
		t.Fatal(err)
	}
	if err := ed.Edit(ctx5(t), id, adapter.Message{Text: "first **words** and more.", Final: true, IdempotencyKey: "md:keep"}); err != nil {
		t.Fatal(err)
	}
	shown := w.fake.Messages(w.chat)
	if len(shown) != 1 || shown[0].Form != "html" || shown[0].Text != "first words and more." || shown[0].Edits != 2 {
		t.Fatalf("shown %+v, want one HTML message edited to the final", shown)
	}
	if n := w.calls("sendRichMessage"); n != 1 {
		t.Fatalf("%d sendRichMessage calls, want the one refused", n)
	}
	if got := w.fb.All(); !slices.Equal(got, []string{"telegram/rich_refused"}) {
		t.Fatalf("fall-backs %v", got)
	}
}

// A 40,000-character answer is two rich messages (32,768 characters a message), cut between
// paragraphs, together the whole text.
func TestMarkdown_LongAnswerIsTwoRichMessages(t *testing.T) {
	w := newMDWorld(t, map[string]any{"streaming": "none"})
	var b strings.Builder
	for i := 0; b.Len() < 40000; i++ {
		fmt.Fprintf(&b, "Paragraph %d of a long answer, with **bold** words and enough text to fill a line or two of the chat.\n\n", i)
	}
	text := strings.TrimSpace(b.String())
	if _, err := w.tg.Send(ctx5(t), adapter.Message{Text: text, Final: true, IdempotencyKey: "md:long"}); err != nil {
		t.Fatal(err)
	}
	shown := w.fake.Messages(w.chat)
	if len(shown) != 2 {
		t.Fatalf("%d messages, want 2", len(shown))
	}
	var parts []string
	for _, m := range shown {
		if m.Form != "rich" || len([]rune(m.Rich)) > telegram.MaxTextLength || !strings.HasSuffix(m.Rich, "chat.") {
			t.Fatalf("a part of %d characters (%s), not cut between paragraphs", len(m.Rich), m.Form)
		}
		parts = append(parts, m.Rich)
	}
	if strings.Join(strings.Fields(strings.Join(parts, " ")), " ") != strings.Join(strings.Fields(text), " ") {
		t.Fatal("the two messages are not the answer")
	}
}
