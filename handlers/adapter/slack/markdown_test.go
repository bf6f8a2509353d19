package slack_test

import (
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/markdown"
	"github.com/ximd/ximd/handlers/adapter/slack"
	"github.com/ximd/ximd/handlers/adapter/slack/slacktest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	adaptertest.Golden(t, filepath.Join("testdata", name), got, *update)
}

// markdownWorld is a DM whose channel posts without streaming, with its fall-backs counted.
func markdownWorld(t *testing.T, streaming string) (*slacktest.Server, string, adapter.Target, *adaptertest.Fallbacks) {
	t.Helper()
	fake := slacktest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	bot := fake.AddBot("bot")
	ch := fake.AddChannel("im", "", fake.AddUser("Dan"))
	fb := &adaptertest.Fallbacks{}
	tg, err := slack.New(slack.Options{Common: adapter.Common{Renders: fb}}).Open(config(t, fake, bot, ch, "", map[string]any{"activity": "none", "streaming": streaming}))
	if err != nil {
		t.Fatal(err)
	}
	return fake, ch, tg, fb
}

// edge-api §7.3 (slack): a final is posted with a markdown block of the agent's Markdown and
// `text` its plain form (never mrkdwn); the golden file is what chat.postMessage carried.
func TestMarkdown_FinalIsAMarkdownBlockWithPlainText(t *testing.T) {
	fake, ch, tg, fb := markdownWorld(t, "none")
	if _, err := tg.Send(context.Background(), adapter.Message{Text: adaptertest.Sample(t, "testdata/sample.md"), Final: true, IdempotencyKey: "c:md"}); err != nil {
		t.Fatal(err)
	}
	msgs := fake.Messages(ch)
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
	var blocks any
	if err := json.Unmarshal(msgs[0].Blocks, &blocks); err != nil {
		t.Fatalf("blocks %s: %v", msgs[0].Blocks, err)
	}
	golden(t, "sample.post.golden.json", adaptertest.IndentJSON(t, map[string]any{"text": msgs[0].Text, "blocks": blocks}))
	if msgs[0].Markdown != markdown.Parse(adaptertest.Sample(t, "testdata/sample.md")).Slack() || strings.Contains(msgs[0].Text, "**") || strings.Contains(msgs[0].Text, "```") {
		t.Errorf("markdown %q, text %q: want the Markdown in the block and plain text beside it", msgs[0].Markdown, msgs[0].Text)
	}
	if n := fb.Count(); len(n) != 0 {
		t.Errorf("fall-backs %v, want none", n)
	}
}

// A streamed answer's markdown_text is the Markdown form, and its final shows the same as a
// direct final of the same text.
func TestMarkdown_StreamCarriesMarkdownText(t *testing.T) {
	fake, ch, tg, _ := markdownWorld(t, "stream")
	ctx := context.Background()
	text := adaptertest.Sample(t, "testdata/sample.md")
	id, err := tg.Send(ctx, adapter.Message{Text: text[:40], IdempotencyKey: "c:s"})
	if err != nil {
		t.Fatal(err)
	}
	ed, _ := adapter.EditorOf(tg)
	if err := ed.Edit(ctx, id, adapter.Message{Text: text[:120], IdempotencyKey: "c:s"}); err != nil {
		t.Fatal(err)
	}
	if err := ed.Edit(ctx, id, adapter.Message{Text: text, Final: true, IdempotencyKey: "c:s"}); err != nil {
		t.Fatal(err)
	}
	starts := 0
	for _, c := range fake.Calls() {
		starts += map[bool]int{true: 1}[c.Method == "chat.startStream"]
	}
	msgs := fake.Messages(ch)
	shows := msgs[0].Text
	if msgs[0].Markdown != "" {
		shows = msgs[0].Markdown
	}
	if starts != 1 || len(msgs) != 1 || msgs[0].Streaming || shows != markdown.Parse(text).Slack() {
		t.Fatalf("%d starts, messages %+v: want one stream showing the Markdown", starts, msgs)
	}
}

// edge-api §7.3: blocks Slack refuses (invalid_blocks) cost nothing: the same message goes as
// plain text, once, and the fall-back is counted; a failure that is no refusal (Slack's
// internal_error) is not a fall-back and sends nothing plain.
func TestMarkdown_RefusedBlocksFallBackToPlainTextOnce(t *testing.T) {
	fake, ch, tg, fb := markdownWorld(t, "none")
	ctx := context.Background()
	fake.FailNext("chat.postMessage", 1, "invalid_blocks", 0, 0)
	if _, err := tg.Send(ctx, adapter.Message{Text: adaptertest.Sample(t, "testdata/sample.md"), Final: true, IdempotencyKey: "c:fb"}); err != nil {
		t.Fatal(err)
	}
	msgs := fake.Messages(ch)
	if len(msgs) != 1 || msgs[0].Blocks != nil || !strings.Contains(msgs[0].Text, "• parse the config") || strings.Contains(msgs[0].Text, "**") {
		t.Fatalf("messages %+v: want one plain message", msgs)
	}
	if n := fb.Count(); n["slack/invalid_blocks"] != 1 || len(n) != 1 {
		t.Fatalf("fall-backs %v, want slack/invalid_blocks once", n)
	}

	fake.FailNext("chat.postMessage", 1, "internal_error", 0, 0)
	if _, err := tg.Send(ctx, adapter.Message{Text: "**again**", Final: true, IdempotencyKey: "c:err"}); err == nil {
		t.Fatal("an internal_error was taken for delivered")
	}
	if got := len(fake.Messages(ch)); got != 1 {
		t.Fatalf("%d messages after an internal_error, want no plain copy", got)
	}
	if n := fb.Count(); n["slack/invalid_blocks"] != 1 || len(n) != 1 {
		t.Fatalf("fall-backs %v after an internal_error, want none more", n)
	}
}

// The fake refuses blocks as Slack does: an unknown block type, and markdown blocks past 12,000
// characters in one message.
func TestMarkdown_FakeChecksBlocksAsSlack(t *testing.T) {
	fake, ch, _, _ := markdownWorld(t, "none")
	bot := fake.AddBot("raw")
	long := strings.Repeat("a", 7000)
	for _, c := range []struct {
		blocks, want string
	}{
		{`[{"type":"markdown","text":"**ok**"}]`, ""},
		{`[{"type":"mrkdwn_block","text":"x"}]`, "invalid_blocks"},
		{`[{"type":"markdown","text":"` + long + long + `"}]`, "invalid_blocks"},
		{`[{"type":"markdown","text":"` + long + `"},{"type":"markdown","text":"` + long + `"}]`, "msg_blocks_too_long"},
		{`{"type":"markdown"}`, "invalid_blocks_format"},
	} {
		got := rawPost(t, fake, bot, ch, c.blocks)
		if got != c.want {
			t.Errorf("%.60s: error %q, want %q", c.blocks, got, c.want)
		}
	}
}

// A long final is split so each message's markdown block fits Slack's 12,000 characters.
func TestMarkdown_LongFinalSplitsIntoFittingBlocks(t *testing.T) {
	fake, ch, tg, fb := markdownWorld(t, "none")
	para := strings.Repeat("word ", 199) + "end.\n\n"
	text := strings.Repeat(para, 30) // about 30,000 characters
	if _, err := tg.Send(context.Background(), adapter.Message{Text: text, Final: true, IdempotencyKey: "c:long"}); err != nil {
		t.Fatal(err)
	}
	msgs := fake.Messages(ch)
	if len(msgs) < 3 {
		t.Fatalf("%d messages, want the text in 3 or more", len(msgs))
	}
	for i, m := range msgs {
		if m.Markdown == "" || len([]rune(m.Markdown)) > slack.MaxTextLength {
			t.Errorf("part %d: %d characters of markdown", i, len([]rune(m.Markdown)))
		}
	}
	if n := fb.Count(); len(n) != 0 {
		t.Errorf("fall-backs %v, want none", n)
	}
}

// rawPost calls chat.postMessage on the fake with blocks as given; it returns Slack's error.
func rawPost(t *testing.T, fake *slacktest.Server, bot slacktest.Bot, ch, blocks string) string {
	t.Helper()
	resp, err := http.PostForm(fake.URL()+"chat.postMessage", url.Values{"token": {bot.Token}, "channel": {ch}, "text": {"fallback"}, "blocks": {blocks}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Error
}

// edge-api §7.3 inbound: a person's rich text (bold, italic, strike, code, links, emoji, lists,
// a code block, a quote) reaches xAgent as the same Markdown; the golden file is that Markdown.
func TestMarkdown_InboundRichTextIsMarkdown(t *testing.T) {
	w := newBotWorld(t, `{"direct": "open"}`)
	ann := w.fake.AddUser("Ann")
	dm := w.fake.AddChannel("im", "", ann)
	blocks, err := os.ReadFile(filepath.Join("testdata", "rich_text.json"))
	if err != nil {
		t.Fatal(err)
	}
	w.fake.PostRich(dm, ann, "The run *passed* with `3` warnings", blocks, "")
	w.fake.Post(dm, ann, "plain *stars* stay", "")
	conv := adapter.Conversation{Kind: adapter.Direct, ID: dm}
	eventually(t, "both messages", func() bool { return len(w.texts(conv)) == 2 })
	got := w.texts(conv) // in the order they arrived, which events do not promise
	if !strings.HasPrefix(got[0], "The run") {
		got[0], got[1] = got[1], got[0]
	}
	golden(t, "rich_text.golden.md", []byte(got[0]+"\n"))
	if got[1] != "plain *stars* stay" {
		t.Errorf("a plain message became %q", got[1])
	}
}
