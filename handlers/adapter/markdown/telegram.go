package markdown

import (
	"slices"
	"strings"

	"github.com/yuin/goldmark/ast"
	east "github.com/yuin/goldmark/extension/ast"
)

// TelegramRich is the Markdown of a Telegram rich message (Bot API 10.1 sendRichMessage,
// sendRichMessageDraft, editMessageText's rich_message) for the Doc, and the blocks it holds (blocks, list items and table rows, as Telegram counts them). Telegram's rich Markdown
// reads more than CommonMark: raw HTML, images (fetched and shown), "$" formulas, "||"
// spoilers, a line-leading "#tag" as a heading. Those are escaped with a backslash, so raw HTML
// shows as text, an image as its link, and "$5 and $10" as written (edge-api §7.3), as is a
// link that is not http(s) or mailto; what the agent wrote as Markdown stays as written.
func (d *Doc) TelegramRich() (string, int) {
	src, doc := d.src, d.root
	var at []int // byte offsets to put a backslash before
	blocks := 0
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		if n.Type() == ast.TypeBlock && n.Kind() != ast.KindDocument {
			switch n.(type) {
			case *ast.TextBlock, *east.TableCell:
			default:
				blocks++
			}
		}
		switch n := n.(type) {
		case *ast.HTMLBlock:
			lines := n.Lines()
			for i := range lines.Len() {
				seg := lines.At(i)
				at = append(at, offsetsOf(src, seg.Start, seg.Stop, "<")...)
			}
			if n.HasClosure() {
				at = append(at, offsetsOf(src, n.ClosureLine.Start, n.ClosureLine.Stop, "<")...)
			}
		case *ast.RawHTML:
			if n.Segments.Len() > 0 {
				at = append(at, n.Segments.At(0).Start)
			}
		case *ast.Image:
			if c, ok := n.FirstChild().(*ast.Text); ok && c.Segment.Start >= 2 && string(src[c.Segment.Start-2:c.Segment.Start]) == "![" {
				at = append(at, c.Segment.Start-2)
			}
		case *ast.Link:
			if c, ok := n.FirstChild().(*ast.Text); ok && !SafeURL(string(n.Destination)) && c.Segment.Start >= 1 && src[c.Segment.Start-1] == '[' {
				at = append(at, c.Segment.Start-1) // a link Telegram should not open: its text as written
			}
		case *ast.Text:
			seg := n.Segment
			at = append(at, offsetsOf(src, seg.Start, seg.Stop, "$|")...)
			if seg.Start < len(src) && src[seg.Start] == '#' && (seg.Start == 0 || src[seg.Start-1] == '\n') {
				at = append(at, seg.Start)
			}
		case *ast.CodeSpan, *ast.AutoLink:
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	if len(at) == 0 {
		return string(src), blocks
	}
	slices.Sort(at)
	var b strings.Builder
	last := 0
	for _, i := range at {
		if i < last || (i > 0 && src[i-1] == '\\') {
			continue
		}
		b.Write(src[last:i])
		b.WriteByte('\\')
		last = i
	}
	b.Write(src[last:])
	return b.String(), blocks
}

// offsetsOf are the offsets of the bytes of chars in src[from:to].
func offsetsOf(src []byte, from, to int, chars string) []int {
	var out []int
	for i := from; i < to && i < len(src); i++ {
		if strings.IndexByte(chars, src[i]) >= 0 {
			out = append(out, i)
		}
	}
	return out
}
