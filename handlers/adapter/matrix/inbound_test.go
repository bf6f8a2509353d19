package matrix

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
)

// A person's formatted_body reaches the agent as the Markdown they would have written: the
// spec's tags mapped, mentions as their text, the reply fallback left out, text that looks like
// markup escaped.
func TestMarkdownOf(t *testing.T) {
	tests := []struct{ name, html, want string }{
		{"element bold and code", `<strong>bold</strong> and <code>x := 1</code>`, "**bold** and `x := 1`"},
		{"emphasis, strike", `<em>a</em> <i>b</i> <del>c</del> <s>d</s> <strike>e</strike> <b>f</b>`, "*a* *b* ~~c~~ ~~d~~ ~~e~~ **f**"},
		{"spaces move out of emphasis", `x<b> bold </b>y`, "x **bold** y"},
		{"empty emphasis", `a<b> </b>b`, "a b"},
		{"line breaks", "one<br>two<br />three", "one  \ntwo  \nthree"},
		{"paragraphs", "<p>one</p>\n<p>two</p>", "one\n\ntwo"},
		{"heading", "<h2>Title <em>x</em></h2><p>text</p>", "## Title *x*\n\ntext"},
		{"code block with language", "<pre><code class=\"language-go\">func main() {\n\tfmt.Println(\"&lt;hi&gt;\")\n}\n</code></pre>", "```go\nfunc main() {\n\tfmt.Println(\"<hi>\")\n}\n```"},
		{"code block with backticks", "<pre><code>```\nx\n```</code></pre>", "````\n```\nx\n```\n````"},
		{"lists", "<ul><li>a</li><li>b<ol start=\"3\"><li>c</li><li>d</li></ol></li></ul>", "- a\n- b\n  3. c\n  4. d"},
		{"loose list", "<ol><li><p>a</p><p>more</p></li><li><p>b</p></li></ol>", "1. a\n\n   more\n\n2. b"},
		{"quote", "<blockquote><p>said</p><p>twice</p></blockquote>", "> said\n>\n> twice"},
		{"table", "<table><thead><tr><th>a</th><th>b|c</th></tr></thead><tbody><tr><td><b>1</b></td><td><code>x|y</code></td></tr><tr><td>2</td></tr></tbody></table>",
			"| a | b\\|c |\n| --- | --- |\n| **1** | `x\\|y` |\n| 2 |  |"},
		{"link", `see <a href="https://example.org/a_(b)">the docs</a>`, `see [the docs](https://example.org/a_\(b\))`},
		{"autolink", `<a href="https://example.org/x_y">https://example.org/x_y</a> <a href="mailto:a@b.org">a@b.org</a>`, "<https://example.org/x_y> <a@b.org>"},
		{"unsafe link is text", `<a href="javascript:alert(1)">click</a>`, "click"},
		{"user mention is its text", `<a href="https://matrix.to/#/@ximbot:example.org">Ximbot</a>: hi`, "Ximbot: hi"},
		{"room mention is its text", `in <a href="https://matrix.to/#/#room:example.org">#room:example.org</a>`, `in #room:example.org`},
		{"event permalink is a link", `<a href="https://matrix.to/#/!r:x.org/$ev">that</a>`, `[that](https://matrix.to/#/!r:x.org/$ev)`},
		{"reply fallback left out", `<mx-reply><blockquote><a href="https://matrix.to/#/!r/$e">In reply to</a> <a href="https://matrix.to/#/@b:x">@b:x</a><br>earlier</blockquote></mx-reply>the answer`, "the answer"},
		{"markup in text escaped", `2*3*4 and [x](y) and <b>` + "`a`" + `</b> and \ and ~~no~~`, "2\\*3\\*4 and \\[x](y) and **\\`a\\`** and \\\\ and \\~\\~no\\~\\~"},
		{"html in text escaped", `&lt;img src=x&gt; &amp;copy; a &lt; b &amp; c`, `\<img src=x> \&copy; a < b & c`},
		{"underscores inside words stay", `snake_case and _under_`, `snake_case and \_under\_`},
		{"line starts escaped", "<p># not a heading<br>- not a list<br>1. not a list<br>&gt; not a quote<br>2024 was</p>", "\\# not a heading  \n\\- not a list  \n1\\. not a list  \n\\> not a quote  \n2024 was"},
		{"white space collapsed", "a   b\n\n   c", "a b\nc"},
		{"script and style dropped", "<script>alert(1)</script>x<style>p{}</style>", "x"},
		{"spoiler and colour keep their text", `<span data-mx-spoiler>secret</span> <font color="red">red</font> <u>u</u> x<sup>2</sup>`, "secret red u x2"},
		{"image is its alt text", `<img src="mxc://x/y" alt=":smile:">`, ":smile:"},
		{"plain text", "just text", "just text"},
	}
	for _, tt := range tests {
		if got := MarkdownOf(tt.html); got != tt.want {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, got, tt.want)
		}
	}
}

// stock renders Markdown with goldmark's own HTML renderer (CommonMark and GFM), the reference
// for what a Markdown text means.
var stock = goldmark.New(goldmark.WithExtensions(extension.Table, extension.Strikethrough, extension.Linkify))

func stockHTML(s string) string {
	var b bytes.Buffer
	_ = stock.Convert([]byte(s), &b)
	return b.String()
}

// adjacentEmphasis: emphasis directly beside emphasis, or beside its delimiter character as
// text ("~<del>x</del>"), where the delimiter runs written merge.
func adjacentEmphasis(h string) bool {
	tags := []string{"<em>", "</em>", "<strong>", "</strong>", "<del>", "</del>"}
	for _, a := range tags {
		for _, b := range append(tags, "*", "~", "_") {
			if strings.Contains(h, a+b) || strings.Contains(h, b+a) {
				return true
			}
		}
	}
	return false
}

// collapse is HTML with its white space outside <pre> collapsed, as a browser shows it.
func collapse(h string) string {
	var b strings.Builder
	for h != "" {
		pre := strings.Index(h, "<pre")
		if pre < 0 {
			pre = len(h)
		}
		b.WriteString(strings.Join(strings.Fields(h[:pre]), " "))
		h = h[pre:]
		end := strings.Index(h, "</pre>")
		if end < 0 {
			end = len(h)
		} else {
			end += len("</pre>")
		}
		b.WriteString(h[:end])
		h = h[end:]
	}
	return b.String()
}

// The Markdown of an HTML rendering of a Markdown text means the same as that text: rendered
// again it is the same HTML (raw HTML, which a formatted body never holds, aside).
func FuzzMarkdownOfRoundTrip(f *testing.F) {
	for _, s := range strings.Split(adaptertest.Sample(f, agentSample), "\n\n") {
		f.Add(s)
	}
	for _, s := range []string{
		"2\\*3 &copy; &amp; \\<b> a_b _c_", "1. a\n\n   b\n2. c", "- a\n  - b\n    1. c", "> q\n>\n> - x\n\n```\n``x\n```",
		"**a** *b* `c`  \n*d*\n# h *x*", "x <https://a.b/c_d> y@z.org", "| a | `b|c` |\n|---|---|\n| *1* | 2\\|3 |",
		"# x\nsetext?\n===", "***\n\n* * *", "[a\\]b](https://x.org/(y))", "`` ` `` and ```a``b```",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, md string) {
		if !utf8.ValidString(md) || strings.ContainsFunc(md, func(r rune) bool { return r < ' ' && r != '\n' && r != '\t' }) {
			return // a Matrix event is JSON: valid UTF-8; a person's text has no control characters
		}
		h := stockHTML(md)
		got := MarkdownOf(h)
		if strings.Contains(h, "<!--") || strings.Contains(h, "<img") || strings.Contains(h, "<a ") {
			return // raw HTML, images, links without a scheme: not what a formatted body holds
		}
		if strings.Contains(md, "://") || strings.Contains(md, "www.") || strings.Contains(md, "@") {
			return // addresses: TestMarkdownOf has the links (goldmark's autolinks have edges of their own)
		}
		if adjacentEmphasis(h) {
			return // emphasis directly in emphasis: delimiter runs Markdown reads its own way
		}
		if h2 := stockHTML(got); collapse(h2) != collapse(h) {
			t.Errorf("%q\n html %q\n   md %q\n html %q", md, h, got, h2)
		}
	})
}
