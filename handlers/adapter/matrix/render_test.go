package matrix

import (
	"context"
	"encoding/json"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/markdown"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name (rewritten with -update).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	adaptertest.Golden(t, filepath.Join("testdata", name), got, *update)
}

// agentSample is the shared sample of agent Markdown the golden files render.
const agentSample = "../markdown/testdata/agent.md"

func eventsOf(t *testing.T, m adapter.Message) []outEvent {
	t.Helper()
	tg := &Target{a: New(Options{}), cfg: &config{}}
	evs, err := tg.events(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// edge-api §7.3: the shared sample's final, and its edit, as the room receives them: body the
// plain text, formatted_body the HTML (org.matrix.custom.html), both in the edit's m.new_content.
func TestEventContentGolden(t *testing.T) {
	m := adapter.Message{Text: adaptertest.Sample(t, agentSample), Final: true, IdempotencyKey: "golden:m1"}
	evs := eventsOf(t, m)
	if len(evs) != 1 {
		t.Fatalf("%d events for the sample, want 1", len(evs))
	}
	golden(t, "agent.event.json", adaptertest.IndentJSON(t, evs[0].content))
	golden(t, "agent.edit.json", adaptertest.IndentJSON(t, editOf("$first", true, evs[0]).content))
}

// A person's formatted_body of the shared sample (as the adapter itself writes it) reaches the
// agent as this Markdown.
func TestInboundMarkdownGolden(t *testing.T) {
	golden(t, "agent.inbound.md", []byte(MarkdownOf(markdown.Parse(adaptertest.Sample(t, agentSample)).HTML(markdown.Matrix))+"\n"))
}

// Every text event carries both forms; a streamed preview is rendered so far (an open fence is a
// code block, a half-written "**" text), and the final's content is the same as a direct final's.
func TestEveryTextCarriesHTML(t *testing.T) {
	preview := eventsOf(t, adapter.Message{Text: "Some **bold and\n```go\nfunc x() {", IdempotencyKey: "k"})[0].content
	if preview["format"] != FormatHTML || !strings.Contains(preview["formatted_body"].(string), `<pre><code class="language-go">func x() {</code></pre>`) ||
		!strings.Contains(preview["formatted_body"].(string), "Some **bold and") {
		t.Errorf("preview: %v", preview)
	}
	text := "# Title\n\n| a | b |\n|---|---|\n| 1 | 2 |"
	streamed := eventsOf(t, adapter.Message{Text: text, Final: true, IdempotencyKey: "k"})[0].content
	direct := eventsOf(t, adapter.Message{Text: text, Final: true, IdempotencyKey: "k"})[0].content
	if string(adaptertest.IndentJSON(t, streamed)) != string(adaptertest.IndentJSON(t, direct)) {
		t.Errorf("a streamed final %v differs from a direct one %v", streamed, direct)
	}
	if e := editOf("$x", true, eventsOf(t, adapter.Message{Text: "**a**", Final: true})[0]); e.txn == editOf("$x", true, eventsOf(t, adapter.Message{Text: "a", Final: true})[0]).txn {
		t.Error("two edits that differ only in formatting have one transaction id: the second would be taken for the first")
	}
}

// A Matrix event is at most 64 KiB: a long answer in CJK text or emoji (3 and 4 bytes a
// character, in body and in formatted_body) is cut into events that fit, not refused.
func TestPartsFitTheEventSize(t *testing.T) {
	for _, unit := range []string{"你好世界，这是一个很长的回答。", "🎉🚀 **emoji** ✅", "plain words in a paragraph "} {
		var b strings.Builder
		for i := 0; b.Len() < 200000; i++ {
			b.WriteString(strings.Repeat(unit, 20))
			b.WriteString("\n\n")
		}
		evs := eventsOf(t, adapter.Message{Text: b.String(), Final: true, IdempotencyKey: "long"})
		for i, ev := range evs {
			raw, _ := json.Marshal(ev.content)
			if len(raw) > 62000 { // 64 KiB less the room the server's own fields take
				t.Fatalf("%q: part %d of %d is %d bytes of content", unit, i, len(evs), len(raw))
			}
			if edit, _ := json.Marshal(editOf("$x", true, ev).content); len(edit) > 64000 {
				t.Fatalf("%q: the edit of part %d is %d bytes", unit, i, len(edit))
			}
		}
		preview, _ := json.Marshal(eventsOf(t, adapter.Message{Text: b.String(), IdempotencyKey: "long"})[0].content)
		if len(preview) > 62000 {
			t.Fatalf("%q: a preview of %d bytes", unit, len(preview))
		}
	}
}
