package markdown_test

import (
	"testing"

	"github.com/ximd/ximd/handlers/adapter/markdown"
)

// Discord shows Markdown itself: what it lacks (tables, deep headings, HTML) is converted, and
// nothing in the text becomes a mention or a tag.
func TestDiscord(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{name: "kept", in: "# Title\n\n**bold** *it* ~~gone~~ `code`\n\n- a\n- b\n\n> quoted", want: "# Title\n\n**bold** *it* ~~gone~~ `code`\n\n- a\n- b\n\n> quoted"},
		{name: "deep heading bold", in: "#### Deep", want: "**Deep**"},
		{name: "table as code", in: "| a | b |\n|---|---|\n| 1 | 22 |", want: "```\na | b\n--+---\n1 | 22\n```"},
		{name: "html as text", in: "x <b>y</b> <@123>", want: "x \\<b\\>y\\</b\\> \\<@123\\>"},
		{name: "html block as text", in: "<div>\nhi & bye\n</div>", want: "\\<div\\>\nhi & bye\n\\</div\\>"},
		{name: "link", in: "[site](https://example.com)", want: "[site](https://example.com)"},
		{name: "mail link", in: "[me](mailto:a@b.c)", want: "me (a@b.c)"},
		{name: "unsafe link", in: "[x](javascript:alert(1))", want: "x"},
		{name: "hard break", in: "a\\\nb", want: "a\nb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := markdown.Parse(tt.in).Discord(); got != tt.want {
				t.Fatalf("Discord(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}
