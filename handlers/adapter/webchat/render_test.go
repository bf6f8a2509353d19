package webchat_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ximd/ximd/handlers/adapter/markdown"
	"github.com/ximd/ximd/handlers/adapter/webchat"
	"github.com/ximd/ximd/handlers/adapter/webchat/webchattest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// edge-api §7.3: an assistant message reaches the page with its Markdown rendered (the Web
// form); a person's own message, a status, and any html a stored item carries reach it without
// markup.
func TestForPageRendersOnlyTheAgentsMarkdown(t *testing.T) {
	t.Parallel()
	const md = "**bold** and `code`\n\n| a | b |\n|---|---|\n| 1 | 2 |"
	tests := []struct {
		name string
		item webchat.Item
		want string
	}{
		{name: "assistant streamed part", item: webchat.Item{Kind: webchat.KindMessage, Role: webchat.RoleAssistant, Text: md[:12]}, want: markdown.Parse(md[:12]).HTML(markdown.Web)},
		{name: "assistant final", item: webchat.Item{Kind: webchat.KindMessage, Role: webchat.RoleAssistant, Text: md, Final: true}, want: markdown.Parse(md).HTML(markdown.Web)},
		{name: "assistant with a stored html", item: webchat.Item{Kind: webchat.KindMessage, Role: webchat.RoleAssistant, Text: "hi", HTML: "<script>alert(1)</script>"}, want: "<p>hi</p>"},
		{name: "person's message stays text", item: webchat.Item{Kind: webchat.KindMessage, Role: webchat.RoleUser, Text: md}},
		{name: "person's message with a stored html", item: webchat.Item{Kind: webchat.KindMessage, Role: webchat.RoleUser, Text: "x", HTML: "<img src=x onerror=alert(1)>"}},
		{name: "status", item: webchat.Item{Kind: webchat.KindStatus, Status: "thinking", HTML: "<b>x</b>"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.item.ForPage()
			if got.HTML != tt.want {
				t.Fatalf("ForPage().HTML = %q, want %q", got.HTML, tt.want)
			}
			if got.Text != tt.item.Text {
				t.Fatalf("ForPage changed the text: %q", got.Text)
			}
		})
	}
	if h := (webchat.Item{Kind: webchat.KindMessage, Role: webchat.RoleAssistant, Text: md, Final: true}).ForPage().HTML; !strings.Contains(h, "<table>") || !strings.Contains(h, "<strong>bold</strong>") {
		t.Fatalf("the final renders no table or bold: %s", h)
	}
}

// edge-api §7.3: no agent text brings markup outside the page's allow-list, at any point of its
// stream: every prefix of every hostile text renders to allowed tags and attributes only, and
// the markup it tried is shown as text.
func TestPageDataKeepsHostileTextText(t *testing.T) {
	t.Parallel()
	for _, h := range webchattest.XSS {
		t.Run(h.Name, func(t *testing.T) {
			for i := 1; i <= len(h.Markdown); i++ {
				if i < len(h.Markdown) && !utf8.RuneStart(h.Markdown[i]) {
					continue
				}
				stored := webchat.Item{Kind: webchat.KindMessage, Role: webchat.RoleAssistant, Text: h.Markdown[:i], Final: i == len(h.Markdown), HTML: h.Markdown}
				b, err := jsonMarshal(stored)
				if err != nil {
					t.Fatal(err)
				}
				it, data, err := webchat.PageData(b)
				if err != nil {
					t.Fatal(err)
				}
				if err := webchattest.CheckHTML(it.HTML); err != nil {
					t.Fatalf("prefix %q renders %q: %v", h.Markdown[:i], it.HTML, err)
				}
				if !bytes.Contains(data, []byte(`"html":`)) && strings.TrimSpace(h.Markdown[:i]) != "" {
					t.Fatalf("page data %s has no html", data)
				}
			}
			full := (webchat.Item{Kind: webchat.KindMessage, Role: webchat.RoleAssistant, Text: h.Markdown}).ForPage().HTML
			if h.Shows != "" && !strings.Contains(webchattest.Text(full), h.Shows) {
				t.Fatalf("%q renders %q: its markup %q is not shown as text", h.Markdown, full, h.Shows)
			}
		})
	}
}

// The shared agent sample (markdown/testdata/agent.md) as the page gets it: golden, reviewed by
// eye (go test -run TestPageDataGolden -update rewrites it).
func TestPageDataGolden(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile(filepath.Join("..", "markdown", "testdata", "agent.md"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := jsonMarshal(webchat.Item{Kind: webchat.KindMessage, ID: "a0123456789abcdef01234567", Role: webchat.RoleAssistant, Text: string(src), Final: true, Created: 1, Updated: 2})
	if err != nil {
		t.Fatal(err)
	}
	it, _, err := webchat.PageData(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := webchattest.CheckHTML(it.HTML); err != nil {
		t.Fatalf("the sample renders outside the allow-list: %v\n%s", err, it.HTML)
	}
	golden := filepath.Join("testdata", "agent.page.html")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(it.HTML+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -run TestPageDataGolden -update writes it)", err)
	}
	if it.HTML+"\n" != string(want) {
		t.Fatalf("the sample's page html changed:\n%s\nwant (%s):\n%s", it.HTML, golden, want)
	}
}

func TestPageDataRefusesUndecodableItems(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{``, `<script>`, `{"kind":"message","html":`, `["x"]`} {
		if _, _, err := webchat.PageData([]byte(raw)); err == nil {
			t.Errorf("PageData(%q) = nil error, want a refusal (nothing sent)", raw)
		}
	}
}

// Fuzz: whatever the agent writes, the page's html holds only allowed markup.
func FuzzPageHTML(f *testing.F) {
	for _, h := range webchattest.XSS {
		f.Add(h.Markdown)
	}
	if src, err := os.ReadFile(filepath.Join("..", "markdown", "testdata", "agent.md")); err == nil {
		f.Add(string(src))
	}
	f.Fuzz(func(t *testing.T, text string) {
		h := (webchat.Item{Kind: webchat.KindMessage, Role: webchat.RoleAssistant, Text: text}).ForPage().HTML
		if err := webchattest.CheckHTML(h); err != nil {
			t.Fatalf("%q renders %q: %v", text, h, err)
		}
	})
}

func jsonMarshal(it webchat.Item) ([]byte, error) { return json.Marshal(it) }
