package markdown_test

import (
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

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
