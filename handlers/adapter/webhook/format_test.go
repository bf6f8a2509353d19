package webhook_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/markdown"
	"github.com/ximd/ximd/handlers/adapter/webchat/webchattest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// messageBody is a POST or PATCH body as a target reads it.
type messageBody struct {
	Text string  `json:"text"`
	HTML *string `json:"html"`
}

func bodies(t *testing.T, f *fakeTarget) []messageBody {
	t.Helper()
	var out []messageBody
	for _, r := range f.requests() {
		var b messageBody
		if err := json.Unmarshal(r.Body, &b); err != nil {
			t.Fatalf("%s %s: %v", r.Method, r.Path, err)
		}
		out = append(out, b)
	}
	return out
}

// edge-api §7.1, §7.3: with config format "html" every message call, the streamed POST and
// PATCHes and the final PATCH, carries "html", the text rendered as the webchat page shows it;
// "text" stays the agent's Markdown. The final's html is what a direct final of the same text
// carries.
func TestWebhook_FormatHTMLAddsTheRenderedText(t *testing.T) {
	f := newFakeTarget(t)
	tg := open(t, f.URL, map[string]any{"format": "html"})
	steps := []string{"Here is **bo", "Here is **bold**\n\n| a | b |\n|---|", "Here is **bold**\n\n| a | b |\n|---|---|\n| 1 | `x` |"}
	id, err := tg.Send(t.Context(), adapter.Message{Text: steps[0], IdempotencyKey: "cch_1:m1"})
	if err != nil {
		t.Fatal(err)
	}
	ed := mustEditor(t, tg)
	for i, s := range steps[1:] {
		if err := ed.Edit(t.Context(), id, adapter.Message{Text: s, Final: i == len(steps)-2}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tg.Send(t.Context(), adapter.Message{Text: steps[2], Final: true, IdempotencyKey: "cch_1:m2"}); err != nil {
		t.Fatal(err)
	}
	got := bodies(t, f)
	if len(got) != 4 {
		t.Fatalf("%d calls, want 4", len(got))
	}
	for i, b := range got {
		want := steps[min(i, 2)]
		if b.Text != want {
			t.Errorf("call %d: text %q, want the Markdown %q", i, b.Text, want)
		}
		if b.HTML == nil {
			t.Fatalf("call %d has no html", i)
		}
		if *b.HTML != markdown.Parse(want).HTML(markdown.Web) {
			t.Errorf("call %d: html %q, want markdown.Web of the text", i, *b.HTML)
		}
		if err := webchattest.CheckHTML(*b.HTML); err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	if *got[2].HTML != *got[3].HTML {
		t.Errorf("the streamed final renders %q, a direct final %q", *got[2].HTML, *got[3].HTML)
	}
	if r := f.requests()[1]; r.Method != http.MethodPatch {
		t.Errorf("second call %s, want PATCH", r.Method)
	}
}

// Without "format" (or with "markdown") the bodies are as edge-api §7.1 has them: no "html".
func TestWebhook_FormatMarkdownSendsTextOnly(t *testing.T) {
	for _, format := range []any{nil, "markdown"} {
		f := newFakeTarget(t)
		tg := open(t, f.URL, map[string]any{"format": format})
		id, err := tg.Send(t.Context(), adapter.Message{Text: "**x**", IdempotencyKey: "cch_1:m1"})
		if err != nil {
			t.Fatal(err)
		}
		if err := mustEditor(t, tg).Edit(t.Context(), id, adapter.Message{Text: "**x** y", Final: true}); err != nil {
			t.Fatal(err)
		}
		for _, r := range f.requests() {
			if _, ok := decodeObject(t, r.Body)["html"]; ok {
				t.Errorf("format %v: %s %s carries html: %s", format, r.Method, r.Path, r.Body)
			}
		}
	}
}

// A message without text (files only) and ximd's own message (a pairing answer) carry "html"
// too, so a target with format "html" can always read it.
func TestWebhook_FormatHTMLOnEveryMessageCall(t *testing.T) {
	f := newFakeTarget(t)
	tg := open(t, f.URL, map[string]any{"format": "html"})
	if _, err := tg.Send(t.Context(), adapter.Message{Files: []adapter.File{sampleFile}, Final: true, IdempotencyKey: "cch_1:m1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Send(t.Context(), adapter.Message{Text: "Your code is `123456`.", Final: true, System: true, IdempotencyKey: "cch_1:pair"}); err != nil {
		t.Fatal(err)
	}
	got := bodies(t, f)
	if got[0].HTML == nil || *got[0].HTML != "" {
		t.Errorf("files only: html %v, want \"\"", got[0].HTML)
	}
	if got[1].HTML == nil || *got[1].HTML != "<p>Your code is <code>123456</code>.</p>" {
		t.Errorf("pairing answer: html %v", got[1].HTML)
	}
}

// edge-api §7.3: a hostile agent text reaches the target's html only as text.
func TestWebhook_FormatHTMLKeepsHostileTextText(t *testing.T) {
	f := newFakeTarget(t)
	tg := open(t, f.URL, map[string]any{"format": "html"})
	for _, h := range webchattest.XSS {
		if _, err := tg.Send(t.Context(), adapter.Message{Text: h.Markdown, Final: true, IdempotencyKey: "cch_1:" + h.Name}); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range bodies(t, f) {
		h := webchattest.XSS[i]
		if b.Text != h.Markdown {
			t.Errorf("%s: text changed to %q", h.Name, b.Text)
		}
		if err := webchattest.CheckHTML(*b.HTML); err != nil {
			t.Errorf("%s: html %q: %v", h.Name, *b.HTML, err)
		}
	}
}

// The POST a target with format "html" gets for the shared agent sample
// (markdown/testdata/agent.md): golden, reviewed by eye (-update rewrites it).
func TestWebhook_FormatHTMLGolden(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "markdown", "testdata", "agent.md"))
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeTarget(t)
	if _, err := open(t, f.URL, map[string]any{"format": "html"}).Send(t.Context(), adapter.Message{Text: string(src), Final: true, IdempotencyKey: "cch_1:m1"}); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := json.Indent(&got, f.only(t).Body, "", "  "); err != nil {
		t.Fatal(err)
	}
	got.WriteByte('\n')
	golden := filepath.Join("testdata", "agent.post.json")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -run TestWebhook_FormatHTMLGolden -update writes it)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("POST body for the sample changed:\n%s\nwant (%s):\n%s", got.Bytes(), golden, want)
	}
}
