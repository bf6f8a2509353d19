package feishu

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/ximd/ximd/handlers/adapter/markdown"
)

// The agent's Markdown in Feishu (edge-api §7.3): a card's markdown element (JSON 2.0), with what
// the card's Markdown lacks written with what it has and at most CardTables tables as tables
// (the rest as code blocks); a card Feishu refuses for its content goes again as a plain `post`
// message, once, counted as the fall-back "card_refused".
const (
	// CardTables is how many tables one card holds: "单张卡片最多支持放置五个表格组件" (Feishu
	// cards, "表格组件": at most five table components a card); past it Feishu refuses the whole
	// card (230099, ErrCode 11310 "card table number over limit").
	CardTables = 5
	// maxPostContent is the most a post message's content holds ("Send message": card and
	// rich text messages at most 30 KB); a longer plain text goes as a text message.
	maxPostContent = 30 << 10
)

// Answers that refuse a card for its content (a definite refusal: nothing was shown): the IM
// API's 230099 "Failed to create card content" (its ext naming Feishu's card error, 11310 "card
// table number over limit" among them) and 230025 "The length of the message content reaches
// its limit", CardKit's 200860 "Card content exceeds limit" and 300305 (more than 200
// components).
var cardRefusals = map[int]bool{230099: true, 230025: true, 200860: true, 300305: true, 11310: true}

// cardRefused reports whether err is Feishu refusing a card for its content.
func cardRefused(err error) bool { return cardRefusals[codeOf(err)] }

// cardText is a text as a card's markdown element shows it.
func cardText(text string) string { return markdown.Parse(text).Feishu(CardTables) }

// plainText is a text's plain form (a card's summary, the fall-back message).
func plainText(text string) string { return markdown.Parse(text).Plain() }

// cardJSON is ximd's card (JSON 2.0): one markdown element with the text's card form, in
// streaming mode or not.
func cardJSON(text string, streaming bool) string {
	return cardOf(cardText(text), summary(plainText(text)), streaming)
}

// plainCardJSON is a finished card showing a text's plain form (a streamed card's final whose
// Markdown Feishu refused).
func plainCardJSON(text string) string {
	p := plainText(text)
	return cardOf(p, summary(p), false)
}

func cardOf(content, sum string, streaming bool) string {
	card, _ := json.Marshal(map[string]any{
		"schema": "2.0",
		"config": map[string]any{"streaming_mode": streaming, "update_multi": true, "summary": map[string]any{"content": sum}},
		"body":   map[string]any{"elements": []any{map[string]any{"tag": "markdown", "element_id": elementID, "content": content}}},
	})
	return string(card)
}

// plainMessage is the fall-back message of a text: a post of its plain lines, or a text message
// when that is more than a post holds.
func plainMessage(text string) (msgType, content string) {
	plain := plainText(text)
	var lines [][]map[string]string
	for _, l := range strings.Split(plain, "\n") {
		lines = append(lines, []map[string]string{{"tag": "text", "text": l}})
	}
	post, _ := json.Marshal(map[string]any{"zh_cn": map[string]any{"content": lines}})
	if len(post) <= maxPostContent {
		return "post", string(post)
	}
	raw, _ := json.Marshal(map[string]string{"text": plain})
	return "text", string(raw)
}

// sendRich sends one part of a final as a card and, when Feishu refuses the card for its content,
// as a plain message (its own uuid: the refused card was never a message), counting the
// fall-back.
func (t *Target) sendRich(ctx context.Context, text, key string, part int, replyTo string) (string, error) {
	id, err := t.sendMessage(ctx, "interactive", cardJSON(text, false), uuid(key, "card-final", part), replyTo)
	if !cardRefused(err) {
		return id, err
	}
	t.a.Fallback(Name, "card_refused")
	typ, content := plainMessage(text)
	return t.sendMessage(ctx, typ, content, uuid(key, "plain", part), replyTo)
}
