package markdown_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/adapter/markdown"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// UPDATE_GOLDEN=1 go test ./handlers/adapter/markdown -run TestCorpusGolden rewrites the golden files.
var update = flag.Bool("update", os.Getenv("UPDATE_GOLDEN") == "1", "rewrite the golden files")

// goldenFeishuTables is the table budget the Feishu goldens are rendered with (tables.md holds
// more, so the conversion of the rest shows).
const goldenFeishuTables = 2

// forms are the renderings a golden file is kept for, by file suffix.
var forms = []struct {
	suffix string
	render func(*markdown.Doc) string
}{
	{"web.html", func(d *markdown.Doc) string { return d.HTML(markdown.Web) }},
	{"matrix.html", func(d *markdown.Doc) string { return d.HTML(markdown.Matrix) }},
	{"telegram.html", func(d *markdown.Doc) string { return d.HTML(markdown.Telegram) }},
	{"plain.txt", func(d *markdown.Doc) string { return d.Plain() }},
	{"slack.md", func(d *markdown.Doc) string { return d.Slack() }},
	{"feishu.md", func(d *markdown.Doc) string { return d.Feishu(goldenFeishuTables) }},
}

// corpus is the shared sample of agent-style Markdown: testdata/agent.md and testdata/corpus/*.md.
func corpus(t testing.TB) map[string]string {
	t.Helper()
	files, err := filepath.Glob("testdata/corpus/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "testdata/agent.md")
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".md")] = string(b)
	}
	return out
}

// Every form of every corpus text matches its golden file (reviewed by eye once: regenerate with
// UPDATE_GOLDEN=1 and read the diff), and the HTML forms pass their validators.
func TestCorpusGolden(t *testing.T) {
	for name, src := range corpus(t) {
		d := markdown.Parse(src)
		for _, f := range forms {
			got := f.render(d) + "\n"
			path := filepath.Join("testdata", "golden", name+"."+f.suffix)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (UPDATE_GOLDEN=1 writes it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from its golden file:\n%s", path, firstDiff(string(want), got))
			}
		}
		checkForms(t, name, d)
	}
}

// checkForms runs every validator over d's forms.
func checkForms(t testing.TB, name string, d *markdown.Doc) {
	t.Helper()
	if err := validateTelegram(d.HTML(markdown.Telegram)); err != nil {
		t.Errorf("%s: telegram: %v", name, err)
	}
	if err := validateHTML(d.HTML(markdown.Web), webAllow); err != nil {
		t.Errorf("%s: web: %v", name, err)
	}
	if err := validateHTML(d.HTML(markdown.Matrix), matrixAllow); err != nil {
		t.Errorf("%s: matrix: %v", name, err)
	}
	if raw := rawHTML(d.Slack()); len(raw) > 0 {
		t.Errorf("%s: slack: raw HTML %q", name, raw)
	}
	for _, raw := range rawHTML(d.Feishu(4)) {
		if raw != "<br>" {
			t.Errorf("%s: feishu: raw HTML %q", name, raw)
		}
	}
}

// rawHTML is the raw HTML a CommonMark reader (the platform's) finds in Markdown.
func rawHTML(md string) []string {
	src := []byte(md)
	root := goldmark.New(goldmark.WithExtensions(extension.GFM)).Parser().Parse(text.NewReader(src))
	var raw []string
	_ = ast.Walk(root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.RawHTML:
			var b strings.Builder
			for i := range n.Segments.Len() {
				seg := n.Segments.At(i)
				b.Write(seg.Value(src))
			}
			raw = append(raw, b.String())
		case *ast.HTMLBlock:
			lines := n.Lines()
			raw = append(raw, string(lines.Value(src)))
		}
		return ast.WalkContinue, nil
	})
	return raw
}

func firstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(wl), len(gl)) {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return fmt.Sprintf("line %d:\nwant %q\ngot  %q", i+1, w, g)
		}
	}
	return "(same lines)"
}

// longAnswer is a deterministic agent answer of about n characters: sections with headings,
// paragraphs with emphasis and links, nested lists, a table with CJK cells and a code block each,
// and one very long code block and table past any single part.
func longAnswer(n int) string {
	var b strings.Builder
	b.WriteString("# A long answer\n\n")
	for i := 1; runes(&b) < n*3/4; i++ {
		fmt.Fprintf(&b, "## Section %d: 第%d节 🎯\n\n", i, i)
		fmt.Fprintf(&b, "Paragraph %d explains **the step** with *care*, a `code_span`, a [link](https://example.com/%d) and ~~an old note~~. "+
			"它也包含中文文本，让宽度计算有意义。 The quick brown fox jumps over the lazy dog %d times.\n\n", i, i, i)
		fmt.Fprintf(&b, "- Point %d.1\n- Point %d.2\n  - Detail with `x := %d`\n  - [ ] Open task\n- Point %d.3\n\n", i, i, i, i)
		fmt.Fprintf(&b, "| Key | 值 | Count |\n|:---|:---:|---:|\n| k%d | 数值%d | %d |\n| long key %d | 短 | %d |\n\n", i, i, i*7, i, i*11)
		fmt.Fprintf(&b, "```go\nfunc step%d() int {\n\treturn %d // <b>not bold</b> & done\n}\n```\n\n", i, i)
		fmt.Fprintf(&b, "> Note %d: quoted advice with a <https://example.org/%d> link.\n\n", i, i)
	}
	b.WriteString("## Appendix: a long listing\n\n```python\n")
	for i := 0; runes(&b) < n*7/8; i++ {
		fmt.Fprintf(&b, "print('line %d of the listing', %d * %d)  # 注释 %d\n", i, i, i, i)
	}
	b.WriteString("```\n\n## Appendix: a long table\n\n| # | Name | 名称 |\n|---|---|---|\n")
	for i := 0; runes(&b) < n; i++ {
		fmt.Fprintf(&b, "| %d | item-%d | 项目%d |\n", i, i, i)
	}
	return b.String()
}

// The long answer passes every validator in every form.
func TestLongAnswerForms(t *testing.T) {
	src := longAnswer(40000)
	if n := len([]rune(src)); n < 40000 {
		t.Fatalf("the long answer has %d characters", n)
	}
	checkForms(t, "long", markdown.Parse(src))
}

func runes(b *strings.Builder) int { return len([]rune(b.String())) }
