package markdown

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/yuin/goldmark/ast"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/util"
)

// Slack is the text of a Slack `markdown` block or a stream's `markdown_text`
// (https://docs.slack.dev/reference/block-kit/blocks/markdown-block: "standard markdown",
// translated by Slack; 12,000 characters a block). The agent's Markdown is written again from
// the parse, so that Slack shows what the agent meant and nothing more:
//   - headings, emphasis, strikethrough, code spans and blocks, lists, quotes and rules as
//     standard Markdown;
//   - links only to http, https and mailto URLs, any other as its text; images as links;
//   - tables, which the markdown block does not draw, as a code block of aligned text;
//   - task list boxes as ☐ and ☑;
//   - raw HTML as text: its "<", ">" and "&" as &lt;, &gt; and &amp; (Slack's own escapes), its
//     Markdown punctuation backslash-escaped, so Slack shows it literally.
func (d *Doc) Slack() string {
	w := &mdWriter{d: d, slack: true}
	w.blocks(d.root)
	return strings.TrimRight(w.b.String(), "\n")
}

// Feishu is the content of a Feishu card's `markdown` element in card JSON 2.0
// (https://open.feishu.cn/document/feishu-cards/card-json-v2-components/content-components/rich-text:
// CommonMark without HTML blocks, headings 1-6, tables, quotes, code blocks with a language,
// lists indented four spaces a level, links to http(s) only, and Feishu's own tags such as <at>,
// <font> and <link>). The agent's Markdown is written again from the parse:
//   - at most tables tables as tables (a rich-text element holds at most four), only at the top
//     level; the rest, and every table inside a list or quote, as a code block of aligned text;
//   - links only to http and https URLs; a mailto link as its text and address; images (which
//     need an uploaded image_key) as links;
//   - task list boxes as ☐ and ☑;
//   - raw HTML, including Feishu's own tags written by the agent (<at id=all>, <font>), as text:
//     "<", ">" and "&" as the numeric references &#60;, &#62; and &#38;, and Markdown
//     punctuation as references too, the escapes the page's table of special characters gives.
func (d *Doc) Feishu(tables int) string {
	w := &mdWriter{d: d, tables: tables}
	w.blocks(d.root)
	return strings.TrimRight(w.b.String(), "\n")
}

// Discord is the content of a Discord message (https://support.discord.com/hc/en-us/articles/210298617:
// Discord renders Markdown itself: headings #, ## and ###, emphasis, ~~, ||spoilers||, code
// spans and blocks, lists, quotes and masked links). The agent's Markdown is written again from
// the parse, with what Discord lacks converted:
//   - headings of level 4 to 6 (shown by Discord as their "#" source) as bold lines;
//   - tables as a code block of aligned text;
//   - links only to http and https URLs (a mailto link as its text and address); images as
//     links; task list boxes as ☐ and ☑; a hard line break as a line break;
//   - raw HTML and every "<" or ">" of the text as text, backslash-escaped (Discord shows no
//     HTML and decodes no references, and "<@id>", "<#id>" or "<t:…>" would show as a mention,
//     a channel or a time).
func (d *Doc) Discord() string {
	w := &mdWriter{d: d, slack: true, discord: true}
	w.blocks(d.root)
	return strings.TrimRight(w.b.String(), "\n")
}

// mdWriter writes a Doc as Markdown again, for Slack (slack), Discord (slack and discord) or
// Feishu.
type mdWriter struct {
	d       *Doc
	slack   bool
	discord bool
	tables  int // tables still written as tables (Feishu)
	b       bytes.Buffer
	inLink  bool
}

func (w *mdWriter) sub() *mdWriter {
	return &mdWriter{d: w.d, slack: w.slack, discord: w.discord, tables: w.tables}
}

// blocks writes the child blocks of n, a blank line after each.
func (w *mdWriter) blocks(n ast.Node) {
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		w.block(c)
	}
}

func (w *mdWriter) block(n ast.Node) {
	switch n := n.(type) {
	case *ast.Paragraph, *ast.TextBlock:
		w.inlines(n)
		w.end()
	case *ast.Heading:
		if w.discord && n.Level > 3 { // Discord draws three levels
			w.b.WriteString("**")
			w.inlines(n)
			w.b.WriteString("**")
			w.end()
			return
		}
		w.b.WriteString(strings.Repeat("#", n.Level) + " ")
		w.inlines(n)
		w.end()
	case *ast.ThematicBreak:
		w.b.WriteString("---")
		w.end()
	case *ast.FencedCodeBlock:
		w.code(string(n.Language(w.d.src)), w.d.lines(n))
	case *ast.CodeBlock:
		w.code("", w.d.lines(n))
	case *ast.HTMLBlock: // raw HTML is shown as text
		w.b.WriteString(w.escape(strings.TrimRight(w.d.lines(n), "\n"), true))
		w.end()
	case *ast.Blockquote:
		inner := w.sub()
		inner.blocks(n)
		w.tables = inner.tables
		w.b.WriteString(prefixLines(strings.TrimRight(inner.b.String(), "\n"), "> ", ">"))
		w.end()
	case *ast.List:
		w.list(n)
	case *east.Table:
		if w.slack || w.tables <= 0 || n.Parent().Kind() != ast.KindDocument {
			w.code("", w.d.tableText(n))
			return
		}
		w.tables--
		w.table(n)
	default:
		w.blocks(n)
	}
}

// end ends a block: a blank line before the next.
func (w *mdWriter) end() {
	trimNewline(&w.b)
	w.b.WriteString("\n\n")
}

func (w *mdWriter) code(lang, body string) {
	fence := strings.Repeat("`", max(3, longestRun(body, '`')+1))
	if f := strings.Fields(lang); len(f) > 0 && safeClass(f[0]) {
		lang = f[0]
	} else {
		lang = ""
	}
	w.b.WriteString(fence + lang + "\n")
	if body = strings.TrimRight(body, "\n"); body != "" {
		w.b.WriteString(body + "\n")
	}
	w.b.WriteString(fence)
	w.end()
}

func (w *mdWriter) list(l *ast.List) {
	n := l.Start
	for it := l.FirstChild(); it != nil; it = it.NextSibling() {
		marker := string(l.Marker) + " " // the agent's markers: a changed one starts a new list
		if l.IsOrdered() {
			marker = strconv.Itoa(n) + string(l.Marker) + " "
			n++
		}
		inner := w.sub()
		inner.blocks(it)
		w.tables = inner.tables
		body := strings.TrimRight(inner.b.String(), "\n")
		if l.IsTight {
			body = strings.ReplaceAll(body, "\n\n", "\n")
		}
		// Four spaces a level (Feishu's rule, and CommonMark's for a marker up to four wide).
		indent := strings.Repeat(" ", max(4, len(marker)))
		first, rest, more := strings.Cut(body, "\n")
		w.b.WriteString(strings.TrimRight(marker+first, " "))
		if more {
			w.b.WriteString("\n" + prefixLines(rest, indent, ""))
		}
		w.b.WriteString("\n")
		if !l.IsTight && it.NextSibling() != nil {
			w.b.WriteString("\n")
		}
	}
	w.end()
}

// prefixLines puts p before every line of s (blank before a blank line).
func prefixLines(s, p, blank string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l == "" {
			lines[i] = blank
		} else {
			lines[i] = p + l
		}
	}
	return strings.Join(lines, "\n")
}

func (w *mdWriter) table(t *east.Table) {
	for row := t.FirstChild(); row != nil; row = row.NextSibling() {
		w.b.WriteString("|")
		for cell := row.FirstChild(); cell != nil; cell = cell.NextSibling() {
			w.b.WriteString(" ")
			w.inlines(cell)
			w.b.WriteString(" |")
		}
		w.b.WriteString("\n")
		if _, head := row.(*east.TableHeader); head {
			w.b.WriteString("|")
			for _, a := range t.Alignments {
				w.b.WriteString(map[east.Alignment]string{east.AlignLeft: " :-- |", east.AlignRight: " --: |", east.AlignCenter: " :-: |"}[a] +
					map[bool]string{true: " --- |"}[a == east.AlignNone])
			}
			w.b.WriteString("\n")
		}
	}
	w.end()
}

func (w *mdWriter) inlines(n ast.Node) {
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		w.inline(c)
	}
}

func (w *mdWriter) inline(n ast.Node) {
	switch n := n.(type) {
	case *ast.Text:
		w.text(n.Segment.Value(w.d.src))
		switch {
		case n.HardLineBreak() && w.discord:
			w.b.WriteString("\n") // every line break of a Discord message shows
		case n.HardLineBreak() && w.slack:
			w.b.WriteString("  \n")
		case n.HardLineBreak():
			w.b.WriteString("<br>") // the card's documented line break tag, inline (a line of it alone would be an HTML block)
		case n.SoftLineBreak():
			w.b.WriteString("\n")
		}
	case *ast.String:
		w.b.WriteString(w.escape(string(n.Value), false))
	case *ast.CodeSpan:
		body := strings.ReplaceAll(w.d.text(n), "\n", " ") // a code span's line ending is a space
		ticks := strings.Repeat("`", longestRun(body, '`')+1)
		if strings.HasPrefix(body, "`") || strings.HasSuffix(body, "`") {
			body = " " + body + " "
		}
		w.b.WriteString(ticks + body + ticks)
	case *ast.Emphasis:
		m := strings.Repeat("*", n.Level)
		w.b.WriteString(m)
		w.inlines(n)
		w.b.WriteString(m)
	case *east.Strikethrough:
		w.b.WriteString("~~")
		w.inlines(n)
		w.b.WriteString("~~")
	case *ast.Link:
		w.link(linkDest(n.Destination), func() { w.inlines(n) })
	case *ast.AutoLink:
		u := string(n.URL(w.d.src))
		if n.AutoLinkType == ast.AutoLinkEmail && !strings.HasPrefix(strings.ToLower(u), "mailto:") {
			u = "mailto:" + u
		}
		w.link(u, func() { w.b.WriteString(w.escape(string(n.Label(w.d.src)), false)) })
	case *ast.Image: // its text, linked
		w.link(linkDest(n.Destination), func() { w.b.WriteString(w.escape(w.d.text(n), false)) })
	case *ast.RawHTML: // shown as text
		w.b.WriteString(w.escape(w.d.text(n), false))
	case *east.TaskCheckBox:
		w.b.WriteString(checkBox(n.IsChecked))
	default:
		w.inlines(n)
	}
}

// link writes [body](dest) when dest may be followed on the platform, else body (and, for a
// mail address Feishu cannot link, the address after it).
func (w *mdWriter) link(dest string, body func()) {
	mail := strings.HasPrefix(strings.ToLower(dest), "mailto:")
	if w.inLink || !SafeURL(dest) || mail && (!w.slack || w.discord) {
		start := w.b.Len()
		body()
		if addr := dest[min(len(dest), len("mailto:")):]; mail && !w.inLink && SafeURL(dest) && !strings.Contains(w.b.String()[start:], w.escape(addr, false)) {
			w.b.WriteString(" (" + w.escape(addr, false) + ")")
		}
		return
	}
	w.inLink = true
	w.b.WriteString("[")
	body()
	w.b.WriteString("](" + strings.NewReplacer("(", "%28", ")", "%29", "<", "%3C", ">", "%3E", " ", "%20").Replace(dest) + ")")
	w.inLink = false
}

// text writes a Text segment as the agent wrote it (its escapes and references mean the same
// to the platform's CommonMark), with "<" and ">" written as references, so that nothing in it
// can become a tag (Slack's or Feishu's own: <at>, <font>).
func (w *mdWriter) text(v []byte) {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\\' && i+1 < len(v) && (v[i+1] == '<' || v[i+1] == '>' || !w.slack && util.IsPunct(v[i+1])) {
			i++ // Feishu's documented escape is a reference, not a backslash
			c = v[i]
			if !w.slack && c != '&' {
				w.b.WriteString("&#" + strconv.Itoa(int(c)) + ";")
				continue
			}
		}
		if c == '<' || c == '>' {
			w.b.WriteString(w.ref(c))
		} else {
			w.b.WriteByte(c)
		}
	}
}

// ref is how a character that would be markup is written as text: Slack's &lt; &gt; &amp; and a
// backslash before Markdown punctuation; Feishu's numeric references for both.
func (w *mdWriter) ref(c byte) string {
	switch {
	case w.discord && c == '&':
		return "&" // Discord decodes no references
	case w.discord && strings.IndexByte("<>\\`*_[]~|#+-=.)!", c) >= 0:
		return "\\" + string(c)
	case w.slack && c == '<':
		return "&lt;"
	case w.slack && c == '>':
		return "&gt;"
	case w.slack && c == '&':
		return "&amp;"
	case w.slack && strings.IndexByte("\\`*_[]~|#+-=.)!", c) >= 0:
		return "\\" + string(c)
	case !w.slack && strings.IndexByte("<>&\\`*_[]~|#+-=.)!", c) >= 0:
		return "&#" + strconv.Itoa(int(c)) + ";"
	}
	return ""
}

// escape writes s (raw HTML, a label, an image's text) so the platform shows it literally:
// "<", ">", "&" and the punctuation that makes inline Markdown escaped everywhere, and a line's
// leading "#", "+", "-", "=" or "1." escaped, so no line becomes a heading, a list or a rule.
// Lines lose their leading blanks (four would make code).
func (w *mdWriter) escape(s string, block bool) string {
	var b strings.Builder
	for li, line := range strings.Split(s, "\n") {
		if li > 0 {
			b.WriteString("\n")
		}
		if block {
			line = strings.TrimLeft(line, " \t")
		}
		digits := true
		for i := 0; i < len(line); i++ {
			c := line[i]
			atStart := (block || li > 0) && i == 0
			switch {
			case strings.IndexByte("<>&\\`*_[]~|", c) >= 0,
				atStart && strings.IndexByte("#+-=", c) >= 0,
				(block || li > 0) && digits && i > 0 && (c == '.' || c == ')'):
				b.WriteString(w.ref(c))
			default:
				b.WriteByte(c)
			}
			digits = digits && c >= '0' && c <= '9'
		}
	}
	return b.String()
}

// longestRun is the longest run of c in s.
func longestRun(s string, c byte) int {
	n, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			run++
			n = max(n, run)
		} else {
			run = 0
		}
	}
	return n
}
