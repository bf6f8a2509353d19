package markdown_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/text"

	"github.com/ximd/ximd/handlers/adapter/markdown"
)

// xss is the XSS corpus: what a message could carry to make the web page run script or load
// something (https://cheatsheetseries.owasp.org/cheatsheets/XSS_Filter_Evasion_Cheat_Sheet.html).
var xss = []string{
	"[a](javascript:alert(1))",
	"[a](JaVaScRiPt:alert(1))",
	"[a]( javascript:alert(1))",
	"[a](java\tscript:alert(1))",
	"[a](java&#x09;script:alert(1))",
	"[a](&#106;&#97;&#118;&#97;&#115;&#99;&#114;&#105;&#112;&#116;&#58;alert(1))",
	"[a](javascript&colon;alert(1))",
	"[a](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
	"[a](vbscript:msgbox(1))",
	"[a](file:///etc/passwd)",
	"[a](//evil.example/x)",
	"[a](<javascript:alert(1)>)",
	"[a](https://ok.example/\"onmouseover=\"alert(1))",
	"[a](https://ok.example/'><script>alert(1)</script>)",
	"[a](https://ok.example \"title\\\" onclick=alert(1)\")",
	"![x](javascript:alert(1))",
	"![x\" onerror=\"alert(1)](https://ok.example/i.png)",
	"<javascript:alert(1)>",
	"<https://ok.example/\"><svg onload=alert(1)>>",
	"[[a](https://ok.example)](javascript:alert(1))",
	"[![a](https://ok.example/i.png)](javascript:alert(1))",
	"[a]: javascript:alert(1)\n\n[a]",
	"<svg onload=alert(1)>",
	"<svg><script>alert(1)</script></svg>",
	"<img src=x onerror=alert(1)>",
	"<iframe src=javascript:alert(1)></iframe>",
	"<a href=\"javascript:alert(1)\">x</a>",
	"<style>body{display:none}</style>",
	"<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
	"<!-- --><script>alert(1)</script>",
	"<![CDATA[<script>alert(1)</script>]]>",
	"<scr<script>ipt>alert(1)</script>",
	"```\"><script>alert(1)</script>\nx\n```",
	"```js onload=alert(1)\nx\n```",
	"`<script>alert(1)</script>`",
	"| <img src=x onerror=alert(1)> | x |\n|---|---|\n| y | z |",
	"&lt;script&gt;alert(1)&lt;/script&gt;",
	"\\<script>alert(1)\\</script>",
	"<at id=all></at> <font color=red>x</font> <link url='javascript:alert(1)'>x</link>",
	"www.ex<script>ample.com",
	"https://ok.example/<script>alert(1)</script>",
	"mailto:x@y.z?body=<script>",
	"<x@y.z>",
}

// seeds are the fuzz targets' committed seeds: the corpus, the XSS corpus and partial texts.
func seeds(f *testing.F) {
	for _, s := range corpus(f) {
		f.Add(s)
	}
	for _, s := range xss {
		f.Add(s)
	}
	for _, s := range []string{"", "```go\nfunc x() {", "some **bold", "see [the docs](https://e.org", "| a | b |\n|---|", "> > > q", "- [ ] \n-", "\x00\xff<\xfe"} {
		f.Add(s)
	}
}

// No renderer panics on any input; the Telegram form passes Telegram's HTML rules; the web and
// Matrix forms use only their allow-lists; the Slack form carries no raw HTML and the Feishu form
// none but <br>.
func FuzzRender(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, src string) {
		d := markdown.Parse(src)
		_ = d.Plain()
		checkForms(t, "fuzz", d)
		for _, tables := range []int{0, 1} {
			for _, raw := range rawHTML(d.Feishu(tables)) {
				if raw != "<br>" {
					t.Errorf("feishu(%d): raw HTML %q", tables, raw)
				}
			}
		}
	})
}

// Split never panics, keeps every part within the limit, and loses nothing: the text's visible
// characters appear, in order, in the parts (which only add fences, repeated table headers, the
// delimiters of a span cut inside, and link reference definitions, which go to the parts that
// use them). A text of paragraphs whose spans' delimiters and destinations take little of a
// part shows, part by part, everything the whole text showed formatted (checkShown).
func FuzzSplit(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, src string) {
		if !utf8.ValidString(src) {
			return
		}
		for _, limit := range []int{16, 64, 200} {
			parts := markdown.Split(src, limit, nil)
			checkSplit(t, src, limit, parts)
			if limit >= 64 && paragraphsWithSmallSpans(src, limit) {
				checkShown(t, src, parts)
			}
		}
	})
}

// Split of generated paragraphs (words, CJK runs without spaces, emphasis, strikethrough, code
// spans, inline and reference links and images, nested two deep, some longer than a part):
// every part within the limit, nothing lost, and every part, rendered alone, showing formatted
// all the text the whole showed formatted, with no literal delimiter or bracket more.
func FuzzSplitSpans(f *testing.F) {
	for _, s := range []string{"\x04\x10\x08\x30\x09\x21\x02", "\x0b\x0b\x04\x44\x08\x7f\x05\x13", "\x08\x08\x08\x08\x04\x04\x04\x04\x06\x06\x07\x07\x09\x09\x0a"} {
		f.Add([]byte(s), uint8(0))
		f.Add([]byte(s), uint8(200))
	}
	f.Fuzz(func(t *testing.T, seed []byte, l uint8) {
		if len(seed) == 0 || len(seed) > 200 {
			return
		}
		src := spanText(seed)
		limit := 80 + int(l)
		parts := markdown.Split(src, limit, nil)
		checkSplit(t, src, limit, parts)
		if len(parts) > 1 {
			checkShown(t, src, parts)
		}
	})
}

// spanText builds paragraphs of inline spans from a seed, one byte a choice: spans apart from
// their neighbours (by a space, or between CJK characters), none inside one of its own kind,
// each starting and ending with a word, so that the text means one thing however it is read.
func spanText(seed []byte) string {
	words := []string{"alpha", "beta", "gamma", "delta", "epsilon", "中文", "文本内容", "supercalifragilistic", "😀", "x"}
	i := 0
	next := func() int {
		b := seed[i%len(seed)]
		i++
		return int(b)
	}
	var phrase func(in map[int]bool, depth int) string
	span := func(in map[int]bool, depth int) string {
		k := next() % 8
		for in[k] || in[4] && (k == 5 || k == 6) { // no link in a link
			k = (k + 1) % 8
		}
		inner := map[int]bool{k: true}
		for j := range in {
			inner[j] = true
		}
		if k == 5 || k == 6 {
			inner[4] = true
		}
		switch k {
		case 0:
			return "**" + phrase(inner, depth+1) + "**"
		case 1:
			return "*" + phrase(inner, depth+1) + "*"
		case 2:
			return "~~" + phrase(inner, depth+1) + "~~"
		case 3:
			return "`" + phrase(inner, 2) + "`"
		case 4:
			return "[" + phrase(inner, depth+1) + "](https://example.com/" + words[next()%4] + ")"
		case 5:
			return "[" + phrase(inner, depth+1) + "][r" + string(rune('1'+next()%3)) + "]"
		case 6:
			return "![" + phrase(inner, 2) + "](https://example.com/i.png)"
		default:
			return "<https://example.com/auto/" + words[next()%4] + ">"
		}
	}
	phrase = func(in map[int]bool, depth int) string {
		n := 1 + next()%12
		parts := make([]string, n)
		for j := range parts {
			switch {
			case j == 0 || j == n-1: // a letter, not the emoji (punctuation, to CommonMark)
				parts[j] = words[next()%(len(words)-3)]
			case depth < 2 && next()%4 == 0:
				parts[j] = span(in, depth)
			default:
				parts[j] = words[next()%len(words)]
			}
		}
		return strings.Join(parts, " ")
	}
	var b strings.Builder
	for i < len(seed) {
		switch next() % 6 {
		case 0:
			b.WriteString("\n\n")
		case 1:
			b.WriteString(" " + span(nil, 0) + " ")
		case 2:
			b.WriteString(" 前言" + span(map[int]bool{3: true, 7: true}, 0) + "后记 ")
		default:
			b.WriteString(" " + phrase(nil, 0) + " ")
		}
	}
	b.WriteString("\n\n[r1]: https://example.com/one\n[r2]: https://example.com/two \"Two\"\n[r3]: <https://example.com/three>\n")
	return strings.TrimLeft(b.String(), " \n")
}

// paragraphsWithSmallSpans reports whether src is paragraphs (and link reference definitions)
// only, whose spans a part of limit can always close and open again: links' destinations and
// titles and autolinks within a tenth of it, code spans of one or two backticks, nesting
// short and never an emphasis in one of its level or a strikethrough in one (their
// delimiters would run together), no paragraph starting with "[", and every "*", "_" and "~"
// outside code a delimiter (a literal one can pair differently in a part than in the whole, by
// CommonMark's rules on runs, whatever the cut).
func paragraphsWithSmallSpans(src string, limit int) bool {
	b := []byte(src)
	root := goldmark.New(goldmark.WithExtensions(extension.Table, extension.Strikethrough, extension.Linkify, extension.TaskList)).
		Parser().Parse(text.NewReader(b))
	ok := !strings.Contains(src, "```") // a code span of three backticks is not cut inside
	for n := root.FirstChild(); n != nil; n = n.NextSibling() {
		switch n := n.(type) {
		case *ast.Paragraph: // one starting "[" could be cut into "[label]: destination"
			ok = ok && n.Lines().Len() > 0 && b[n.Lines().At(0).Start] != '['
		case *ast.LinkReferenceDefinition:
		default:
			ok = false
		}
	}
	_ = ast.Walk(root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !ok {
			return ast.WalkStop, nil
		}
		if !entering {
			return ast.WalkContinue, nil
		}
		depth := 0
		for p := n.Parent(); p != nil; p = p.Parent() {
			depth++
		}
		small := limit / 10
		switch n := n.(type) {
		case *ast.Link:
			ok = len(n.Destination)+len(n.Title) <= small && (n.Reference == nil || len(n.Reference.Value) <= small)
		case *ast.Image:
			ok = len(n.Destination)+len(n.Title) <= small && (n.Reference == nil || len(n.Reference.Value) <= small)
		case *ast.AutoLink:
			ok = len(n.Label(b)) <= small
		case *ast.LinkReferenceDefinition:
			ok = len(n.Destination)+len(n.Title)+len(n.Label) <= small
		case *ast.RawHTML:
			ok = false
		case *ast.Text:
			_, code := n.Parent().(*ast.CodeSpan)
			ok = code || !strings.ContainsAny(string(n.Segment.Value(b)), "*_~")
		case *ast.Emphasis, *east.Strikethrough: // none inside one of its own kind
			for p := n.Parent(); p != nil; p = p.Parent() {
				if e, isEm := p.(*ast.Emphasis); isEm && n.Kind() == ast.KindEmphasis && e.Level == n.(*ast.Emphasis).Level || p.Kind() == n.Kind() && n.Kind() == east.KindStrikethrough {
					ok = false
				}
			}
		}
		ok = ok && depth <= 5
		return ast.WalkContinue, nil
	})
	return ok
}

func checkSplit(t *testing.T, src string, limit int, parts []string) {
	t.Helper()
	if utf8.RuneCountInString(src) <= limit {
		if len(parts) != 1 || parts[0] != src {
			t.Fatalf("a text within the limit was cut: %q", parts)
		}
		return
	}
	if len(parts) == 0 {
		t.Fatal("no part: a caller takes the first")
	}
	for i, p := range parts {
		if n := utf8.RuneCountInString(p); n > limit || strings.TrimSpace(p) == "" && len(parts) > 1 {
			t.Fatalf("part %d of %d has %d characters (limit %d): %q", i, len(parts), n, limit, p)
		}
	}
	visible := func(s string) []rune {
		return []rune(strings.Map(func(r rune) rune {
			if unicode.IsSpace(r) {
				return -1
			}
			return r
		}, s))
	}
	want, got := visible(withoutDefinitions(src)), visible(strings.Join(parts, ""))
	j := 0
	for _, r := range got {
		if j < len(want) && r == want[j] {
			j++
		}
	}
	if j < len(want) {
		t.Fatalf("lost %q after %q", string(want[j:min(len(want), j+20)]), string(want[max(0, j-20):j]))
	}
}

// withoutDefinitions is src without its link reference definitions (which Split moves to the
// parts that use them).
func withoutDefinitions(src string) string {
	b := []byte(src)
	root := goldmark.New(goldmark.WithExtensions(extension.Table, extension.Strikethrough, extension.Linkify, extension.TaskList)).
		Parser().Parse(text.NewReader(b))
	var out strings.Builder
	last := 0
	_ = ast.Walk(root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if def, ok := n.(*ast.LinkReferenceDefinition); ok && entering {
			for i := range def.Lines().Len() {
				seg := def.Lines().At(i)
				if seg.Start >= last {
					out.Write(b[last:seg.Start])
					last = seg.Stop
				}
			}
		}
		return ast.WalkContinue, nil
	})
	out.Write(b[last:])
	return out.String()
}
