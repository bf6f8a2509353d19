package markdown

import (
	"bytes"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"golang.org/x/text/width"

	"github.com/yuin/goldmark/ast"
	east "github.com/yuin/goldmark/extension/ast"
)

// Dialect is an HTML form: which of Markdown's blocks it has tags for, and how it writes the
// others with what it has. Only the tags a dialect names are ever written, and every text is
// escaped, so what a message holds cannot add a tag or an attribute.
type Dialect struct {
	// Name names the form in logs and metrics.
	Name string
	// Blocks: <p>, <h1>…<h6>, <ul>/<ol>/<li>, <hr>, <table>. Without them a paragraph ends with a
	// blank line, a heading is a bold line, a list item a "• " or "1. " line, a rule a line of
	// dashes and a table aligned text in <pre>.
	Blocks bool
	// Strike is the strikethrough tag ("del", "s").
	Strike string
	// Break is a hard line break ("<br>", or "\n" where newlines show as such).
	Break string
	// LinkAttrs are added to every <a> (the web page's rel and target).
	LinkAttrs string
	// Align writes a table column's alignment as the cells' align attribute.
	Align bool
	// Entities is Telegram's entity model (https://core.telegram.org/bots/api#formatting-options):
	// code and pre are never part of another entity (inside bold, italic, a strikethrough or a
	// link a code span is its text) and quotes do not nest (a quote in a quote is its content).
	Entities bool
}

// The dialects.
var (
	// Web is the webchat page's form (and the webhook's "html"): every block, links that open
	// apart and tell nothing of the page.
	Web = Dialect{Name: "web", Blocks: true, Strike: "del", Break: "<br>", LinkAttrs: ` rel="nofollow noopener noreferrer" target="_blank"`, Align: true}
	// Matrix is org.matrix.custom.html (the client-server spec's recommended tags).
	Matrix = Dialect{Name: "matrix", Blocks: true, Strike: "del", Break: "<br>"}
	// Telegram is the Bot API's HTML parse mode: b, i, s, u, a, code, pre (with a
	// language-x class), blockquote; everything else written as text with those.
	Telegram = Dialect{Name: "telegram", Strike: "s", Break: "\n", Entities: true}
)

// HTML renders d in dialect dl.
func (d *Doc) HTML(dl Dialect) string {
	r := &htmlRenderer{d: d, dl: dl}
	r.blocks(d.root)
	return strings.TrimRight(r.b.String(), "\n")
}

// Plain renders d as plain text: no markup, emphasis as its text, headings and paragraphs as
// lines, lists with "• " and "1. ", code as written, tables as aligned text, quotes with "> ",
// links as "text (url)".
func (d *Doc) Plain() string {
	r := &htmlRenderer{d: d, dl: Dialect{Name: "plain", Break: "\n"}, plain: true}
	r.blocks(d.root)
	return strings.TrimRight(r.b.String(), "\n")
}

type htmlRenderer struct {
	d      *Doc
	dl     Dialect
	plain  bool // no markup at all, nothing escaped
	b      bytes.Buffer
	depth  int // list nesting, for dialects without lists
	open   int // inline entities open around the current node (emphasis, strikethrough, link)
	inLink bool
	quote  int // blockquote nesting
}

func (r *htmlRenderer) esc(s string) {
	if r.plain {
		r.b.WriteString(s)
		return
	}
	textEscaper.WriteString(&r.b, s)
}

// textEscaper escapes text for every dialect: &, < and > (Telegram knows only &lt;, &gt;, &amp;
// and &quot; among named entities); attrEscaper also the quote, for attribute values.
var (
	textEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")
	attrEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
)

// tag writes markup, which plain text has none of.
func (r *htmlRenderer) tag(s string) {
	if !r.plain {
		r.b.WriteString(s)
	}
}

// blocks renders the children of a container block.
func (r *htmlRenderer) blocks(n ast.Node) {
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		r.block(c)
	}
}

func (r *htmlRenderer) block(n ast.Node) {
	switch n := n.(type) {
	case *ast.Paragraph, *ast.TextBlock:
		r.para(n)
	case *ast.Heading:
		if r.dl.Blocks {
			tag := "h" + strconv.Itoa(n.Level)
			r.tag("<" + tag + ">")
			r.inlines(n)
			r.tag("</" + tag + ">")
			r.b.WriteString("\n")
		} else {
			r.tag("<b>")
			r.open++
			r.inlines(n)
			r.open--
			r.tag("</b>")
			r.b.WriteString("\n\n")
		}
	case *ast.ThematicBreak:
		if r.dl.Blocks {
			r.tag("<hr>")
			r.b.WriteString("\n")
		} else {
			r.b.WriteString("——————\n\n")
		}
	case *ast.FencedCodeBlock:
		r.code(string(n.Language(r.d.src)), r.d.lines(n))
	case *ast.CodeBlock:
		r.code("", r.d.lines(n))
	case *ast.HTMLBlock: // raw HTML is shown as text
		if r.dl.Blocks {
			r.tag("<p>")
			r.esc(strings.TrimRight(r.d.lines(n), "\n"))
			r.tag("</p>")
			r.b.WriteString("\n")
		} else {
			r.esc(strings.TrimRight(r.d.lines(n), "\n"))
			r.b.WriteString("\n\n")
		}
	case *ast.Blockquote:
		if r.dl.Entities && r.quote > 0 { // Telegram's quotes do not nest
			r.blocks(n)
			return
		}
		r.tag("<blockquote>")
		inner := &htmlRenderer{d: r.d, dl: r.dl, plain: r.plain, quote: r.quote + 1}
		inner.blocks(n)
		quoted := strings.TrimRight(inner.b.String(), "\n")
		if r.plain {
			quoted = "> " + strings.ReplaceAll(quoted, "\n", "\n> ")
		}
		r.b.WriteString(quoted)
		r.tag("</blockquote>")
		r.b.WriteString("\n")
		if !r.dl.Blocks {
			r.b.WriteString("\n")
		}
	case *ast.List:
		r.list(n)
	case *east.Table:
		r.table(n)
	default:
		r.blocks(n)
	}
}

func (r *htmlRenderer) para(n ast.Node) {
	item, inItem := n.Parent().(*ast.ListItem)
	switch {
	case inItem && !r.dl.Blocks:
		r.inlines(n)
		r.b.WriteString("\n")
	case inItem && item.Parent().(*ast.List).IsTight:
		r.inlines(n)
	case r.dl.Blocks:
		r.tag("<p>")
		r.inlines(n)
		r.tag("</p>")
		r.b.WriteString("\n")
	default:
		r.inlines(n)
		r.b.WriteString("\n\n")
	}
}

func (r *htmlRenderer) code(lang, body string) {
	if r.dl.Entities && strings.TrimSpace(body) == "" { // Telegram refuses an empty entity
		return
	}
	open := "<pre><code>"
	if lang != "" && safeClass(lang) {
		open = `<pre><code class="language-` + lang + `">`
	}
	r.tag(open)
	r.esc(strings.TrimRight(body, "\n"))
	r.tag("</code></pre>")
	r.b.WriteString("\n")
	if !r.dl.Blocks {
		r.b.WriteString("\n")
	}
}

// safeClass: a code block's language goes into a class attribute only when it is a plain name.
func safeClass(lang string) bool {
	for _, c := range lang {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '+' || c == '#' || c == '.') {
			return false
		}
	}
	return len(lang) <= 32
}

func (r *htmlRenderer) list(l *ast.List) {
	if r.dl.Blocks {
		tag := "ul"
		if l.IsOrdered() {
			tag = "ol"
		}
		r.tag("<" + tag)
		if l.IsOrdered() && l.Start != 1 {
			r.b.WriteString(` start="` + strconv.Itoa(l.Start) + `"`)
		}
		r.b.WriteString(">\n")
		for it := l.FirstChild(); it != nil; it = it.NextSibling() {
			r.tag("<li>")
			r.blocks(it)
			trimNewline(&r.b)
			r.tag("</li>")
			r.b.WriteString("\n")
		}
		r.tag("</" + tag + ">")
		r.b.WriteString("\n")
		return
	}
	n := l.Start
	for it := l.FirstChild(); it != nil; it = it.NextSibling() {
		r.b.WriteString(strings.Repeat("    ", r.depth))
		if l.IsOrdered() {
			r.b.WriteString(strconv.Itoa(n) + ". ")
			n++
		} else {
			r.b.WriteString("• ")
		}
		r.depth++
		for c := it.FirstChild(); c != nil; c = c.NextSibling() {
			if c != it.FirstChild() {
				if _, nested := c.(*ast.List); !nested {
					r.b.WriteString(strings.Repeat("    ", r.depth))
				}
			}
			r.block(c)
			trimNewline(&r.b)
			r.b.WriteString("\n")
		}
		if it.FirstChild() == nil {
			r.b.WriteString("\n")
		}
		r.depth--
	}
	if r.depth == 0 {
		r.b.WriteString("\n")
	}
}

func trimNewline(b *bytes.Buffer) {
	for b.Len() > 0 && b.Bytes()[b.Len()-1] == '\n' {
		b.Truncate(b.Len() - 1)
	}
}

func (r *htmlRenderer) table(t *east.Table) {
	if !r.dl.Blocks {
		r.tag("<pre>")
		r.esc(r.d.tableText(t))
		r.tag("</pre>")
		r.b.WriteString("\n\n")
		return
	}
	r.tag("<table>")
	r.b.WriteString("\n")
	for row := t.FirstChild(); row != nil; row = row.NextSibling() {
		_, head := row.(*east.TableHeader)
		if head {
			r.tag("<thead>")
		}
		r.tag("<tr>")
		for cell := row.FirstChild(); cell != nil; cell = cell.NextSibling() {
			tag := "td"
			if head {
				tag = "th"
			}
			if a := cell.(*east.TableCell).Alignment; r.dl.Align && a != east.AlignNone {
				r.tag("<" + tag + ` align="` + a.String() + `">`)
			} else {
				r.tag("<" + tag + ">")
			}
			r.inlines(cell)
			r.tag("</" + tag + ">")
		}
		r.tag("</tr>")
		if head {
			r.tag("</thead>")
		}
		r.b.WriteString("\n")
	}
	r.tag("</table>")
	r.b.WriteString("\n")
}

// inlines renders the inline children of n.
func (r *htmlRenderer) inlines(n ast.Node) {
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		r.inline(c)
	}
}

func (r *htmlRenderer) inline(n ast.Node) {
	switch n := n.(type) {
	case *ast.Text:
		r.esc(r.d.textValue(n))
		switch {
		case n.HardLineBreak():
			r.b.WriteString(r.dl.Break)
			if r.dl.Break != "\n" {
				r.b.WriteString("\n")
			}
		case n.SoftLineBreak():
			r.b.WriteString("\n")
		}
	case *ast.String:
		r.esc(string(n.Value))
	case *ast.CodeSpan:
		if r.dl.Entities && r.open > 0 { // code is never part of another entity
			r.esc(strings.ReplaceAll(r.d.text(n), "\n", " "))
			return
		}
		r.tag("<code>")
		r.esc(strings.ReplaceAll(r.d.text(n), "\n", " ")) // a code span's line ending is a space
		r.tag("</code>")
	case *ast.Emphasis:
		tag := "i"
		if n.Level == 2 {
			tag = "b"
		}
		if r.dl.Blocks {
			tag = map[string]string{"i": "em", "b": "strong"}[tag]
		}
		r.tag("<" + tag + ">")
		r.open++
		r.inlines(n)
		r.open--
		r.tag("</" + tag + ">")
	case *east.Strikethrough:
		r.tag("<" + r.dl.Strike + ">")
		r.open++
		r.inlines(n)
		r.open--
		r.tag("</" + r.dl.Strike + ">")
	case *ast.Link:
		r.link(linkDest(n.Destination), func() { r.inlines(n) })
	case *ast.AutoLink:
		u := string(n.URL(r.d.src))
		if n.AutoLinkType == ast.AutoLinkEmail && !strings.HasPrefix(strings.ToLower(u), "mailto:") {
			u = "mailto:" + u
		}
		r.link(u, func() { r.esc(string(n.Label(r.d.src))) })
	case *ast.Image: // never a remote image (a tracker): its text, linked
		r.link(linkDest(n.Destination), func() { r.esc(r.d.text(n)) })
	case *ast.RawHTML: // shown as text
		r.esc(r.d.text(n))
	case *east.TaskCheckBox:
		r.b.WriteString(checkBox(n.IsChecked))
	default:
		r.inlines(n)
	}
}

// link writes <a href> around body when dest is a safe link (http, https, mailto), else body
// alone.
func (r *htmlRenderer) link(dest string, body func()) {
	if r.inLink || !SafeURL(dest) { // a link in a link's text (an image's) is its text
		body()
		return
	}
	r.inLink = true
	defer func() { r.inLink = false }()
	if r.plain {
		start := r.b.Len()
		body()
		if label := r.b.String()[start:]; label != dest && "mailto:"+label != dest {
			r.b.WriteString(" (" + dest + ")")
		}
		return
	}
	r.tag(`<a href="` + attrEscaper.Replace(dest) + `"` + r.dl.LinkAttrs + ">")
	r.open++
	body()
	r.open--
	r.tag("</a>")
}

// SafeURL reports whether a link may be followed from a message: an absolute http, https or
// mailto URL.
func SafeURL(dest string) bool {
	u, err := url.Parse(dest)
	if err != nil {
		return false
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		return u.Host != ""
	case "mailto":
		return u.Opaque != "" || u.Path != ""
	}
	return false
}

// tableText is a table as aligned text, one row a line, columns separated by " | ", the header
// underlined, each column aligned as the table says; widths are display columns (a CJK character
// or an emoji takes two), so the columns line up in a monospace font.
func (d *Doc) tableText(t *east.Table) string {
	var rows [][]string
	for row := t.FirstChild(); row != nil; row = row.NextSibling() {
		var cells []string
		for cell := row.FirstChild(); cell != nil; cell = cell.NextSibling() {
			cells = append(cells, strings.Join(strings.Fields(d.text(cell)), " "))
		}
		rows = append(rows, cells)
	}
	var widths []int
	for _, row := range rows {
		for i, c := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], displayWidth(c))
		}
	}
	var b strings.Builder
	for ri, row := range rows {
		var line strings.Builder
		for i, c := range row {
			if i > 0 {
				line.WriteString(" | ")
			}
			pad := widths[i] - displayWidth(c)
			left := 0
			if i < len(t.Alignments) {
				switch t.Alignments[i] {
				case east.AlignRight:
					left = pad
				case east.AlignCenter:
					left = pad / 2
				}
			}
			line.WriteString(strings.Repeat(" ", left) + c + strings.Repeat(" ", pad-left))
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteString("\n")
		if ri == 0 {
			for i, w := range widths {
				if i > 0 {
					b.WriteString("-+-")
				}
				b.WriteString(strings.Repeat("-", w))
			}
			b.WriteString("\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// displayWidth is the columns s takes in a monospace font: East Asian wide and fullwidth
// characters two, combining marks, variation selectors and joiners none, the rest one.
func displayWidth(s string) int {
	n := 0
	for _, r := range s {
		switch {
		case unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Me, r) || unicode.Is(unicode.Cf, r) ||
			r >= 0xFE00 && r <= 0xFE0F:
		case width.LookupRune(r).Kind() == width.EastAsianWide || width.LookupRune(r).Kind() == width.EastAsianFullwidth:
			n += 2
		default:
			n++
		}
	}
	return n
}
