package markdown

import (
	"strings"
	"unicode/utf8"

	"github.com/yuin/goldmark/ast"
	east "github.com/yuin/goldmark/extension/ast"
)

// Split cuts a Markdown text into parts of at most limit as count measures a part (what the
// platform counts after its own parsing; nil counts runes), each part rendering on its own.
//
// Parts are cut between the text's top-level blocks (a paragraph, a heading, a list, a table, a
// code block, a quote), packed greedily: a part holds as many whole blocks as fit. A block larger
// than limit is cut inside: a fenced code block between lines, closed at the end of a part and
// opened again (with its language) at the start of the next; a table between rows, its header
// and delimiter rows repeated in every part; a list between items; anything else, and an item or
// a line still too large, at the last paragraph break, line break or space that fits (a word
// longer than a part is cut where it must). Blank lines between blocks become one; a link
// reference definition stays with the block before it. A text within limit is returned as is;
// a longer one of blanks only has no parts.
func Split(text string, limit int, count func(string) int) []string {
	if count == nil {
		count = utf8.RuneCountInString
	}
	if limit <= 0 || count(text) <= limit {
		return []string{text}
	}
	s := &splitter{limit: limit, count: count}
	d := Parse(text)
	var chunks []string
	for _, blk := range d.topBlocks() {
		if count(blk.text) <= limit {
			chunks = append(chunks, blk.text)
			continue
		}
		chunks = append(chunks, s.cutBlock(d, blk)...)
	}
	var parts []string
	for _, p := range s.pack(chunks, "\n\n") {
		if strings.TrimSpace(p) != "" { // a part of blanks only would be an empty message
			parts = append(parts, p)
		}
	}
	return parts
}

type splitter struct {
	limit int
	count func(string) int
}

// topBlock is a top-level block and its source: from the start of its first line to the start
// of the next block, without the blank lines before it.
type topBlock struct {
	node       ast.Node
	start, end int
	text       string
}

// topBlocks lists the document's top-level blocks with their source.
func (d *Doc) topBlocks() []topBlock {
	var bs []topBlock
	for n := d.root.FirstChild(); n != nil; n = n.NextSibling() {
		start := lineStart(d.src, n.Pos())
		if len(bs) == 0 {
			if strings.TrimSpace(string(d.src[:start])) != "" {
				start = 0 // what comes before the first block (a link reference definition) stays
			}
		} else if n.Pos() < 0 || start <= bs[len(bs)-1].start { // no position: part of the block before
			continue
		}
		bs = append(bs, topBlock{node: n, start: start})
	}
	for i := range bs {
		bs[i].end = len(d.src)
		if i+1 < len(bs) {
			bs[i].end = bs[i+1].start
		}
		bs[i].text = strings.TrimRight(string(d.src[bs[i].start:bs[i].end]), " \t\n")
	}
	if len(bs) == 0 {
		bs = append(bs, topBlock{node: d.root, end: len(d.src), text: string(d.src)})
	}
	return bs
}

// lineStart is the offset of the start of the line holding offset p.
func lineStart(src []byte, p int) int {
	if p <= 0 {
		return 0
	}
	p = min(p, len(src))
	for p > 0 && src[p-1] != '\n' {
		p--
	}
	return p
}

// cutBlock cuts a block larger than the limit into parts that render on their own.
func (s *splitter) cutBlock(d *Doc, blk topBlock) []string {
	lines := strings.SplitAfter(blk.text, "\n")
	switch n := blk.node.(type) {
	case *ast.FencedCodeBlock:
		opener := strings.TrimRight(lines[0], "\n")
		trimmed := strings.TrimLeft(opener, " ")
		if trimmed == "" || trimmed[0] != '`' && trimmed[0] != '~' {
			break // not the fence line (text before it): cut as text
		}
		fence := trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, trimmed[:1]))]
		body, closer := lines[1:], fence
		if len(body) > 0 {
			if last := strings.TrimSpace(body[len(body)-1]); strings.HasPrefix(last, fence) && strings.Trim(last, fence[:1]) == "" {
				body, closer = body[:len(body)-1], last // its closing fence, which closes every part
			}
		}
		if len(body) > 0 {
			body[len(body)-1] = strings.TrimRight(body[len(body)-1], "\n") + "\n"
		}
		if parts := s.packWrapped(opener+"\n", body, closer); parts != nil {
			return parts
		}
	case *east.Table:
		if len(lines) > 2 {
			head := lines[0] + strings.TrimRight(lines[1], "\n") + "\n"
			rows := lines[2:]
			rows[len(rows)-1] = strings.TrimRight(rows[len(rows)-1], "\n")
			if parts := s.packWrapped(head, rows, ""); parts != nil {
				return parts
			}
		}
	case *ast.List:
		var starts []int
		for it := n.FirstChild(); it != nil; it = it.NextSibling() {
			if start := lineStart(d.src, it.Pos()) - blk.start; it.Pos() >= 0 && start >= 0 && start < len(blk.text) &&
				(len(starts) == 0 || start > starts[len(starts)-1]) {
				starts = append(starts, start)
			}
		}
		var items []string
		for i, start := range starts {
			if i == 0 {
				start = 0
			}
			end := len(blk.text)
			if i+1 < len(starts) {
				end = starts[i+1]
			}
			items = append(items, blk.text[start:end])
		}
		if len(items) > 1 {
			var pieces []string
			for _, it := range items {
				it = strings.TrimRight(it, " \t\n")
				if s.count(it) <= s.limit {
					pieces = append(pieces, it)
				} else {
					pieces = append(pieces, s.cutText(it, s.limit)...)
				}
			}
			return s.pack(pieces, "\n")
		}
	}
	return s.cutText(blk.text, s.limit)
}

// packWrapped packs units (lines with their newlines) into parts head + units + tail, each
// within the limit; a unit too large is cut as text. Nil when head and tail leave no room.
func (s *splitter) packWrapped(head string, units []string, tail string) []string {
	room := s.limit - s.count(head+"\n"+tail)
	if room < s.limit/4 || room <= 0 {
		return nil
	}
	var parts []string
	cur := ""
	flush := func() {
		if cur != "" {
			parts = append(parts, strings.TrimRight(head+cur, "\n")+map[bool]string{true: "\n" + tail}[tail != ""])
			cur = ""
		}
	}
	for _, u := range units {
		if s.count(head+cur+u+tail) <= s.limit {
			cur += u
			continue
		}
		flush()
		if s.count(head+u+tail) <= s.limit {
			cur = u
			continue
		}
		for _, piece := range s.cutText(u, room) {
			cur = piece + "\n"
			flush()
		}
	}
	flush()
	return parts
}

// pack joins pieces with sep into as few parts within the limit as it can, in order.
func (s *splitter) pack(pieces []string, sep string) []string {
	var parts []string
	cur := ""
	for _, p := range pieces {
		if p == "" {
			continue
		}
		if cur == "" {
			cur = p
			continue
		}
		if s.count(cur+sep+p) <= s.limit {
			cur += sep + p
			continue
		}
		parts = append(parts, cur)
		cur = p
	}
	if cur != "" {
		parts = append(parts, cur)
	}
	return parts
}

// cutText cuts text into pieces within limit at the last paragraph break, line break or space
// that fits in the second half of a piece, else where the limit falls (never inside a rune).
func (s *splitter) cutText(text string, limit int) []string {
	var parts []string
	for text != "" {
		if s.count(text) <= limit {
			parts = append(parts, text)
			break
		}
		end := s.fits(text, limit)
		cut := end
		for _, sep := range []string{"\n\n", "\n", " "} {
			if i := strings.LastIndex(text[:end], sep); i > 0 && i >= end/2 {
				cut = i + len(sep)
				break
			}
		}
		if head := strings.TrimRight(text[:cut], " \n"); head != "" {
			parts = append(parts, head)
		}
		text = strings.TrimLeft(text[cut:], " \n")
	}
	return parts
}

// fits is the longest prefix of text (in bytes, on a rune boundary, at least one rune) that
// count keeps within limit.
func (s *splitter) fits(text string, limit int) int {
	lo, hi := 0, len(text) // lo fits, hi does not (count(text) > limit)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		for mid > lo && !utf8.RuneStart(text[mid]) {
			mid--
		}
		if mid == lo {
			mid = (lo + hi) / 2
			for mid < hi && !utf8.RuneStart(text[mid]) {
				mid++
			}
			if mid == hi {
				break
			}
		}
		if s.count(text[:mid]) <= limit {
			lo = mid
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		_, size := utf8.DecodeRuneInString(text)
		return size
	}
	return lo
}
