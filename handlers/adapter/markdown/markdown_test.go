package markdown_test

import (
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/adapter/markdown"
)

// edge-api §7.3: raw HTML in the agent's Markdown is text in every form; a link is kept only when
// it is http(s) or mailto.
func TestRawHTMLIsTextAndLinksAreSafe(t *testing.T) {
	d := markdown.Parse("<img src=x onerror=alert(1)> [a](javascript:alert(2)) [b](https://e.org/?q=\"x\")\n\n<script>alert(3)</script>")
	for _, dl := range []markdown.Dialect{markdown.Web, markdown.Matrix, markdown.Telegram} {
		got := d.HTML(dl)
		if strings.Contains(got, "<img") || strings.Contains(got, "<script") || strings.Contains(got, "javascript:alert(2)\"") || strings.Contains(got, `href="javascript`) {
			t.Errorf("%s: %s", dl.Name, got)
		}
		if !strings.Contains(got, `href="https://e.org/?q=%22x%22"`) || !strings.Contains(got, "&lt;script&gt;") {
			t.Errorf("%s: the safe link or the escaped text is missing: %s", dl.Name, got)
		}
	}
	if p := d.Plain(); !strings.Contains(p, "<script>alert(3)</script>") || !strings.Contains(p, "b (https://e.org/?q=%22x%22)") {
		t.Errorf("plain: %s", p)
	}
}

// A partial text (a streamed preview) renders as valid markup: an open fence, a half-written
// emphasis, a link without its ")".
func TestPartialTextRendersSafely(t *testing.T) {
	for _, partial := range []string{"```go\nfunc x() {", "some **bold", "see [the docs](https://e.org", "| a | b |\n|---|"} {
		got := markdown.Parse(partial).HTML(markdown.Telegram)
		if strings.Count(got, "<pre>") != strings.Count(got, "</pre>") || strings.Count(got, "<b>") != strings.Count(got, "</b>") ||
			strings.Count(got, "<a ") != strings.Count(got, "</a>") {
			t.Errorf("%q -> %q: unbalanced", partial, got)
		}
	}
}

func TestTelegramFormUsesOnlyItsTags(t *testing.T) {
	got := markdown.Parse("# H\n\n- a\n- b\n\n| x | y |\n|---|---|\n| 1 | 2 |\n\n---\n").HTML(markdown.Telegram)
	for _, tag := range []string{"<h1", "<ul", "<li", "<table", "<hr", "<p>"} {
		if strings.Contains(got, tag) {
			t.Errorf("%s in the Telegram form: %s", tag, got)
		}
	}
	if !strings.Contains(got, "<b>H</b>") || !strings.Contains(got, "• a") || !strings.Contains(got, "<pre>x | y") {
		t.Errorf("Telegram form: %s", got)
	}
}
