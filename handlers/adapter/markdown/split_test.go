package markdown_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/text"

	"github.com/ximd/ximd/handlers/adapter/markdown"
)

// The 40,000-character answer split at Telegram's limits (4,096 on the fall-back path, 32,768 in
// a rich message): every part within the limit, every part rendering on its own (its code fences
// balanced, its tables with their header), nothing lost, and the cuts between blocks where a
// block fits.
func TestSplitLongAnswer(t *testing.T) {
	src := longAnswer(40000)
	for _, limit := range []int{4096, 32768} {
		parts := markdown.Split(src, limit, nil)
		checkSplit(t, src, limit, parts)
		if want := (utf8.RuneCountInString(src) + limit - 1) / limit; len(parts) < want || len(parts) > want+2 {
			t.Errorf("limit %d: %d parts, want about %d (greedy packing)", limit, len(parts), want)
		}
		for i, p := range parts {
			if strings.Count(p, "```")%2 != 0 {
				t.Errorf("limit %d, part %d: unbalanced fences", limit, i)
			}
			if strings.Contains(p, "| item-") && !strings.Contains(p, "| # | Name | 名称 |\n|---|---|---|") {
				t.Errorf("limit %d, part %d: table rows without their header", limit, i)
			}
			if strings.Contains(p, "print('line") && !strings.HasPrefix(strings.TrimLeft(p[:strings.Index(p, "print('line")], "\n"), "```python") &&
				!strings.Contains(p, "```python\n") {
				t.Errorf("limit %d, part %d: code lines outside their fence", limit, i)
			}
			if err := validateTelegram(markdown.Parse(p).HTML(markdown.Telegram)); err != nil {
				t.Errorf("limit %d, part %d: %v", limit, i, err)
			}
		}
		for i, p := range parts { // blocks that fit are never cut
			if strings.Contains(p, "| k") && !strings.Contains(p, "| Key | 值 | Count |") {
				t.Errorf("limit %d, part %d: a section's table cut", limit, i)
			}
		}
		checkShown(t, src, parts)
	}
}

// The 40,000-character answer split at limits smaller than its paragraphs, which are cut
// inside among their bold, italic, code span, link, strikethrough and CJK text: every part
// within the limit, passing Telegram's rules, and showing formatted all it showed formatted
// whole.
func TestSplitLongAnswerInsideParagraphs(t *testing.T) {
	src := longAnswer(40000)
	for _, limit := range []int{60, 120} {
		parts := markdown.Split(src, limit, nil)
		checkSplit(t, src, limit, parts)
		for i, p := range parts {
			if err := validateTelegram(markdown.Parse(p).HTML(markdown.Telegram)); err != nil {
				t.Errorf("limit %d, part %d: %v", limit, i, err)
			}
		}
		checkShown(t, src, parts)
	}
}

func TestSplit(t *testing.T) {
	utf16Len := func(s string) int { return len(utf16.Encode([]rune(s))) }
	tests := []struct {
		name  string
		text  string
		limit int
		count func(string) int
		want  []string
	}{
		{name: "within the limit", text: "# Hi\n\ntext", limit: 100, want: []string{"# Hi\n\ntext"}},
		{name: "between blocks, greedily", text: "para one\n\npara two\n\npara three", limit: 20,
			want: []string{"para one\n\npara two", "para three"}},
		{name: "a fence closed and reopened", text: "```go\na := 1\nb := 2\nc := 3\n```", limit: 23,
			want: []string{"```go\na := 1\nb := 2\n```", "```go\nc := 3\n```"}},
		{name: "a table with its header repeated", text: "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n| 5 | 6 |", limit: 40,
			want: []string{"| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |", "| a | b |\n|---|---|\n| 5 | 6 |"}},
		{name: "a list between items", text: "- one one\n- two two\n- three three", limit: 20,
			want: []string{"- one one\n- two two", "- three three"}},
		{name: "a paragraph at words", text: "alpha beta gamma delta", limit: 12,
			want: []string{"alpha beta", "gamma delta"}},
		{name: "counted as the platform counts", text: "😀😀😀\n\n😀😀😀", limit: 6, count: utf16Len,
			want: []string{"😀😀😀", "😀😀😀"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := markdown.Split(tt.text, tt.limit, tt.count)
			if strings.Join(got, "\x00") != strings.Join(tt.want, "\x00") {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// A cut inside a paragraph, an item or a line too large falls outside every inline span when one
// fits (a span that fits in a part moves to the next whole); a span longer than a part is cut
// inside its text and closed at the end of the part and opened again at the start of the next,
// never inside a link's destination; each part carries the link reference definitions it uses.
// Every part is within the limit (definitions counted) and, rendered alone, shows as formatted
// every character the whole text showed formatted, with no more literal "*", "~", "`", "[" or "]".
func TestSplitKeepsInlineSpans(t *testing.T) {
	utf16Len := func(s string) int { return len(utf16.Encode([]rune(s))) }
	plainLen := func(s string) int { return utf8.RuneCountInString(markdown.Parse(s).Plain()) }
	refs := "Read [the guide][g] first, then [the API][api] and [faq] again.\n\n" +
		"A second paragraph that talks about something else entirely and is long enough to fill its part.\n\n" +
		"Finally ![the diagram][img] and [the guide][g].\n\n" +
		"[g]: https://example.com/guide \"The guide\"\n[api]: <https://example.com/api ref>\n[faq]: https://example.com/faq\n[img]: https://example.com/d.png\n[unused]: https://example.com/unused"
	tests := []struct {
		name  string
		text  string
		limit int
		count func(string) int
		want  []string // nil: checked by the rules only
	}{
		{name: "bold moved whole to the next part", text: "Some words before **a bold phrase crossing the cut** and after it.", limit: 40,
			want: []string{"Some words before", "**a bold phrase crossing the cut** and", "after it."}},
		{name: "bold longer than a part closed and reopened", text: "Some words **a very long bold phrase that cannot fit into one part at all whatever** tail", limit: 40,
			want: []string{"Some words **a very long bold phrase**", "**that cannot fit into one part at all**", "**whatever** tail"}},
		{name: "emphasis with underscores", text: "lead _an emphasised run of words longer than a part_ end", limit: 30,
			want: []string{"lead _an emphasised run of_", "_words longer than a part_ end"}},
		{name: "strikethrough", text: "before ~~a struck out sentence that is too long~~ after", limit: 30,
			want: []string{"before ~~a struck out~~", "~~sentence that is too long~~", "after"}},
		{name: "code span with its backticks", text: "run ``a long `code` span with words in it`` now", limit: 24,
			want: []string{"run ``a long `code` ``", "``span with words in``", "``it`` now"}},
		{name: "nested bold and italic", text: "x ***bold italic words running past the end of the part*** y", limit: 30},
		{name: "link cut outside it", text: "Words words words words [a short link](https://example.com/x) tail words here", limit: 50,
			want: []string{"Words words words words", "[a short link](https://example.com/x) tail words", "here"}},
		{name: "link text cut, destination never", text: "x [a long link text that is longer than one part](https://example.com/p \"Title\") y", limit: 60,
			want: []string{"x [a long link text that is](https://example.com/p \"Title\")", "[longer than one part](https://example.com/p \"Title\") y"}},
		{name: "link inside bold", text: "**bold [link text inside bold that is long](https://e.com/x) more bold words here**", limit: 45},
		{name: "image alt text", text: "see ![a diagram with a long description of many words](https://e.com/d.png) below", limit: 45},
		{name: "autolink kept whole", text: "see the page at https://example.com/a/long/path/to/the/page for details", limit: 45,
			want: []string{"see the page at", "https://example.com/a/long/path/to/the/page", "for details"}},
		{name: "code span kept whole when it fits", text: "call it as `ximctl conformance --all` before you push", limit: 40,
			want: []string{"call it as `ximctl conformance --all`", "before you push"}},
		{name: "CJK cut between characters outside bold", text: "中文文本没有空格**粗体文字**继续写更多的中文文本内容", limit: 12,
			want: []string{"中文文本没有空格", "**粗体文字**继续写更", "多的中文文本内容"}},
		{name: "CJK cut after its punctuation", text: "第一句话在这里。第二句话也在这里，而且更长一些。他说「你好」。", limit: 12,
			want: []string{"第一句话在这里。", "第二句话也在这里，", "而且更长一些。", "他说「你好」。"}},
		{name: "CJK part never starting with closing punctuation", text: "> 引用：「你好，世界！」", limit: 11,
			want: []string{"> 引用：「你好，", "世界！」"}},
		{name: "CJK bold longer than a part", text: "前言**这是一段很长的粗体中文文字没有任何空格**后记", limit: 12},
		{name: "CJK link text", text: "请看[这是一个很长的链接文字没有空格](https://example.cn/x)谢谢", limit: 40},
		{name: "quote reopened after its marker", text: "> quote text **bold\n> across the lines of the quote** and more", limit: 30,
			want: []string{"> quote text **bold**", "> **across the lines of the**", "**quote** and more"}},
		{name: "list item too large", text: "- one **bold words in the first item that go on and on** end\n- two", limit: 30},
		{name: "table row too large", text: "| a | b |\n|---|---|\n| **bold cell text that is long** | `x` |", limit: 40},
		{name: "code block in an item kept whole", text: "- item one\n\n  ```go\n  x := 1\n  ```\n\n  more text after the code\n- b", limit: 40,
			want: []string{"- item one\n\n  ```go\n  x := 1\n  ```", "more text after the code\n- b"}},
		{name: "counted in UTF-16", text: "😀 **😀😀 😀😀 😀😀 😀😀** 😀", limit: 12, count: utf16Len},
		{name: "counted as rendered", text: "a **bold phrase of some length** b [link](https://example.com/x) c", limit: 30, count: plainLen},
		{name: "reference definitions carried", text: refs, limit: 200, want: []string{
			"Read [the guide][g] first, then [the API][api] and [faq] again.\n\n[g]: https://example.com/guide \"The guide\"\n[api]: <https://example.com/api ref>\n[faq]: https://example.com/faq",
			"A second paragraph that talks about something else entirely and is long enough to fill its part.",
			"Finally ![the diagram][img] and [the guide][g].\n\n[g]: https://example.com/guide \"The guide\"\n[img]: https://example.com/d.png",
		}},
		{name: "reference link text cut", text: "x [a reference link with a long text][r] y\n\n[r]: https://example.com/r", limit: 60,
			want: []string{"x [a reference link with a][r]\n\n[r]: https://example.com/r", "[long text][r] y\n\n[r]: https://example.com/r"}},
		{name: "reference definitions counted", text: "[aa][r] bb cc dd ee ff gg hh ii jj kk ll mm nn\n\n[r]: https://e.com/r", limit: 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			count := tt.count
			if count == nil {
				count = utf8.RuneCountInString
			}
			got := markdown.Split(tt.text, tt.limit, tt.count)
			if tt.want != nil && strings.Join(got, "\x00") != strings.Join(tt.want, "\x00") {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
			if len(got) < 2 {
				t.Fatalf("not cut: %q", got)
			}
			for i, p := range got {
				if n := count(p); n > tt.limit {
					t.Errorf("part %d counts %d (limit %d): %q", i, n, tt.limit, p)
				}
			}
			checkShown(t, tt.text, got)
		})
	}
}

// A definition longer than half a part is not carried: the parts that use it show the
// reference as written, and no part is sent with nothing to show but definitions.
func TestSplitDefinitionTooLongToCarry(t *testing.T) {
	long := "[long]: https://example.com/a/very/long/path/that/goes/on/and/on/and/on"
	got := markdown.Split("Use [a][s] and [b][long] now.\n\nA second paragraph of some length.\n\n[s]: https://e.com/s\n"+long, 80, nil)
	want := []string{"Use [a][s] and [b][long] now.\n\n[s]: https://e.com/s", "A second paragraph of some length."}
	if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// checkShown fails when the parts, each rendered alone, show less of the text formatted than the
// whole did, or more of its markup characters literally (a raw "**", a stray backtick, a
// reference's brackets).
func checkShown(t *testing.T, src string, parts []string) {
	t.Helper()
	whole, sum := shown(src), map[string]int{}
	for _, p := range parts {
		for k, n := range shown(p) {
			sum[k] += n
		}
	}
	for k, n := range whole {
		if strings.HasPrefix(k, "literal") {
			if sum[k] > n {
				t.Errorf("%s: %d in the parts, %d in the whole text\nparts %q", k, sum[k], n, parts)
			}
		} else if sum[k] < n {
			t.Errorf("%s: %d characters in the parts, %d in the whole text\nparts %q", k, sum[k], n, parts)
		}
	}
	for k, n := range sum {
		if _, ok := whole[k]; !ok && strings.HasPrefix(k, "literal") && n > 0 {
			t.Errorf("%s: %d in the parts, none in the whole text\nparts %q", k, n, parts)
		}
	}
}

// shown counts what a reader sees of a text's inline formatting: the characters (not blanks)
// shown bold, italic, struck, as code or linked, and each of "*", "~", "`", "[", "]" shown as
// itself.
func shown(src string) map[string]int {
	b := []byte(src)
	root := goldmark.New(goldmark.WithExtensions(extension.Table, extension.Strikethrough, extension.Linkify, extension.TaskList)).
		Parser().Parse(text.NewReader(b))
	out := map[string]int{}
	add := func(n ast.Node, s string) {
		visible := 0
		for _, r := range s {
			if !unicode.IsSpace(r) {
				visible++
			}
		}
		literal := true
		for p := n; p != nil; p = p.Parent() {
			switch p := p.(type) {
			case *ast.Emphasis:
				out[map[int]string{1: "italic", 2: "bold"}[p.Level]] += visible
			case *east.Strikethrough:
				out["struck"] += visible
			case *ast.CodeSpan:
				out["code"] += visible
				literal = false
			case *ast.Link, *ast.Image, *ast.AutoLink:
				out["link"] += visible
			}
		}
		if literal {
			for _, c := range "*~`[]" {
				if n := strings.Count(s, string(c)); n > 0 {
					out["literal "+string(c)] += n
				}
			}
		}
	}
	_ = ast.Walk(root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Text:
			add(n, string(n.Segment.Value(b)))
		case *ast.AutoLink:
			add(n, string(n.Label(b)))
		}
		return ast.WalkContinue, nil
	})
	return out
}

// A text past the limit with nothing to show is one empty part: every caller may take the first.
func TestSplitNothingToShowIsOneEmptyPart(t *testing.T) {
	for _, text := range []string{strings.Repeat(" ", 5000), strings.Repeat("\n\t\n", 2000), strings.Repeat("[a]: https://example.com/\n", 400)} {
		if parts := markdown.Split(text, 4096, nil); len(parts) != 1 || parts[0] != "" {
			t.Errorf("%q…: %d parts %q, want one empty part", text[:12], len(parts), parts)
		}
	}
}
