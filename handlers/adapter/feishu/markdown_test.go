package feishu_test

import (
	"context"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/feishu"
	"github.com/ximd/ximd/handlers/adapter/feishu/feishutest"
	"github.com/ximd/ximd/handlers/adapter/markdown"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	adaptertest.Golden(t, filepath.Join("testdata", name), got, *update)
}

// markdownWorld is a p2p chat of one app, its fall-backs counted.
func markdownWorld(t *testing.T, streaming string) (*feishutest.Server, string, adapter.Target, *adaptertest.Fallbacks) {
	t.Helper()
	fake := feishutest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	app := fake.AddApp("cli_md", "md-secret", "md bot")
	chat := fake.AddChat("p2p", "", fake.AddUser("Mei"))
	fb := &adaptertest.Fallbacks{}
	tg, err := feishu.New(feishu.Options{Common: adapter.Common{Renders: fb}}).Open(config(t, fake.URL(), app, chat, map[string]any{"streaming": streaming}))
	if err != nil {
		t.Fatal(err)
	}
	return fake, chat, tg, fb
}

// edge-api §7.3 (feishu): a final is a card whose markdown element holds the agent's Markdown in
// the card's form; the golden file is the card sent.
func TestMarkdown_FinalIsACardMarkdownElement(t *testing.T) {
	fake, chat, tg, fb := markdownWorld(t, "none")
	if _, err := tg.Send(context.Background(), adapter.Message{Text: adaptertest.Sample(t, "testdata/sample.md"), Final: true, IdempotencyKey: "c:md"}); err != nil {
		t.Fatal(err)
	}
	msgs := fake.Messages(chat)
	if len(msgs) != 1 || msgs[0].MsgType != "interactive" || msgs[0].Card == nil {
		t.Fatalf("messages %+v: want one card", msgs)
	}
	golden(t, "sample.card.golden.json", adaptertest.IndentJSONText(t, msgs[0].Content))
	if want := markdown.Parse(adaptertest.Sample(t, "testdata/sample.md")).Feishu(feishu.CardTables); msgs[0].Card.Text != want {
		t.Errorf("the card shows %q, want %q", msgs[0].Card.Text, want)
	}
	if n := fb.Count(); len(n) != 0 {
		t.Errorf("fall-backs %v, want none", n)
	}
}

// A streamed card shows the Markdown form of the text so far, and its final the same as a direct
// final's card.
func TestMarkdown_StreamedCardEndsAsTheDirectFinal(t *testing.T) {
	fake, chat, tg, fb := markdownWorld(t, "card")
	ctx := context.Background()
	text := adaptertest.Sample(t, "testdata/sample.md")
	id, err := tg.Send(ctx, adapter.Message{Text: text[:40], IdempotencyKey: "c:s"})
	if err != nil {
		t.Fatal(err)
	}
	ed, _ := adapter.EditorOf(tg)
	for _, m := range []adapter.Message{{Text: text[:150], IdempotencyKey: "c:s"}, {Text: text, Final: true, IdempotencyKey: "c:s"}} {
		if err := ed.Edit(ctx, id, m); err != nil {
			t.Fatal(err)
		}
	}
	msgs := fake.Messages(chat)
	want := markdown.Parse(text).Feishu(feishu.CardTables)
	if len(msgs) != 1 || msgs[0].Card == nil || msgs[0].Card.Streaming || msgs[0].Card.Text != want {
		t.Fatalf("messages %+v: want one finished card showing %q", msgs, want)
	}
	if n := fb.Count(); len(n) != 0 {
		t.Errorf("fall-backs %v, want none", n)
	}
}

// edge-api §7.3: a card Feishu refuses for its content (230099, ErrCode 11310) costs nothing: the
// same final goes as a plain post, once, counted; a server error is no refusal and sends nothing
// plain.
func TestMarkdown_RefusedCardFallsBackToPlainPostOnce(t *testing.T) {
	fake, chat, tg, fb := markdownWorld(t, "none")
	ctx := context.Background()
	fake.FailNext(feishutest.RouteMessages, 1, http.StatusBadRequest, 230099,
		"Failed to create card content, ext=ErrCode: 11310; ErrMsg: card table number over limit; ErrorValue: table; ", 0)
	if _, err := tg.Send(ctx, adapter.Message{Text: adaptertest.Sample(t, "testdata/sample.md"), Final: true, IdempotencyKey: "c:fb"}); err != nil {
		t.Fatal(err)
	}
	msgs := fake.Messages(chat)
	if len(msgs) != 1 || msgs[0].MsgType != "post" || !strings.Contains(msgs[0].Text, "• parse the config") || strings.Contains(msgs[0].Text, "**") {
		t.Fatalf("messages %+v: want one plain post", msgs)
	}
	golden(t, "sample.post.golden.json", adaptertest.IndentJSONText(t, msgs[0].Content))
	if n := fb.Count(); n["feishu/card_refused"] != 1 || len(n) != 1 {
		t.Fatalf("fall-backs %v, want feishu/card_refused once", n)
	}

	fake.FailNext(feishutest.RouteMessages, 1, http.StatusInternalServerError, 1500, "internal error", 0)
	if _, err := tg.Send(ctx, adapter.Message{Text: "**again**", Final: true, IdempotencyKey: "c:err"}); err == nil {
		t.Fatal("a server error was taken for delivered")
	}
	if got := len(fake.Messages(chat)); got != 1 {
		t.Fatalf("%d messages after a server error, want no plain copy", got)
	}
	if n := fb.Count(); len(n) != 1 || n["feishu/card_refused"] != 1 {
		t.Fatalf("fall-backs %v after a server error, want none more", n)
	}
}

// More tables than a card holds never cost the answer: it is delivered once, as a card within
// Feishu's table budget or, refused, as plain text; the fake refuses what Feishu refuses.
func TestMarkdown_TooManyTablesDeliveredOnce(t *testing.T) {
	for _, streaming := range []string{"none", "card"} {
		t.Run(streaming, func(t *testing.T) {
			fake, chat, tg, _ := markdownWorld(t, streaming)
			var b strings.Builder
			for i := range 7 {
				b.WriteString("Table " + string(rune('A'+i)) + ":\n\n| k | v |\n|---|---|\n| a | 1 |\n\n")
			}
			text := b.String()
			ctx := context.Background()
			if streaming == "none" {
				if _, err := tg.Send(ctx, adapter.Message{Text: text, Final: true, IdempotencyKey: "c:t"}); err != nil {
					t.Fatal(err)
				}
			} else {
				id, err := tg.Send(ctx, adapter.Message{Text: text[:60], IdempotencyKey: "c:t"})
				if err != nil {
					t.Fatal(err)
				}
				ed, _ := adapter.EditorOf(tg)
				if err := ed.Edit(ctx, id, adapter.Message{Text: text, Final: true, IdempotencyKey: "c:t"}); err != nil {
					t.Fatal(err)
				}
			}
			msgs := fake.Messages(chat)
			if len(msgs) != 1 || !strings.Contains(msgs[0].Text, "Table G") {
				t.Fatalf("messages %+v: want the whole answer once", msgs)
			}
			if msgs[0].Card != nil && strings.Count(msgs[0].Text, "|---|") > 5 {
				t.Fatalf("a card with %d tables was accepted", strings.Count(msgs[0].Text, "|---|"))
			}
		})
	}
}

// edge-api §7.3 inbound: a person's rich-text (post) message reaches xAgent as Markdown: its
// title, styles, link, mention, emoji, code block and md runs; the golden file is that Markdown.
func TestMarkdown_InboundPostIsMarkdown(t *testing.T) {
	w := newBotWorld(t, `{"direct": "open"}`, time.Now().Add(-time.Minute))
	mei, bob := w.fake.AddUser("Mei"), w.fake.AddUser("Bob")
	chat := w.fake.AddChat("p2p", "", mei)
	content, err := os.ReadFile(filepath.Join("testdata", "post.json"))
	if err != nil {
		t.Fatal(err)
	}
	w.fake.PostRich(chat, mei, content, bob.OpenID)
	ch := adapter.Conversation{Kind: adapter.Direct, ID: chat}.ChannelID(w.bot.ID)
	eventually(t, "the post", func() bool { return len(w.texts(ch)) == 1 })
	golden(t, "post.golden.md", []byte(w.texts(ch)[0]+"\n"))
}
