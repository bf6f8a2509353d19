package markdown_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

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
// characters appear, in order, in the parts (which only add fences and repeated table headers).
func FuzzSplit(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, src string) {
		if !utf8.ValidString(src) {
			return
		}
		for _, limit := range []int{16, 64, 200} {
			parts := markdown.Split(src, limit, nil)
			checkSplit(t, src, limit, parts)
		}
	})
}

func checkSplit(t *testing.T, src string, limit int, parts []string) {
	t.Helper()
	if utf8.RuneCountInString(src) <= limit {
		if len(parts) != 1 || parts[0] != src {
			t.Fatalf("a text within the limit was cut: %q", parts)
		}
		return
	}
	for i, p := range parts {
		if n := utf8.RuneCountInString(p); n > limit || strings.TrimSpace(p) == "" {
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
	want, got := visible(src), visible(strings.Join(parts, ""))
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
