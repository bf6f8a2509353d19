package telegram

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-telegram/bot/models"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// What the adapter sends for the shared sample of agent Markdown, in each form: the rich
// message's Markdown, the HTML parse mode's text and the plain text. Reviewed by eye once;
// go test -run TestGolden -update rewrites them.
func TestGolden_SharedSampleInEachForm(t *testing.T) {
	sample, err := os.ReadFile(filepath.Join("..", "markdown", "testdata", "agent.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []form{formRich, formHTML, formPlain} {
		got := rendered(string(sample), f)
		path := filepath.Join("testdata", "agent."+f.String()+".golden")
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Errorf("%s form:\n%s\nwant:\n%s", f, got, want)
		}
	}
}

// edge-api §7.3, inbound: a person's formatting entities reach xAgent as the same Markdown, and
// what Markdown would read as markup in the plain text is escaped.
func TestMarkdownOf_EntitiesBecomeMarkdown(t *testing.T) {
	e := func(typ models.MessageEntityType, off, n int) models.MessageEntity {
		return models.MessageEntity{Type: typ, Offset: off, Length: n}
	}
	for _, tt := range []struct {
		name, text string
		ents       []models.MessageEntity
		want       string
	}{
		{"bold and italic", "make it bold and slanted", []models.MessageEntity{e("bold", 8, 4), e("italic", 17, 7)}, "make it **bold** and *slanted*"},
		{"nested", "all of it", []models.MessageEntity{e("bold", 0, 9), e("italic", 4, 2)}, "**all *of* it**"},
		{"underline, strike, spoiler", "u s x", []models.MessageEntity{e("underline", 0, 1), e("strikethrough", 2, 1), e("spoiler", 4, 1)}, "<u>u</u> ~~s~~ ||x||"},
		{"code with a backtick", "run a`b now", []models.MessageEntity{e("code", 4, 3)}, "run ``a`b`` now"},
		{"pre with language", "see\nfmt.Println(1)\ndone", []models.MessageEntity{{Type: "pre", Offset: 4, Length: 14, Language: "go"}}, "see\n```go\nfmt.Println(1)\n```\ndone"},
		{"text link", "the docs here", []models.MessageEntity{{Type: "text_link", Offset: 4, Length: 4, URL: "https://e.org/a_(b)"}}, "the [docs](https://e.org/a_\\(b\\)) here"},
		{"url as written", "go to https://e.org/a_b now", []models.MessageEntity{e("url", 6, 17)}, "go to https://e.org/a_b now"},
		{"blockquote", "he said\nyes\nand no", []models.MessageEntity{e("blockquote", 8, 10)}, "he said\n> yes\n> and no"},
		{"mention kept", "hi @some_bot", []models.MessageEntity{e("mention", 3, 9)}, "hi @some_bot"},
		{"plain text escaped", "2*3 is not_bold, [x] <b> # no\n# title\n1. one", nil, "2\\*3 is not\\_bold, \\[x\\] \\<b> # no\n\\# title\n1\\. one"},
		{"emoji offsets in UTF-16", "🎉 big day", []models.MessageEntity{e("bold", 3, 3)}, "🎉 **big** day"},
		{"overlapping ignored", "abcdef", []models.MessageEntity{e("bold", 0, 4), e("italic", 2, 4)}, "**abcd**ef"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := markdownOf(tt.text, tt.ents); got != tt.want {
				t.Fatalf("markdownOf(%q) = %q, want %q", tt.text, got, tt.want)
			}
		})
	}
}

// A bot's mention is cut out of a message, and the formatting after it moves with its text.
func TestAddressed_KeepsFormattingAfterTheMention(t *testing.T) {
	m := &models.Message{Text: "@md_bot, make it bold", Entities: []models.MessageEntity{
		{Type: "mention", Offset: 0, Length: 7}, {Type: "bold", Offset: 17, Length: 4},
	}}
	got, ok := addressed(m, 1, "md_bot")
	if !ok || got != "make it **bold**" {
		t.Fatalf("addressed = %q, %v; want %q, true", got, ok, "make it **bold**")
	}
}
