package feishutest

import (
	"encoding/json"
	"strings"
	"testing"
)

// Feishu counts a card's Markdown tables ("表格组件": at most five a card); code is not a table.
func TestMarkdownTables(t *testing.T) {
	if n := markdownTables("| a |\n|---|\n| 1 |\n\n```\n| x |\n|---|\n```\n\n|b|c|\n|:-|-:|\n\nx | y\n- | -\n"); n != 3 {
		t.Fatalf("tables counted %d, want 3 (one is code)", n)
	}
}

// A card with a sixth table is refused as Feishu refuses it: 11310, which the IM API and CardKit
// answer as 230099 "Failed to create card content".
func TestCardWithASixthTableIsRefused(t *testing.T) {
	card := func(tables int) string {
		md := strings.Repeat("| k | v |\n|---|---|\n| a | 1 |\n\n", tables)
		b, _ := json.Marshal(map[string]any{"schema": "2.0", "body": map[string]any{"elements": []any{map[string]any{"tag": "markdown", "content": md}}}})
		return string(b)
	}
	if _, ce := parseCard(card(5), true); ce != nil {
		t.Fatalf("five tables refused: %+v", ce)
	}
	_, ce := parseCard(card(6), true)
	if ce == nil || ce.code != 11310 {
		t.Fatalf("six tables: %+v, want 11310", ce)
	}
	if e := ce.cardKit(); e.code != 230099 || !strings.Contains(e.msg, "ErrCode: 11310; ErrMsg: card table number over limit") {
		t.Fatalf("CardKit's answer %+v", e)
	}
}
