package markdown

import (
	"bytes"
	"sort"
	"strings"

	"github.com/yuin/goldmark/ast"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/text"
)

// span is a construct of the source that a cut should not fall inside, found in the parse:
// an inline span (emphasis, strikethrough, a code span, a link or an image, an autolink), or a
// block nested in a list item or a quote whose lines only make sense together (a code block, an
// HTML block, a table).
type span struct {
	start, end int // its source, markers included
	// in, out bound its text: a cut strictly inside them is allowed (when nothing else fits),
	// the part before ending with close and the part after starting with open. in >= out: never
	// cut inside (an autolink, a shortcut reference, a nested block).
	in, out     int
	open, close string
	code        bool // a code span: its backticks kept apart from a backtick of its text
	link        bool // a link's text: cut only when no emphasis, strikethrough or code span cut fits
	// lines are the source lines of the block holding the span (container prefixes such as a
	// quote's "> " are between them), where a part after a cut starts its text.
	lines *text.Segments
}

// contains reports whether a cut leaving src[:q1] before it and src[q2:] after it falls inside sp.
func (sp *span) contains(q1, q2 int) bool { return sp.start < q1 && q2 < sp.end }

// spans lists the Doc's spans, sorted by start (an enclosing span before the spans inside it).
func (d *Doc) spans() []span {
	x := &spanFinder{d: d}
	_ = ast.Walk(d.root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		if n.Type() == ast.TypeBlock {
			x.block(n)
			return ast.WalkContinue, nil
		}
		if sp, ok := x.inline(n); ok {
			x.out = append(x.out, sp)
		}
		return ast.WalkContinue, nil
	})
	sort.SliceStable(x.out, func(i, j int) bool {
		if x.out[i].start != x.out[j].start {
			return x.out[i].start < x.out[j].start
		}
		return x.out[i].end > x.out[j].end
	})
	return x.out
}

type spanFinder struct {
	d   *Doc
	out []span
}

// block adds a code block, an HTML block or a table nested in a container block.
func (x *spanFinder) block(n ast.Node) {
	switch n.(type) {
	case *ast.FencedCodeBlock, *ast.CodeBlock, *ast.HTMLBlock, *east.Table:
	default:
		return
	}
	if n.Parent() == nil || n.Parent().Kind() == ast.KindDocument || n.Pos() < 0 {
		return // a top-level block is cut by its kind (Split)
	}
	src := x.d.src
	start, end := lineStart(src, n.Pos()), len(src)
	for b := n; b != nil; b = b.Parent() {
		if next := b.NextSibling(); next != nil && next.Pos() >= 0 {
			end = lineStart(src, next.Pos())
			break
		}
	}
	for end > start && isBlank(src[end-1]) {
		end--
	}
	if end > start {
		x.out = append(x.out, span{start: start, end: end})
	}
}

// inline is the span of an inline node, if it is one (and its source is found).
func (x *spanFinder) inline(n ast.Node) (span, bool) {
	src := x.d.src
	start, ok := x.start(n)
	if !ok {
		return span{}, false
	}
	sp := span{start: start, lines: x.lines(n)}
	switch n := n.(type) {
	case *ast.Emphasis, *east.Strikethrough, *ast.CodeSpan:
		end, ok := x.end(n)
		k := x.marker(n)
		if !ok || k == 0 || end > len(src) || end-k < start+k {
			return span{}, false
		}
		sp.end, sp.in, sp.out = end, start+k, end-k
		sp.open, sp.close = string(src[start:sp.in]), string(src[sp.out:end])
		if strings.Count(sp.open, sp.open[:1]) != k || sp.close != sp.open || strings.Trim(sp.open, "*_~`") != "" {
			return span{}, false // not where the delimiters should be
		}
		_, sp.code = n.(*ast.CodeSpan)
	case *ast.Link, *ast.Image:
		end, ok := x.end(n)
		if !ok {
			return span{}, false
		}
		sp.end = end
		sp.in, sp.out = start+1, start // no cut inside unless its text ends where it should
		if _, img := n.(*ast.Image); img {
			sp.in++
		}
		if sp.in > end || src[sp.in-1] != '[' {
			return span{}, false
		}
		ref := referenceOf(n)
		textEnd, ok := sp.in, true
		if n.LastChild() != nil {
			textEnd, ok = x.bottomEnd(n.LastChild())
		}
		if ok && textEnd < end && src[textEnd] == ']' && (ref == nil || ref.Type == ast.ReferenceLinkFull) {
			sp.out = textEnd // its destination or reference: never cut
			sp.open, sp.close = string(src[start:sp.in]), string(src[textEnd:end])
			sp.link = true
		}
	case *ast.AutoLink:
		end, ok := x.end(n)
		if !ok {
			return span{}, false
		}
		sp.end, sp.in, sp.out = end, start, start
	default:
		return span{}, false
	}
	return sp, sp.end > sp.start
}

// referenceOf is a link's or an image's reference (nil for an inline link).
func referenceOf(n ast.Node) *ast.ReferenceLink {
	switch n := n.(type) {
	case *ast.Link:
		return n.Reference
	case *ast.Image:
		return n.Reference
	}
	return nil
}

// marker is the length of the delimiters on each side of an emphasis, a strikethrough or a
// code span.
func (x *spanFinder) marker(n ast.Node) int {
	src := x.d.src
	switch n := n.(type) {
	case *ast.Emphasis:
		return n.Level
	case *east.Strikethrough: // as many as both sides have, at most two
		first, _ := x.start(n.FirstChild())
		last, ok := x.bottomEnd(n.LastChild())
		k := 0
		for k < 2 && first-k-1 >= 0 && src[first-k-1] == '~' && (!ok || last+k < len(src) && src[last+k] == '~') {
			k++
		}
		return k
	case *ast.CodeSpan:
		k := 0
		for p := n.Pos(); p >= 0 && p+k < len(src) && src[p+k] == '`'; k++ {
		}
		return k
	}
	return 0
}

// start is where an inline node's source starts.
func (x *spanFinder) start(n ast.Node) (int, bool) {
	src := x.d.src
	switch n := n.(type) {
	case nil:
		return 0, false
	case *ast.Text:
		return n.Segment.Start, true
	case *ast.RawHTML:
		if n.Segments.Len() == 0 {
			return 0, false
		}
		return n.Segments.At(0).Start, true
	case *ast.Emphasis:
		first, ok := x.start(n.FirstChild())
		return first - n.Level, ok && first-n.Level >= 0
	case *east.Strikethrough:
		first, ok := x.start(n.FirstChild())
		k := x.marker(n)
		return first - k, ok && k > 0
	case *ast.AutoLink:
		p := n.Pos()
		if p < 0 || p >= len(src) {
			return 0, false
		}
		if src[p] == '<' {
			return p, true
		}
		i := bytes.Index(src[p:], n.Label(src)) // a found URL's position is where the search for it began
		return p + i, i >= 0
	case *ast.CodeSpan, *ast.Link, *ast.Image:
		return n.Pos(), n.Pos() >= 0
	}
	return 0, false
}

// bottomEnd is where an inline node's source ends, found from its last child (not for a link
// or an image, whose destination no node holds).
func (x *spanFinder) bottomEnd(n ast.Node) (int, bool) {
	src := x.d.src
	switch n := n.(type) {
	case *ast.Text:
		return n.Segment.Stop, true
	case *ast.RawHTML:
		if n.Segments.Len() == 0 {
			return 0, false
		}
		return n.Segments.At(n.Segments.Len() - 1).Stop, true
	case *ast.Emphasis, *east.Strikethrough:
		last, ok := x.bottomEnd(n.LastChild())
		return last + x.marker(n), ok
	case *ast.CodeSpan:
		p, ok := n.Pos()+x.marker(n), true
		if n.LastChild() != nil {
			p, ok = x.bottomEnd(n.LastChild())
		}
		if !ok {
			return 0, false
		}
		i := bytes.IndexByte(src[p:], '`') // the closing backticks follow its text (and a trimmed space)
		return p + i + x.marker(n), i >= 0
	case *ast.AutoLink:
		start, ok := x.start(n)
		if !ok {
			return 0, false
		}
		end := start + len(n.Label(src))
		if src[start] == '<' {
			end += 2
		}
		return end, end <= len(src)
	}
	return 0, false
}

// end is where an inline node's source ends: from its last child, or else (a link, an image) at
// the last character of its block's lines before what comes after it (its next sibling, or the
// closing delimiters of its parent).
func (x *spanFinder) end(n ast.Node) (int, bool) {
	if e, ok := x.bottomEnd(n); ok {
		return e, true
	}
	start, ok := x.start(n)
	if !ok {
		return 0, false
	}
	limit, ok := x.limit(n)
	if !ok {
		return 0, false
	}
	lines := x.lines(n)
	for p := limit - 1; p >= start; p-- {
		if !isBlank(x.d.src[p]) && inLines(lines, p) {
			return p + 1, true
		}
	}
	return 0, false
}

// limit is the offset an inline node's source ends at or before.
func (x *spanFinder) limit(n ast.Node) (int, bool) {
	if next := n.NextSibling(); next != nil {
		return x.start(next)
	}
	p := n.Parent()
	switch p.(type) {
	case *ast.Emphasis, *east.Strikethrough:
		end, ok := x.end(p)
		return end - x.marker(p), ok
	}
	if p == nil || p.Type() != ast.TypeBlock {
		return 0, false // the last of a link's text: where its text ends is not known
	}
	lines := p.Lines()
	if lines.Len() == 0 {
		return 0, false
	}
	return lines.At(lines.Len() - 1).Stop, true
}

// lines are the source lines of the block holding inline node n.
func (x *spanFinder) lines(n ast.Node) *text.Segments {
	for b := n.Parent(); b != nil; b = b.Parent() {
		if b.Type() == ast.TypeBlock {
			return b.Lines()
		}
	}
	return nil
}

// inLines reports whether offset p is on one of the lines (not in a container's prefix).
func inLines(lines *text.Segments, p int) bool {
	if lines == nil {
		return true
	}
	i := sort.Search(lines.Len(), func(i int) bool { return lines.At(i).Stop > p })
	return i < lines.Len() && lines.At(i).Start <= p
}

// textStart is the first offset at or after p on one of the lines (p when there are none).
func textStart(lines *text.Segments, p int) int {
	if lines == nil {
		return p
	}
	i := sort.Search(lines.Len(), func(i int) bool { return lines.At(i).Stop > p })
	if i < lines.Len() && lines.At(i).Start > p {
		return lines.At(i).Start
	}
	return p
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// What a reader sees a byte of the text as (shown).
const (
	shownItalic uint8 = 1 << iota
	shownBold
	shownStruck
	shownCode
	shownLink
	shownLiteral // a delimiter or a bracket shown as itself
)

// shown is, for each byte of src, how it shows in the parse root: the formatting of the text it
// is part of, and whether it is a delimiter or a bracket shown as itself; 0 for a blank and for
// what does not show as text (delimiters, destinations, block markers).
func shown(root ast.Node, src []byte) []uint8 {
	out := make([]uint8, len(src))
	mark := func(n ast.Node, from, to int) {
		var f uint8
		for p := n; p != nil; p = p.Parent() {
			switch p := p.(type) {
			case *ast.Emphasis:
				if p.Level >= 2 {
					f |= shownBold
				} else {
					f |= shownItalic
				}
			case *east.Strikethrough:
				f |= shownStruck
			case *ast.CodeSpan:
				f |= shownCode
			case *ast.Link, *ast.Image, *ast.AutoLink:
				f |= shownLink
			}
		}
		for i := max(from, 0); i < to && i < len(src); i++ {
			switch c := src[i]; {
			case isBlank(c):
			case f&shownCode == 0 && strings.IndexByte("*_~`[]", c) >= 0:
				out[i] = f | shownLiteral
			default:
				out[i] = f
			}
		}
	}
	_ = ast.Walk(root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Text:
			mark(n, n.Segment.Start, n.Segment.Stop)
		case *ast.AutoLink:
			if p := n.Pos(); p >= 0 && p < len(src) {
				label := n.Label(src)
				if i := bytes.Index(src[p:], label); i >= 0 {
					mark(n, p+i, p+i+len(label))
				}
			}
		}
		return ast.WalkContinue, nil
	})
	return out
}

// shownCounts counts the bytes of from..to shown each way (by bit of shown).
func shownCounts(s []uint8, from, to int) (n [6]int) {
	for _, f := range s[from:to] {
		for b := range n {
			if f&(1<<b) != 0 {
				n[b]++
			}
		}
	}
	return n
}
