package telegramtest

import (
	"slices"
	"strings"
	"testing"
)

// The HTML parse mode as the Bot API server reads it: Telegram's tags become entities (UTF-16
// offsets), character references are decoded, and what it refuses gets its descriptions.
func TestParseHTML(t *testing.T) {
	text, ents, e := parseHTML(`<b>bold</b> &lt;x&gt; <a href="https://e.org/?a=1&amp;b=2">🎉link</a> <pre><code class="language-go">x</code></pre>`)
	want := []Entity{{Type: "bold", Offset: 0, Length: 4}, {Type: "text_link", Offset: 9, Length: 6, URL: "https://e.org/?a=1&b=2"}, {Type: "pre", Offset: 16, Length: 1, Language: "go"}}
	if e != nil || text != "bold <x> 🎉link x" || !slices.Equal(ents, want) {
		t.Fatalf("parseHTML = %q %+v %v", text, ents, e)
	}
	for _, tt := range []struct{ html, desc string }{
		{"<h1>x</h1>", `Unsupported start tag "h1" at byte offset 0`},
		{"<b>x", `Can't find end tag corresponding to start tag "b"`},
		{"<b><i>x</b></i>", `Unmatched end tag at byte offset 7, expected "</i>", found "</b>"`},
		{"x</b>", "Unexpected end tag at byte offset 1"},
		{"<b x", "Unclosed start tag at byte offset 0"},
		{`<span class="x">y</span>`, `Tag "span" must have class "tg-spoiler" at byte offset 0`},
	} {
		_, _, e := parseHTML(tt.html)
		if e == nil || e.desc != "Bad Request: can't parse entities: "+tt.desc {
			t.Errorf("%s: %v, want %q", tt.html, e, tt.desc)
		}
	}
}

// A rich message's Markdown: its text, its blocks, and the limits with the server's
// descriptions.
func TestParseRich(t *testing.T) {
	d, e := parseRich("# Title\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- x\n- y\n\n`c` and \\$5")
	if e != nil || !slices.Equal(d.blocks, []string{"heading", "table", "list", "paragraph"}) || !strings.Contains(d.text, "c and $5") || strings.Contains(d.text, "#") {
		t.Fatalf("parseRich = %+v %v", d, e)
	}
	wide := "|" + strings.Repeat(" c |", 21) + "\n|" + strings.Repeat("---|", 21) + "\n"
	for _, tt := range []struct{ md, desc string }{
		{" \n", "RICH_MESSAGE_EMPTY"},
		{strings.Repeat("x", maxRichText+1), "RICH_MESSAGE_TEXT_TOO_LONG"},
		{strings.Repeat("- x\n", maxRichBlocks), "RICH_MESSAGE_BLOCKS_TOO_MANY"},
		{wide, "RICH_MESSAGE_TABLE_COLS_TOO_MANY"},
		{strings.Repeat("> ", maxRichDepth+1) + "deep", "RICH_MESSAGE_DEPTH_INVALID"},
	} {
		if _, e := parseRich(tt.md); e == nil || e.desc != "Bad Request: "+tt.desc {
			t.Errorf("%.20q: %v, want %s", tt.md, e, tt.desc)
		}
	}
}
