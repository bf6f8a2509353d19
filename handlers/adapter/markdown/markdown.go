// Package markdown is the one Markdown parse of the project (edge-api §7.3): the agent's text,
// CommonMark with GitHub's extensions (tables, strikethrough, autolinks, task lists), parsed once
// by goldmark and rendered into each platform's form by walking the tree, never by regular
// expressions over the text. Raw HTML in the Markdown is shown as text, in every form.
//
// The forms:
//   - [Doc.Plain]: plain text (a platform's fall-back, Matrix's body, notifications);
//   - [Doc.HTML] with a [Dialect]: [Web] (the webchat page, the webhook's "html"), [Matrix]
//     (org.matrix.custom.html), [Telegram] (Telegram's HTML parse mode: its tags only, its entity
//     nesting rules, headings, lists and tables written with what it has);
//   - [Doc.Slack]: Markdown for Slack's markdown block and markdown_text;
//   - [Doc.Feishu]: Markdown for a Feishu card's markdown element, with a table budget.
//
// Links are kept only to http, https and mailto URLs ([SafeURL]); an image is its text, linked.
// A table shown as text ([Telegram], Slack, Feishu past its budget, plain) is aligned in display
// columns (a CJK character or an emoji takes two). [Split] cuts a long text between top-level
// blocks, and inside one outside its inline spans (or closing and opening them again), each part
// carrying the link reference definitions it uses, so every part renders on its own.
//
// testdata/corpus holds the shared sample of agent-style Markdown and testdata/golden each form
// of it (UPDATE_GOLDEN=1 go test rewrites them; review the diff); the tests validate the Telegram
// form against Telegram's HTML rules and the web and Matrix forms against their allow-lists, on
// the corpus, an XSS corpus and fuzzed input.
//
// A partial text (a streamed preview) parses like any other: an open fence runs to the end, a
// half-written "**" or a link without its ")" stays text, so every delta renders safely, and the
// final renders exactly as a direct final of the same text.
package markdown

import (
	"bytes"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// Doc is a parsed Markdown text.
type Doc struct {
	src  []byte
	root ast.Node
}

var md = goldmark.New(
	goldmark.WithExtensions(extension.Table, extension.Strikethrough, extension.Linkify, extension.TaskList),
	goldmark.WithParserOptions(parser.WithAutoHeadingID()),
)

// Parse parses text (any text: Markdown never fails to parse).
func Parse(s string) *Doc {
	src := []byte(s)
	return &Doc{src: src, root: md.Parser().Parse(text.NewReader(src))}
}

// Source is the text the Doc was parsed from.
func (d *Doc) Source() string { return string(d.src) }

// text is the text under n as a reader sees it: its Text segments with backslash escapes and
// entity references resolved, code spans and raw HTML as written.
func (d *Doc) text(n ast.Node) string {
	var b bytes.Buffer
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.WriteString(d.textValue(c))
			if c.SoftLineBreak() || c.HardLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			b.Write(c.Value)
		case *ast.RawHTML:
			for i := range c.Segments.Len() {
				seg := c.Segments.At(i)
				b.Write(seg.Value(d.src))
			}
		case *ast.AutoLink:
			b.Write(c.Label(d.src))
			return ast.WalkSkipChildren, nil
		case *east.TaskCheckBox:
			b.WriteString(checkBox(c.IsChecked))
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// textValue is what a Text node shows: a code span's text as written, any other text with its
// backslash escapes and entity references resolved (as CommonMark reads them).
func (d *Doc) textValue(t *ast.Text) string {
	v := t.Segment.Value(d.src)
	if t.IsRaw() {
		return string(v)
	}
	return unescape(v)
}

// unescape resolves backslash escapes and entity references in one pass, so an escaped "&"
// never starts a reference.
func unescape(v []byte) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\' && i+1 < len(v) && util.IsPunct(v[i+1]):
			b.WriteByte(v[i+1])
			i++
		case c == '&':
			end := bytes.IndexByte(v[i:min(len(v), i+40)], ';')
			if end > 1 {
				ref := v[i : i+end+1]
				r := util.ResolveNumericReferences(ref)
				if bytes.Equal(r, ref) {
					r = util.ResolveEntityNames(ref)
				}
				if !bytes.Equal(r, ref) {
					b.Write(r)
					i += end
					continue
				}
			}
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// linkDest is a link's destination as a browser reads it: escapes and references resolved,
// spaces and non-ASCII percent-encoded.
func linkDest(dest []byte) string { return string(util.URLEscape(dest, true)) }

// checkBox is a task list item's box, in every form.
func checkBox(checked bool) string {
	if checked {
		return "☑ "
	}
	return "☐ "
}

// lines is the literal lines of a block (a code block's, an HTML block's).
func (d *Doc) lines(n ast.Node) string {
	var b bytes.Buffer
	ls := n.Lines()
	for i := range ls.Len() {
		seg := ls.At(i)
		b.Write(seg.Value(d.src))
	}
	if h, ok := n.(*ast.HTMLBlock); ok && h.HasClosure() {
		b.Write(h.ClosureLine.Value(d.src))
	}
	return b.String()
}
