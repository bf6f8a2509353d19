package markdown

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/yuin/goldmark/ast"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
	"golang.org/x/text/width"
)

// Split cuts a Markdown text into parts of at most limit as count measures a part (what the
// platform counts after its own parsing; nil counts runes), each part rendering on its own.
//
// Parts are cut between the text's top-level blocks (a paragraph, a heading, a list, a table, a
// code block, a quote), packed greedily: a part holds as many whole blocks as fit. A block larger
// than limit is cut inside: a fenced code block between lines, closed at the end of a part and
// opened again (with its language) at the start of the next; a table between rows, its header
// and delimiter rows repeated in every part; a list between items. Anything else, and an item,
// a row or a line still too large, is cut where the parse shows the cut does no harm:
//   - at the strongest break (a blank line, then a line break, a space or a boundary after
//     wide punctuation such as "，" or "。", then a boundary next to a wide character: CJK,
//     kana, hangul), the last of its kind, in the second half of the part, that falls outside
//     every inline span (emphasis, strong, strikethrough, code span, link, image, autolink)
//     and outside a code block, an HTML block or a table nested in an item or a quote;
//   - else before a span the limit falls in (the outermost first), when the next part can hold
//     that span whole;
//   - else at such a break inside a span's text: inside emphasis, strikethrough or a code span
//     first, inside a link's or an image's text only when no such break fits. The part ends with
//     the delimiters that close every span the cut falls in (for a link, its "](destination)"
//     or "][label]" as written) and the next part starts with those that open them again (after
//     a quote's "> "), so that both halves keep their formatting and no "[" is left open;
//   - else where the limit falls (between any two characters), closing and opening spans the
//     same way.
//
// Emphasis and strikethrough are cut inside only where the delimiters added touch no space
// (they would not close or open there), and never inside two emphases with the same
// delimiters or two strikethroughs (theirs would make one run); a code span only within one
// or two backticks (three opening a part would start a code block). Before a cut is taken, the
// part it ends, and for a cut inside spans the rest of them opened again, is parsed alone and
// must show its text as the whole text does (the same characters bold, italic, struck, as code
// and linked, and no delimiter or bracket as itself that the whole did not show so); if not,
// the next place is tried (the first few only, then the rules' choice stands).
//
// A cut never falls inside a link's destination or reference, an autolink, a shortcut or
// collapsed reference ("[label]", "[label][]") or a nested block, unless that alone is longer
// than a part: then it is cut as text. Blank lines between blocks become one.
//
// Each part carries the link reference definitions its references need and it does not hold:
// they are appended, as written, after a blank line at its end, and count toward its limit; a
// top-level definition so carried is not kept where it stood. Appending the definitions,
// rather than rewriting the references as inline links, keeps the agent's text byte for byte
// (destinations, titles and escapes are never written again; the full, collapsed and shortcut
// forms and images work unchanged), and a definition costs a part once however many references
// to it the part holds. A definition longer than half the limit is not carried: it stays where
// it was, and its references in other parts show as written.
//
// A text within limit is returned as is; a longer one with nothing to show (blanks, or link
// definitions only) is one empty part, which a platform refuses as it refuses a blank text
// within the limit: there is always a first part.
func Split(text string, limit int, count func(string) int) []string {
	if count == nil {
		count = utf8.RuneCountInString
	}
	if limit <= 0 || count(text) <= limit {
		return []string{text}
	}
	d := Parse(text)
	s := newSplitter(d, limit, count)
	var chunks []string
	var silent []bool // a definition not carried, which stays where it was
	for _, blk := range d.topBlocks() {
		def, isDef := blk.node.(*ast.LinkReferenceDefinition)
		if isDef && s.refs[util.ToLinkReference(def.Label)] != nil {
			continue // carried by the parts that use it
		}
		if s.fits(blk.text) {
			chunks, silent = append(chunks, blk.text), append(silent, isDef)
			continue
		}
		for _, c := range s.cutBlock(blk) {
			chunks, silent = append(chunks, c), append(silent, false)
		}
	}
	var parts []string
	for _, p := range s.pack(chunks, "\n\n", silent) {
		if strings.TrimSpace(p) != "" { // a part of blanks only would be an empty message
			parts = append(parts, s.carry(p))
		}
	}
	if len(parts) == 0 {
		return []string{""}
	}
	return parts
}

type splitter struct {
	src   string
	limit int
	count func(string) int
	spans []span
	// defs are the text's link reference definitions, the first of each label, in order, and
	// refs those the parts carry, by label, as the parser takes them.
	defs []definition
	refs map[string]parser.Reference
	// shown is how each byte of the text shows (see shown), what a piece is checked against.
	shown []uint8
}

// definition is a link reference definition: its label as references match it, and its source.
type definition struct{ key, text string }

// newSplitter prepares the split of d: its spans, and its link reference definitions, those
// the parts carry being the ones that take at most half a part (one longer stays where the
// agent wrote it, and its references show as written in a part without it).
func newSplitter(d *Doc, limit int, count func(string) int) *splitter {
	s := &splitter{src: string(d.src), limit: limit, count: count, spans: d.spans(), refs: map[string]parser.Reference{},
		shown: shown(d.root, d.src)}
	seen := map[string]bool{}
	_ = ast.Walk(d.root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		def, ok := n.(*ast.LinkReferenceDefinition)
		if !entering || !ok {
			return ast.WalkContinue, nil
		}
		key := util.ToLinkReference(def.Label)
		if seen[key] || def.Lines().Len() == 0 {
			return ast.WalkSkipChildren, nil
		}
		seen[key] = true
		text := definitionText(def, d.src)
		s.defs = append(s.defs, definition{key: key, text: text})
		if count(text) <= limit/2 {
			s.refs[key] = parser.NewReference(def.Label, def.Destination, def.Title)
		}
		return ast.WalkSkipChildren, nil
	})
	return s
}

// fits reports whether a part is within the limit, with the definitions it would carry.
func (s *splitter) fits(part string) bool {
	withDefs, _ := s.withDefs(part)
	return s.count(withDefs) <= s.limit
}

// withDefs is a part with the link reference definitions its references need and it does not
// hold appended, after a blank line (so that they neither continue a paragraph nor show): each
// part that uses a reference carries its definition, as the agent wrote it (only those
// newSplitter keeps for carrying). n is how many of its references resolve.
func (s *splitter) withDefs(part string) (withDefs string, n int) {
	if len(s.refs) == 0 {
		return part, 0
	}
	used, defined, n := references(s.parse(part), len(part))
	var need []string
	for _, def := range s.defs {
		if used[def.key] && !defined[def.key] && s.refs[def.key] != nil {
			need = append(need, def.text)
		}
	}
	if len(need) == 0 {
		return part, n
	}
	return part + "\n\n" + strings.Join(need, "\n"), n
}

// parse parses a part as it reads with the definitions it carries.
func (s *splitter) parse(part string) ast.Node {
	pc := refContext{Context: parser.NewContext(), refs: s.refs}
	return md.Parser().Parse(text.NewReader([]byte(part)), parser.WithContext(pc))
}

// refContext is a parser context that also knows the definitions the parts carry (after the
// part's own, as when they are appended to it).
type refContext struct {
	parser.Context
	refs map[string]parser.Reference
}

func (c refContext) Reference(label string) (parser.Reference, bool) {
	if r, ok := c.Context.Reference(label); ok {
		return r, ok
	}
	r, ok := c.refs[label]
	return r, ok
}

// carry is a part as sent: with the definitions it needs when they are read as such at its end
// (not after an unclosed HTML block) and it stays within the limit with them.
func (s *splitter) carry(part string) string {
	withDefs, n := s.withDefs(part)
	if withDefs == part || s.count(withDefs) > s.limit {
		return part
	}
	if _, _, got := references(Parse(withDefs).root, len(part)); got != n {
		return part
	}
	return withDefs
}

// definitionText is a link reference definition's source, its lines without their container's
// prefixes.
func definitionText(def *ast.LinkReferenceDefinition, src []byte) string {
	var lines []string
	for i := range def.Lines().Len() {
		seg := def.Lines().At(i)
		lines = append(lines, strings.TrimRight(string(seg.Value(src)), "\n"))
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

// references are the labels of the reference links and images that start before offset end
// in a parse, the labels defined there, and how many references resolved.
func references(root ast.Node, end int) (used, defined map[string]bool, n int) {
	used, defined = map[string]bool{}, map[string]bool{}
	_ = ast.Walk(root, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering || c.Pos() >= end {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.LinkReferenceDefinition:
			defined[util.ToLinkReference(c.Label)] = true
		case *ast.Link, *ast.Image:
			if ref := referenceOf(c); ref != nil {
				used[util.ToLinkReference(ref.Value)] = true
				n++
			}
		}
		return ast.WalkContinue, nil
	})
	return used, defined, n
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
				start = 0 // what comes before the first block stays
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

// line is a line of the source and where it starts.
type line struct {
	at   int
	text string
}

// linesOf are the lines of a block, each with its newline.
func linesOf(blk topBlock) []line {
	var ls []line
	at := blk.start
	for _, l := range strings.SplitAfter(blk.text, "\n") {
		ls = append(ls, line{at: at, text: l})
		at += len(l)
	}
	return ls
}

// cutBlock cuts a block larger than the limit into parts that render on their own.
func (s *splitter) cutBlock(blk topBlock) []string {
	lines := linesOf(blk)
	switch n := blk.node.(type) {
	case *ast.FencedCodeBlock:
		opener := strings.TrimRight(lines[0].text, "\n")
		trimmed := strings.TrimLeft(opener, " ")
		if trimmed == "" || trimmed[0] != '`' && trimmed[0] != '~' {
			break // not the fence line (text before it): cut as text
		}
		fence := trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, trimmed[:1]))]
		body, closer := lines[1:], fence
		if len(body) > 0 {
			if last := strings.TrimSpace(body[len(body)-1].text); strings.HasPrefix(last, fence) && strings.Trim(last, fence[:1]) == "" {
				body, closer = body[:len(body)-1], last // its closing fence, which closes every part
			}
		}
		if len(body) > 0 {
			body[len(body)-1].text = strings.TrimRight(body[len(body)-1].text, "\n") + "\n"
		}
		if parts := s.packWrapped(opener+"\n", body, closer, false); parts != nil {
			return parts
		}
	case *east.Table:
		if len(lines) > 2 {
			head := lines[0].text + strings.TrimRight(lines[1].text, "\n") + "\n"
			rows := lines[2:]
			rows[len(rows)-1].text = strings.TrimRight(rows[len(rows)-1].text, "\n")
			if parts := s.packWrapped(head, rows, "", true); parts != nil {
				return parts
			}
		}
	case *ast.List:
		var starts []int
		for it := n.FirstChild(); it != nil; it = it.NextSibling() {
			if start := lineStart([]byte(s.src), it.Pos()) - blk.start; it.Pos() >= 0 && start >= 0 && start < len(blk.text) &&
				(len(starts) == 0 || start > starts[len(starts)-1]) {
				starts = append(starts, start)
			}
		}
		if len(starts) > 1 {
			var pieces []string
			for i, start := range starts {
				if i == 0 {
					start = 0
				}
				end := len(blk.text)
				if i+1 < len(starts) {
					end = starts[i+1]
				}
				it := strings.TrimRight(blk.text[start:end], " \t\n")
				if s.fits(it) {
					pieces = append(pieces, it)
				} else {
					at := blk.start + start
					pieces = append(pieces, s.cutText(at, at+len(it), s.fits, true)...)
				}
			}
			return s.pack(pieces, "\n", nil)
		}
	}
	var inline bool // what it shows is its inline text (not an HTML block's or a code block's lines)
	switch blk.node.(type) {
	case *ast.HTMLBlock, *ast.CodeBlock, *ast.FencedCodeBlock:
	default:
		inline = true
	}
	return s.cutText(blk.start, blk.start+len(blk.text), s.fits, inline)
}

// packWrapped packs units (lines with their newlines) into parts head + units + tail, each
// within the limit; a unit too large is cut as text (inline text when inline, a table's row,
// else a code block's line). Nil when head and tail leave no room.
func (s *splitter) packWrapped(head string, units []line, tail string, inline bool) []string {
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
		if s.fits(head + cur + u.text + tail) {
			cur += u.text
			continue
		}
		flush()
		if s.fits(head + u.text + tail) {
			cur = u.text
			continue
		}
		t := strings.TrimRight(u.text, "\n")
		for _, piece := range s.cutText(u.at, u.at+len(t), func(p string) bool { return s.fits(head + p + "\n" + tail) }, inline) {
			cur = piece + "\n"
			flush()
		}
	}
	flush()
	return parts
}

// pack joins pieces with sep into as few parts within the limit as it can, in order. A part of
// silent pieces only (silent[i]: a definition, which shows nothing) is left out: it would be
// an empty message.
func (s *splitter) pack(pieces []string, sep string, silent []bool) []string {
	var ps []string
	var quiet []bool
	for i, p := range pieces {
		if p != "" {
			ps = append(ps, p)
			quiet = append(quiet, i < len(silent) && silent[i])
		}
	}
	var parts []string
	for i := 0; i < len(ps); {
		end := s.fitting(ps, i, sep)
		if slices.Contains(quiet[i:end], false) {
			parts = append(parts, strings.Join(ps[i:end], sep))
		}
		i = end
	}
	return parts
}

// fitting is the end of the part that starts with ps[i]: as many pieces as fit (at least one).
// The pieces that fit are found by doubling the count tried, then halving the gap, so a part of
// n pieces costs about 2·log n counts rather than n (a count parses the part).
func (s *splitter) fitting(ps []string, i int, sep string) int {
	end := i + 1
	for step := 1; end < len(ps); step *= 2 {
		next := min(end+step, len(ps))
		if s.fits(strings.Join(ps[i:next], sep)) {
			end = next
			continue
		}
		lo, hi := end, next-1 // the last end that fits is in [lo, hi]
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if s.fits(strings.Join(ps[i:mid], sep)) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		return lo
	}
	return end
}

// cutText cuts the source from..to into pieces that fit, by the rules Split gives: at a break
// outside every span, before a span the next piece holds whole, inside spans (closed and
// opened again), or where the limit falls. inline tells whether the source shows as inline
// text (a paragraph, an item, a row), whose pieces keeps checks, or as literal lines.
func (s *splitter) cutText(from, to int, fits func(string) bool, inline bool) []string {
	c := &cutter{s: s, fits: fits, inline: inline, ignored: map[int]bool{}}
	for i := range s.spans {
		if sp := &s.spans[i]; sp.start < to && sp.end > from {
			c.spans = append(c.spans, sp)
		}
	}
	var parts []string
	lead, pos := "", from
	for pos < to {
		if rest := lead + s.src[pos:to]; fits(rest) {
			parts = append(parts, rest)
			break
		}
		piece, nextLead, next := c.cut(lead, pos, to)
		if strings.TrimSpace(piece) != "" {
			parts = append(parts, piece)
		}
		lead, pos = nextLead, next
	}
	return parts
}

// cutter cuts one text: its spans (by start), those a cut of the current piece may fall
// inside (window, indices into spans, from lo on), and those it gave up keeping whole. An
// inline text's pieces are checked (keeps), a few for each piece (checks).
type cutter struct {
	s       *splitter
	fits    func(string) bool
	inline  bool
	checks  int
	spans   []*span
	lo      int
	window  []int
	ignored map[int]bool
}

// maxChecks bounds the pieces parsed to check one cut (keeps); past it a cut is taken unchecked.
const maxChecks = 8

// cutAt is a place to cut: the piece before ends at q1, the one after starts at q2 (the blanks
// between are dropped); kind ranks the break (3 a paragraph break, 2 a line break, 1 a space,
// 0 next to a wide character) and class what it cuts (0 nothing, 1 emphasis, strikethrough or
// code spans, 2 a link's text too, -1 what must not be cut).
type cutAt struct {
	q1, q2, kind, class int
	in                  []int // the spans it falls inside, outermost first
}

const (
	kindRune = iota
	kindSpace
	kindLine
	kindPara
)

// cut cuts the first piece off lead + src[pos:to], which does not fit: the piece, and the lead
// and position of what is left.
func (c *cutter) cut(lead string, pos, to int) (string, string, int) {
	src := c.s.src
	if _, size := utf8.DecodeRuneInString(src[pos:]); lead != "" && !c.fits(lead+src[pos:pos+size]) {
		for i := range c.spans { // what it opens again takes all the room: cut as text
			if c.spans[i].contains(pos, pos) {
				c.ignored[i] = true
			}
		}
		lead = ""
	}
	ends := map[string]int{} // the fitting end with each set of closers
	endWith := func(closers string) int {
		e, ok := ends[closers]
		if !ok {
			e = c.fitEnd(lead, pos, to, closers)
			ends[closers] = e
		}
		return e
	}
	end := endWith("")
	for c.lo < len(c.spans) && c.spans[c.lo].end <= pos {
		c.lo++ // spans are by start: one before lo ended before this piece
	}
	c.window = c.window[:0]
	for i := c.lo; i < len(c.spans) && c.spans[i].start < end; i++ {
		if c.spans[i].end > pos {
			c.window = append(c.window, i)
		}
	}
	c.checks = maxChecks
	breaks := c.breaks(pos, end, to)
	secondHalf := func(k cutAt) bool {
		e := endWith(c.closers(k))
		return k.q1 <= e && k.q1 >= pos+(e-pos)/2 && c.keeps(lead, pos, to, k)
	}
	if k, ok := strongest(breaks, 0, secondHalf); ok {
		return c.at(lead, pos, to, k)
	}
	for _, ob := range c.obstacles(pos, end) { // the last break before one, if the next piece holds it
		for _, k := range breaks {
			if k.q2 > ob.start || k.class < 0 {
				continue
			}
			_, nextLead, next := c.at(lead, pos, to, k)
			if k.class < 2 && c.fits(c.piece(lead, pos, k)) && c.fits(nextLead+src[next:ob.end]+c.closers(k)) &&
				c.keeps(lead, pos, to, k) {
				return c.at(lead, pos, to, k)
			}
			break
		}
	}
	for _, class := range []int{1, 2} {
		if k, ok := strongest(breaks, class, secondHalf); ok {
			return c.at(lead, pos, to, k)
		}
	}
	return c.hard(lead, pos, end, to)
}

// keeps reports whether the piece cut at k, parsed alone, shows its text as the whole text
// does: the same characters bold, italic, struck, as code and linked, and no delimiter or
// bracket as itself that the whole did not show so (delimiters it adds that would run into the
// text's own, a reference it cannot resolve, a line that starts a code block); and, when the
// cut falls inside spans, that the rest of them, opened again, shows so too. Only an inline
// text's pieces are checked, and only the first few a cut tries.
func (c *cutter) keeps(lead string, pos, to int, k cutAt) bool {
	if !c.inline || c.checks <= 0 {
		return true
	}
	for i := range c.ignored {
		if sp := c.spans[i]; sp.start < k.q1 && sp.end > pos {
			return true // a span cut as text shows otherwise anyway
		}
	}
	c.checks--
	if !c.shows(c.piece(lead, pos, k), pos, k.q1) {
		return false
	}
	if len(k.in) == 0 {
		return true
	}
	_, nextLead, next := c.at(lead, pos, to, k)
	end := min(c.spans[k.in[0]].end, to)
	for end < to && strings.IndexByte("*_~", c.s.src[end]) >= 0 {
		end++ // a run its closing delimiter is part of: how the run pairs depends on all of it
	}
	return end-next > 4*c.s.limit || c.shows(nextLead+c.s.src[next:end], next, end)
}

// shows reports whether text, parsed alone, shows as the source from..to does in the whole.
func (c *cutter) shows(text string, from, to int) bool {
	return shownCounts(shown(c.s.parse(text), []byte(text)), 0, len(text)) == shownCounts(c.s.shown, from, to)
}

// piece is the piece a cut at k ends: lead, the text, and the delimiters that close what k
// falls inside.
func (c *cutter) piece(lead string, pos int, k cutAt) string {
	return lead + c.s.src[pos:k.q1] + c.closers(k)
}

// strongest is the break of class that ok accepts of the strongest kind, the last of that kind.
func strongest(breaks []cutAt, class int, ok func(cutAt) bool) (cutAt, bool) {
	for kind := kindPara; kind >= kindRune; kind-- {
		for _, k := range breaks { // last first
			if k.kind == kind && k.class == class && ok(k) {
				return k, true
			}
		}
	}
	return cutAt{}, false
}

// hard cuts where the limit falls: the last place at or before end where a cut is allowed and
// the piece fits with what it closes; a span that leaves no such place is cut as text.
func (c *cutter) hard(lead string, pos, end, to int) (string, string, int) {
	src := c.s.src
	x := end
	var first *cutAt // the first place that fits, taken when none checked keeps the text
	for range 2*len(c.window) + maxChecks + 4 {
		k, ok := c.allowedBefore(pos, x, to)
		if !ok {
			if first != nil {
				break
			}
			if !c.ignore(c.blocker(x)) {
				break
			}
			x = end
			continue
		}
		closers := c.closers(k)
		if closers == "" || c.fits(c.piece(lead, pos, k)) {
			if first == nil {
				first = &k
			}
			if c.checks <= 0 {
				break
			}
			if c.keeps(lead, pos, to, k) {
				return c.at(lead, pos, to, k)
			}
			x = k.q1 - 1 // the place before
			continue
		}
		if e := c.fitEnd(lead, pos, to, closers); e < k.q1 && e > pos && c.fits(lead+src[pos:e]+closers) {
			x = e // room for what it closes, or before the first span it closes that opens here
			for _, i := range k.in {
				if sp := c.spans[i]; sp.start >= pos {
					x = max(x, sp.start)
					break
				}
			}
			continue
		}
		if !c.ignore(k.in[0]) { // what it closes takes all the room
			break
		}
		x = end
	}
	if first != nil {
		return c.at(lead, pos, to, *first)
	}
	return lead + src[pos:end], "", trimLeft(src, end, to)
}

// ignore gives up keeping span i whole (cutting it as text); false when i is none.
func (c *cutter) ignore(i int) bool {
	if i < 0 || c.ignored[i] {
		return false
	}
	c.ignored[i] = true
	return true
}

// allowedBefore is the last place to cut at a character boundary in (pos, x] that no span
// forbids, preferring one in the second half with no punctuation on either side (a cut inside
// a run of "*" or of backticks would change what the run means).
func (c *cutter) allowedBefore(pos, x, to int) (cutAt, bool) {
	src := c.s.src
	for _, anyChar := range []bool{false, true} {
		for p := x; p > pos && (anyChar || p >= pos+(x-pos)/2); p-- {
			if p < to && !utf8.RuneStart(src[p]) {
				continue
			}
			q1, q2 := trimRight(src, pos, p), trimLeft(src, p, to)
			if q1 <= pos || q2 >= to || !anyChar && (util.IsPunct(src[q1-1]) || util.IsPunct(src[q2])) {
				continue
			}
			if k := c.classify(cutAt{q1: q1, q2: q2}); k.class >= 0 {
				return k, true
			}
		}
	}
	return cutAt{}, false
}

// obstacles are the spans started in this piece that a cut at end would fall inside,
// outermost first.
func (c *cutter) obstacles(pos, end int) []*span {
	var out []*span
	for _, i := range c.window {
		if sp := c.spans[i]; !c.ignored[i] && sp.start >= pos && sp.contains(end, end) {
			out = append(out, sp)
		}
	}
	return out
}

// blocker is the span to cut as text when no place at or before x allows a cut: the outermost
// that forbids a cut at x, else the innermost it falls inside (one of two with the same
// delimiters), or -1.
func (c *cutter) blocker(x int) int {
	if i := c.outermost(x, x, true); i >= 0 {
		return i
	}
	if k := c.classify(cutAt{q1: x, q2: x}); len(k.in) > 0 {
		return k.in[len(k.in)-1]
	}
	return -1
}

// outermost is the index of the outermost span (not given up) a cut at q1..q2 falls inside
// (only those that forbid it when forbidding), or -1.
func (c *cutter) outermost(q1, q2 int, forbidding bool) int {
	for _, i := range c.window {
		if sp := c.spans[i]; !c.ignored[i] && sp.contains(q1, q2) && (!forbidding || !c.allows(sp, q1, q2)) {
			return i
		}
	}
	return -1
}

// allows reports whether a cut at q1..q2 inside sp is allowed: inside its text, leaving text on
// both sides; for a code span only within one or two backticks; elsewhere not after a
// backslash (which would escape the closing delimiter), and for emphasis or strikethrough not
// next to a space (the delimiters it adds would not close or open there). Whether they run
// into a delimiter of the text and mean something else is left to keeps.
func (c *cutter) allows(sp *span, q1, q2 int) bool {
	src := c.s.src
	if sp.in >= q1 || q2 >= sp.out {
		return false
	}
	if sp.code {
		return len(sp.open) < 3 // opening a part, "```" would start a code block
	}
	if src[q1-1] == '\\' {
		return false
	}
	if sp.link {
		return true
	}
	before, _ := utf8.DecodeLastRuneInString(src[:q1])
	after, _ := utf8.DecodeRuneInString(src[q2:])
	return !unicode.IsSpace(before) && !unicode.IsSpace(after)
}

// classify fills in what a cut at k.q1..k.q2 falls inside. A cut inside two emphases with the
// same delimiters, or two strikethroughs, is not allowed: closed and opened again together,
// their delimiters would make one run ("*" and "*" a "**", "~" and "~~" a "~~~") that means
// something else.
func (c *cutter) classify(k cutAt) cutAt {
	k.class, k.in = 0, nil
	for _, i := range c.window {
		if sp := c.spans[i]; c.ignored[i] || !sp.contains(k.q1, k.q2) {
			continue
		}
		sp := c.spans[i]
		same := false
		for _, j := range k.in {
			o := c.spans[j].open
			same = same || !sp.code && !sp.link && sp.open != "" &&
				(o == sp.open || strings.HasPrefix(o, "~") && strings.HasPrefix(sp.open, "~"))
		}
		k.in = append(k.in, i)
		switch {
		case same || !c.allows(sp, k.q1, k.q2):
			k.class = -1
		case k.class >= 0 && sp.link:
			k.class = 2
		case k.class == 0:
			k.class = 1
		}
	}
	return k
}

// closers close the spans a cut falls inside, innermost first (a code span's backticks apart
// from a backtick of its text).
func (c *cutter) closers(k cutAt) string {
	var b strings.Builder
	for i := len(k.in) - 1; i >= 0; i-- {
		sp := c.spans[k.in[i]]
		if sp.code && c.s.src[k.q1-1] == '`' {
			b.WriteByte(' ')
		}
		b.WriteString(sp.close)
	}
	return b.String()
}

// at cuts at k: the piece, and the lead and position of the rest (the spans it cuts opened
// again where the next line's text starts, after a quote's "> ").
func (c *cutter) at(lead string, pos, to int, k cutAt) (string, string, int) {
	src := c.s.src
	piece := c.piece(lead, pos, k)
	if len(k.in) == 0 {
		return piece, "", k.q2
	}
	next := min(textStart(c.spans[k.in[len(k.in)-1]].lines, k.q2), to)
	next = trimLeft(src, next, to)
	var open strings.Builder
	for _, i := range k.in {
		open.WriteString(c.spans[i].open)
		if c.spans[i].code && next < len(src) && src[next] == '`' {
			open.WriteByte(' ')
		}
	}
	return piece, src[k.q2:next] + open.String(), next
}

// breaks are the places to cut in (pos, end], last first: blank runs (the piece before ending
// at their start, within end) and boundaries next to a wide character, not before wide
// punctuation other than an opening bracket or quote, and after it as strong as a space.
func (c *cutter) breaks(pos, end, to int) []cutAt {
	src := c.s.src
	var out []cutAt
	prevWide, prevBlank, prevStop := false, true, false
	for i := pos; i < to && i <= end; {
		if isBreak(src[i]) {
			j, nl := i, 0
			for j < to && isBreak(src[j]) {
				if src[j] == '\n' {
					nl++
				}
				j++
			}
			if i > pos && j < to {
				out = append(out, c.classify(cutAt{q1: i, q2: j, kind: min(kindSpace+nl, kindPara)}))
			}
			i, prevBlank = j, true
			continue
		}
		r, size := utf8.DecodeRuneInString(src[i:])
		w := isWide(r)
		stop := w && unicode.IsPunct(r) && !strings.ContainsRune("「『（【《〈“‘", r)
		if i > pos && !prevBlank && (w || prevWide) && !stop { // a part never starts with "，" or "」"
			kind := kindRune
			if prevStop {
				kind = kindSpace // after "，" or "。" as after a space
			}
			out = append(out, c.classify(cutAt{q1: i, q2: i, kind: kind}))
		}
		prevWide, prevBlank, prevStop = w, false, stop
		i += size
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// fitEnd is the longest prefix src[pos:e] (e on a character boundary, at least one character
// past pos) such that lead + src[pos:e] + suffix fits.
func (c *cutter) fitEnd(lead string, pos, to int, suffix string) int {
	src := c.s.src
	lo, hi := pos, to // lo fits (or is pos), hi does not
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		for mid > lo && !utf8.RuneStart(src[mid]) {
			mid--
		}
		if mid == lo {
			mid = (lo + hi) / 2
			for mid < hi && !utf8.RuneStart(src[mid]) {
				mid++
			}
			if mid == hi {
				break
			}
		}
		if c.fits(lead + src[pos:mid] + suffix) {
			lo = mid
		} else {
			hi = mid
		}
	}
	if lo == pos {
		_, size := utf8.DecodeRuneInString(src[pos:])
		return pos + size
	}
	return lo
}

// trimRight is p moved back over blanks, not before pos.
func trimRight(src string, pos, p int) int {
	for p > pos && isBreak(src[p-1]) {
		p--
	}
	return p
}

// trimLeft is p moved on over blanks, not past to.
func trimLeft(src string, p, to int) int {
	for p < to && isBreak(src[p]) {
		p++
	}
	return p
}

// isBreak reports whether c is a blank a cut drops (a line's indent would make code of a part).
func isBreak(c byte) bool { return c == ' ' || c == '\t' || c == '\n' }

// isWide reports whether r is East Asian wide or fullwidth (CJK, kana, hangul, their
// punctuation): text in those scripts is cut between characters.
func isWide(r rune) bool {
	k := width.LookupRune(r).Kind()
	return k == width.EastAsianWide || k == width.EastAsianFullwidth
}
