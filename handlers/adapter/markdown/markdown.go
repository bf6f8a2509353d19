// Package markdown is the one Markdown parse of the project (edge-api §7.3): the agent's text,
// CommonMark with GitHub's extensions (tables, strikethrough, autolinks, task lists), parsed once
// by goldmark and rendered into each platform's form by walking the tree, never by regular
// expressions over the text. Raw HTML in the Markdown is shown as text, in every form.
//
// The forms:
//   - [Doc.Plain]: plain text (a platform's fall-back, Matrix's body, notifications);
//   - [Doc.HTML] with a [Dialect]: [Web] (the webchat page, the webhook's "html"), [Matrix]
//     (org.matrix.custom.html), [Telegram] (Telegram's HTML parse mode: its tags only, headings,
//     lists and tables written with what it has).
//
// A partial text (a streamed preview) parses like any other: an open fence runs to the end, a
// half-written "**" or a link without its ")" stays text, so every delta renders safely, and the
// final renders exactly as a direct final of the same text.
package markdown

import (
	"bytes"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
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

// text is the literal text under n: its Text segments, code spans and raw HTML as written.
func (d *Doc) text(n ast.Node) string {
	var b bytes.Buffer
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(d.src))
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
			b.Write(c.URL(d.src))
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return b.String()
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
