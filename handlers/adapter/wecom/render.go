package wecom

import (
	"math"

	"github.com/ximd/ximd/handlers/adapter/markdown"
)

// MaxContentBytes bounds a message's content: "最长不超过 20480 个字节" (a stream's content and a
// markdown message's, W-PR / W-LC). Every part of a split final fits it, so it is also the
// characters a part holds at most.
const MaxContentBytes = 20480

// render is the agent's Markdown as WeCom's markdown shows it (edge-api §7.3): WeCom takes
// headings, emphasis, lists, quotes, links, code and tables, which is what Feishu's card
// Markdown takes too, so the same form is used with no table budget: links to http(s) only,
// task boxes as ☐/☑, raw HTML as text.
func render(text string) string { return markdown.Parse(text).Feishu(math.MaxInt32) }

// contentLen is what WeCom counts of a text: the bytes of its rendered form.
func contentLen(text string) int { return len(render(text)) }

// split cuts a final's text into parts whose content each fits MaxContentBytes, between blocks.
func split(text string) []string { return markdown.Split(text, MaxContentBytes, contentLen) }

// preview is what a stream frame shows of a text so far: all of it, or its first part with "…"
// marking the cut (a preview past the limit is cut, never an error).
func preview(text string) string {
	if contentLen(text) <= MaxContentBytes {
		return text
	}
	return markdown.Split(text, MaxContentBytes-len("…"), contentLen)[0] + "…"
}
