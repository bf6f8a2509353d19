package matrix

import (
	"bytes"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// MarkdownOf is the Markdown of a person's formatted_body (org.matrix.custom.html), so the
// agent reads their formatting as the same Markdown it writes (edge-api §7.3). The HTML is
// parsed as HTML (golang.org/x/net/html), never matched with patterns, and the spec's tags are
// mapped: b/strong, i/em, del/s/strike, code, pre>code (its language-x class as the fence's
// language), a href (http, https, ftp, mailto, magnet), blockquote, ul/ol/li (ol's start), h1-h6,
// br, p, hr, table. A mention (a matrix.to or matrix: link to a user or a room) is its text; the
// reply fallback (mx-reply) is left out, as are script and style; any other tag is its content.
// Text is escaped where Markdown would read it as markup, so "2*3*4" stays text.
func MarkdownOf(formatted string) string {
	nodes, err := html.ParseFragment(strings.NewReader(formatted), &html.Node{Type: html.ElementNode, Data: "div", DataAtom: atom.Div})
	if err != nil { // x/net/html parses any input; an error is a reader's
		return ""
	}
	c := &mdConv{}
	return strings.Join(c.blocks(nodes), "\n\n")
}

// mdConv converts parsed HTML to Markdown.
type mdConv struct {
	inCell bool // inside a table cell: '|' escaped, breaks as spaces
	inLink bool // inside a link's text: ']' escaped
	other  bool // the list being written uses "*" and "N)" (it follows a list of its kind)
}

// blocks converts a run of sibling nodes into Markdown blocks: inline nodes gather into
// paragraphs, block elements are blocks of their own.
func (c *mdConv) blocks(nodes []*html.Node) []string {
	var out []string
	var para bytes.Buffer
	flush := func() {
		if p := tidyLines(para.String()); p != "" {
			out = append(out, p)
		}
		para.Reset()
	}
	var prev atom.Atom // the last block's element, when no paragraph came after it
	for _, n := range nodes {
		if n.Type != html.ElementNode || !isBlock(n) {
			c.inline(&para, n)
			if strings.TrimSpace(para.String()) != "" {
				prev = 0
			}
			continue
		}
		flush()
		var b string
		if (n.DataAtom == atom.Ul || n.DataAtom == atom.Ol) && n.DataAtom == prev {
			c.other = true // a list right after a list of its kind: other markers, or they merge
			b = c.block(n)
			c.other = false
		} else {
			b = c.block(n)
		}
		if b != "" {
			out = append(out, b)
			prev = n.DataAtom
		}
	}
	flush()
	return out
}

func children(n *html.Node) []*html.Node {
	var out []*html.Node
	for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
		out = append(out, ch)
	}
	return out
}

func isBlock(n *html.Node) bool {
	switch n.DataAtom {
	case atom.P, atom.Div, atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6, atom.Blockquote,
		atom.Ul, atom.Ol, atom.Li, atom.Pre, atom.Table, atom.Hr, atom.Details, atom.Summary, atom.Caption,
		atom.Script, atom.Style:
		return true
	}
	return n.Data == "mx-reply"
}

func (c *mdConv) block(n *html.Node) string {
	switch n.DataAtom {
	case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6:
		level := int(n.Data[1] - '0')
		return strings.TrimSpace(strings.Repeat("#", level) + " " + c.inlineText(n, true))
	case atom.Hr:
		return "---"
	case atom.Pre:
		return fenced(n)
	case atom.Blockquote:
		return prefixLines(strings.Join(c.blocks(children(n)), "\n\n"), "> ", "> ")
	case atom.Ul, atom.Ol:
		return c.list(n)
	case atom.Table:
		return c.table(n)
	case atom.Script, atom.Style:
		return ""
	}
	if n.Data == "mx-reply" { // the quoted message a reply once carried
		return ""
	}
	// p, div, details, summary, caption, a stray li: their content.
	return strings.Join(c.blocks(children(n)), "\n\n")
}

// list is a ul or ol: "- " or "N. " items, their continuation lines indented under the
// marker; items with paragraphs are apart (a loose list).
func (c *mdConv) list(n *html.Node) string {
	num := 1
	if s, err := strconv.Atoi(attr(n, "start")); err == nil && s >= 0 && s < 1e9 {
		num = s
	}
	var lis [][]*html.Node
	loose := false
	for _, li := range children(n) {
		if li.Type != html.ElementNode {
			continue
		}
		kids := []*html.Node{li}
		if li.DataAtom == atom.Li {
			kids = children(li)
		}
		for _, k := range kids {
			loose = loose || k.DataAtom == atom.P
		}
		lis = append(lis, kids)
	}
	bullet, delim := "- ", ". "
	if c.other {
		bullet, delim = "* ", ") "
	}
	c.other = false // not for lists inside it
	var items []string
	for _, kids := range lis {
		marker := bullet
		if n.DataAtom == atom.Ol {
			marker = strconv.Itoa(num) + delim
			num++
		}
		sep := "\n"
		bs := c.blocks(kids)
		if loose {
			sep = "\n\n"
		}
		body := strings.Join(bs, sep)
		items = append(items, prefixLines(body, marker, strings.Repeat(" ", len(marker))))
	}
	if loose {
		return strings.Join(items, "\n\n")
	}
	return strings.Join(items, "\n")
}

// table is a GFM table: the first row its header (a table without rows is nothing).
func (c *mdConv) table(n *html.Node) string {
	var rows [][]string
	var aligns []string // the first row's cells' alignment (a style or an align attribute)
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			switch ch.DataAtom {
			case atom.Tr:
				var row []string
				for cell := ch.FirstChild; cell != nil; cell = cell.NextSibling {
					if cell.DataAtom == atom.Td || cell.DataAtom == atom.Th {
						cc := &mdConv{inCell: true}
						row = append(row, cc.inlineText(cell, true))
						if len(rows) == 0 {
							aligns = append(aligns, alignOf(cell))
						}
					}
				}
				rows = append(rows, row)
			case atom.Thead, atom.Tbody, atom.Tfoot:
				walk(ch)
			}
		}
	}
	walk(n)
	cols := 0
	for _, r := range rows {
		cols = max(cols, len(r))
	}
	if cols == 0 {
		return ""
	}
	line := func(cells []string) string {
		for len(cells) < cols {
			cells = append(cells, "")
		}
		return "| " + strings.Join(cells, " | ") + " |"
	}
	delims := slicesRepeat("---", cols)
	for i, a := range aligns {
		switch a {
		case "left":
			delims[i] = ":---"
		case "center":
			delims[i] = ":---:"
		case "right":
			delims[i] = "---:"
		}
	}
	out := []string{line(rows[0]), line(delims)}
	for _, r := range rows[1:] {
		out = append(out, line(r))
	}
	return strings.Join(out, "\n")
}

// alignOf is a cell's text-align ("" when none).
func alignOf(cell *html.Node) string {
	if a := strings.ToLower(attr(cell, "align")); a != "" {
		return a
	}
	for _, decl := range strings.Split(attr(cell, "style"), ";") {
		if k, v, ok := strings.Cut(decl, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "text-align") {
			return strings.ToLower(strings.TrimSpace(v))
		}
	}
	return ""
}

func slicesRepeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// fenced is a pre as a fenced code block: its text as written, its code's language-x class as
// the info string, the fence longer than any backtick run in the text.
func fenced(n *html.Node) string {
	lang := ""
	for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
		if ch.DataAtom == atom.Code {
			for _, cl := range strings.Fields(attr(ch, "class")) {
				if l, ok := strings.CutPrefix(cl, "language-"); ok && l != "" && !strings.Contains(l, "`") {
					lang = l
				}
			}
		}
	}
	text := strings.TrimRight(textOf(n), "\n")
	fence := strings.Repeat("`", max(3, longestRun(text, '`')+1))
	if text == "" {
		return fence + lang + "\n" + fence
	}
	return fence + lang + "\n" + text + "\n" + fence
}

// inlineText is n's inline content as one paragraph's Markdown (oneLine: breaks as spaces).
func (c *mdConv) inlineText(n *html.Node, oneLine bool) string {
	var b bytes.Buffer
	for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
		c.inlineAny(&b, ch)
	}
	s := tidyLines(b.String())
	if oneLine {
		s = strings.TrimSpace(strings.NewReplacer("  \n", " ", "\n", " ").Replace(s))
	}
	return s
}

// inlineAny renders any node inline (a block inside a heading or a cell: its text).
func (c *mdConv) inlineAny(b *bytes.Buffer, n *html.Node) {
	if n.Type == html.ElementNode && isBlock(n) {
		if n.Data == "mx-reply" || n.DataAtom == atom.Script || n.DataAtom == atom.Style {
			return
		}
		space(b)
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			c.inlineAny(b, ch)
		}
		space(b)
		return
	}
	c.inline(b, n)
}

func space(b *bytes.Buffer) {
	if b.Len() > 0 && !endsSpace(b) {
		b.WriteByte(' ')
	}
}

func endsSpace(b *bytes.Buffer) bool {
	if b.Len() == 0 {
		return true
	}
	last := b.Bytes()[b.Len()-1]
	return last == ' ' || last == '\n'
}

// inline renders one inline node into b.
func (c *mdConv) inline(b *bytes.Buffer, n *html.Node) {
	switch n.Type {
	case html.TextNode:
		c.text(b, n.Data)
		return
	case html.ElementNode:
	default:
		return
	}
	switch n.DataAtom {
	case atom.B, atom.Strong:
		c.wrap(b, n, "**")
	case atom.I, atom.Em:
		c.wrap(b, n, "*")
	case atom.Del, atom.S, atom.Strike:
		c.wrap(b, n, "~~")
	case atom.Code:
		codeSpan(b, textOf(n), c.inCell)
	case atom.Br:
		if c.inCell {
			space(b)
		} else {
			trimSpaces(b)
			b.WriteString("  \n")
		}
	case atom.A:
		c.link(b, n)
	case atom.Img: // its alt text: an image in a formatted body is an emoji or a sticker
		c.text(b, attr(n, "alt"))
	case atom.Script, atom.Style:
	default: // u, sup, sub, font, span (a spoiler too), unknown tags: their content
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			c.inlineAny(b, ch)
		}
	}
}

// wrap writes n's content between delim, with the spaces at its edges outside (where
// CommonMark reads a delimiter), and nothing around an empty content.
func (c *mdConv) wrap(b *bytes.Buffer, n *html.Node, delim string) {
	start := b.Len()
	for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
		c.inlineAny(b, ch)
	}
	seg := string(b.Bytes()[start:])
	b.Truncate(start)
	core := strings.TrimRight(strings.TrimLeft(seg, " \n"), " \n")
	if core == "" {
		b.WriteString(seg)
		return
	}
	lead := seg[:strings.Index(seg, core)]
	b.WriteString(lead)
	b.WriteString(delim + core + delim)
	b.WriteString(seg[len(lead)+len(core):])
}

// link writes a link as [text](href); a mention as its text; a link whose text is its address
// as <address>; an unsafe or relative link as its text.
func (c *mdConv) link(b *bytes.Buffer, n *html.Node) {
	href := strings.TrimSpace(attr(n, "href"))
	start := b.Len()
	outer := c.inLink
	c.inLink = true
	for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
		c.inlineAny(b, ch)
	}
	c.inLink = outer
	label := string(b.Bytes()[start:])
	if mention(href) || !linkable(href) || strings.TrimSpace(label) == "" {
		return
	}
	dest := escapeDest(href)
	if t := textOf(n); (t == href || "mailto:"+t == href) && !strings.ContainsAny(href, " <>") {
		b.Truncate(start)
		b.WriteString("<" + t + ">")
		return
	}
	b.Truncate(start)
	b.WriteString("[" + label + "](" + dest + ")")
}

// mention reports whether href is a mention: a matrix.to or matrix: link to a user or a room
// (a link to an event is a link).
func mention(href string) bool {
	if rest, ok := strings.CutPrefix(href, "https://matrix.to/#/"); ok {
		rest, _, _ = strings.Cut(rest, "?")
		return rest != "" && !strings.Contains(rest, "/")
	}
	if rest, ok := strings.CutPrefix(href, "matrix:"); ok {
		rest, _, _ = strings.Cut(rest, "?")
		return !strings.Contains(rest, "/e/")
	}
	return false
}

// linkable: the schemes the spec lets a client follow from a message.
func linkable(href string) bool {
	scheme, _, ok := strings.Cut(href, ":")
	if !ok {
		return false
	}
	switch strings.ToLower(scheme) {
	case "http", "https", "ftp", "mailto", "magnet":
		return true
	}
	return false
}

// escapeDest writes a link destination Markdown reads back whole.
var destEscaper = strings.NewReplacer(" ", "%20", "<", "%3C", ">", "%3E", "(", `\(`, ")", `\)`, "\n", "")

func escapeDest(s string) string { return destEscaper.Replace(s) }

// codeSpan writes s as a code span: a backtick run longer than any in s, a space inside when s
// starts or ends with a backtick or a space (Markdown takes one off each side).
func codeSpan(b *bytes.Buffer, s string, inCell bool) {
	s = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
	if s == "" {
		return
	}
	if strings.TrimSpace(s) == "" { // spaces only: kept as they are
		b.WriteString("`" + s + "`")
		return
	}
	if inCell {
		s = strings.ReplaceAll(s, "|", `\|`)
	}
	ticks := strings.Repeat("`", longestRun(s, '`')+1)
	pad := ""
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") || strings.HasPrefix(s, " ") || strings.HasSuffix(s, " ") {
		pad = " "
	}
	b.WriteString(ticks + pad + s + pad + ticks)
}

func longestRun(s string, r byte) int {
	best, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == r {
			run++
			best = max(best, run)
		} else {
			run = 0
		}
	}
	return best
}

// text writes an HTML text node: white space collapsed (a run with a line break is a line break,
// Markdown's soft break), and escaped where Markdown would read markup.
func (c *mdConv) text(b *bytes.Buffer, s string) {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\f' {
			j, nl := i, false
			for j < len(s) && strings.IndexByte(" \t\n\r\f", s[j]) >= 0 {
				nl = nl || s[j] == '\n'
				j++
			}
			switch {
			case b.Len() == 0 || endsSpace(b):
			case nl && !c.inCell:
				b.WriteByte('\n')
			default:
				b.WriteByte(' ')
			}
			i = j
			continue
		}
		lineStart := b.Len() == 0 || b.Bytes()[b.Len()-1] == '\n'
		var prev, next rune
		if i > 0 {
			prev, _ = utf8.DecodeLastRuneInString(s[:i])
		}
		if i+size < len(s) {
			next, _ = utf8.DecodeRuneInString(s[i+size:])
		}
		if needsEscape(r, prev, next, lineStart, c.inCell) || r == ']' && c.inLink {
			b.WriteByte('\\')
		} else if lineStart && r >= '0' && r <= '9' {
			// "1. " or "1) " at a line's start would be a list item.
			j := i
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			if j < len(s) && (s[j] == '.' || s[j] == ')') && (j+1 == len(s) || s[j+1] == ' ') {
				b.WriteString(s[i:j] + `\`)
				i = j
				continue
			}
		}
		b.WriteRune(r)
		i += size
	}
}

// needsEscape: the characters Markdown could read as markup where they stand.
func needsEscape(r, prev, next rune, lineStart, inCell bool) bool {
	switch r {
	case '\\', '`', '*', '[', '~':
		return true
	case '_': // not inside a word, where it is never emphasis
		return !(isWord(prev) && isWord(next))
	case '<': // a tag or an autolink
		return unicode.IsLetter(next) || next == '/' || next == '!' || next == '?'
	case '&': // an entity
		return unicode.IsLetter(next) || next == '#'
	case '|':
		return inCell
	case '#', '>', '-', '+', '=': // a heading, a quote, a list item, a rule or an underline
		return lineStart
	}
	return false
}

func isWord(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// tidyLines trims each line's edges (a hard break's two trailing spaces kept) and the text's.
func tidyLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		hard := strings.HasSuffix(l, "  ") && i < len(lines)-1
		l = strings.TrimSpace(l)
		if hard && l != "" {
			l += "  "
		}
		lines[i] = l
	}
	// No empty line inside a paragraph (it would end it), none at its edges.
	out := lines[:0]
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	if len(out) > 0 {
		out[len(out)-1] = strings.TrimRight(out[len(out)-1], " ")
	}
	return strings.Join(out, "\n")
}

func trimSpaces(b *bytes.Buffer) {
	for b.Len() > 0 && b.Bytes()[b.Len()-1] == ' ' {
		b.Truncate(b.Len() - 1)
	}
}

// prefixLines prefixes the first line of s with first and the others with rest (an empty line
// gets rest without its trailing spaces).
func prefixLines(s, first, rest string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		p := rest
		if i == 0 {
			p = first
		}
		if l == "" {
			p = strings.TrimRight(p, " ")
		}
		lines[i] = p + l
	}
	return strings.Join(lines, "\n")
}

// textOf is the text under n, as written.
func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		if n.Type == html.ElementNode && n.DataAtom == atom.Br {
			b.WriteByte('\n')
		}
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			walk(ch)
		}
	}
	walk(n)
	return b.String()
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}
