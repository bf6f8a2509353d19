package adapter_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ximd/ximd/handlers/adapter"
)

func TestSplitText_Boundaries(t *testing.T) {
	para := strings.Repeat("word ", 10) // 50 chars
	tests := []struct {
		name  string
		text  string
		limit int
		want  []string
	}{
		{"fits", "hello", 10, []string{"hello"}},
		{"no limit", strings.Repeat("x", 100), 0, []string{strings.Repeat("x", 100)}},
		{"paragraph", para + "\n\n" + para, 80, []string{para, para}},
		{"line", "aaaaaaaaaaaaaaaaaaaa\nbbbbbbbbbbbbbbbbbbbb", 30, []string{"aaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbb"}},
		{"word", "alpha beta gamma delta", 12, []string{"alpha beta ", "gamma delta"}},
		{"mid-word when no boundary", strings.Repeat("x", 25), 10, []string{"xxxxxxxxxx", "xxxxxxxxxx", "xxxxx"}},
		{"runes, not bytes", strings.Repeat("好", 25), 10, []string{strings.Repeat("好", 10), strings.Repeat("好", 10), strings.Repeat("好", 5)}},
	}
	for _, tt := range tests {
		got := adapter.SplitText(tt.text, tt.limit)
		if strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

// A cut inside a fenced code block closes the fence and reopens it, with its language, in the
// next part: every part renders as code where the original did.
func TestSplitText_CodeFenceClosedAndReopened(t *testing.T) {
	code := "```go\n" + strings.Repeat("fmt.Println(1)\n", 12) + "```\nafter"
	parts := adapter.SplitText("intro\n\n"+code, 80)
	if len(parts) < 3 {
		t.Fatalf("parts %q", parts)
	}
	for i, p := range parts {
		if utf8.RuneCountInString(p) > 80 {
			t.Errorf("part %d has %d runes", i, utf8.RuneCountInString(p))
		}
		if n := strings.Count(p, "```"); n%2 != 0 {
			t.Errorf("part %d leaves a fence open: %q", i, p)
		}
		if i > 0 && strings.Contains(parts[i-1], "fmt.") && strings.Contains(p, "fmt.") && !strings.HasPrefix(p, "```go\n") {
			t.Errorf("part %d continues the code without reopening the go fence: %q", i, p)
		}
	}
	if !strings.HasSuffix(parts[len(parts)-1], "after") {
		t.Errorf("last part %q", parts[len(parts)-1])
	}
}

// Whatever the text, no part exceeds the limit and nothing is lost: the parts, without fence
// lines (some added) and line breaks (some dropped at the cuts), are the text without them.
func TestSplitText_NothingLostNothingTooLong(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "bb", " ", " ", "\n", "\n\n", "\n```\n", "\n```py\n", "好", "é"}
	for i := 0; i < 2000; i++ {
		var b strings.Builder
		for n := r.IntN(400); n > 0; n-- {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		text, limit := b.String(), 16+r.IntN(80)
		parts := adapter.SplitText(text, limit)
		for _, p := range parts {
			if utf8.RuneCountInString(p) > limit {
				t.Fatalf("limit %d, part of %d runes %q (text %q)", limit, utf8.RuneCountInString(p), p, text)
			}
		}
		strip := func(s string) string {
			var b strings.Builder
			for _, line := range strings.Split(s, "\n") {
				if !strings.HasPrefix(strings.TrimSpace(line), "```") {
					b.WriteString(line)
				}
			}
			return b.String()
		}
		if strip(strings.Join(parts, "\n")) != strip(text) {
			t.Fatalf("limit %d: parts %q do not make up %q", limit, parts, text)
		}
	}
}
