package slacktest

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Block limits (Block Kit reference: "Blocks", "Markdown block").
const (
	maxBlocks = 50 // "up to 50 blocks in each message"
	// maxMarkdownBlocks is the markdown block's limit: "The cumulative limit for all markdown
	// blocks in a single payload is 12,000 characters" (one block of more is refused as invalid,
	// several that pass it together as msg_blocks_too_long).
	maxMarkdownBlocks = 12_000
)

// blockTypes are the Block Kit layout blocks a message may carry ("Blocks" reference); any
// other type is invalid_blocks.
var blockTypes = map[string]bool{
	"actions": true, "context": true, "divider": true, "file": true, "header": true, "image": true,
	"input": true, "markdown": true, "rich_text": true, "section": true, "video": true, "table": true,
	"context_actions": true, "plan": true, "task_card": true,
}

// checkedBlocks is a message's blocks as the fake read them.
type checkedBlocks struct {
	raw      json.RawMessage // the blocks argument, as given
	markdown string          // the text of its markdown blocks, joined by blank lines
}

// checkBlocks validates the blocks argument of chat.postMessage and chat.update as Slack does:
// a JSON array (invalid_blocks_format), of at most 50 blocks, each of a known type with what
// that type needs (a markdown block its text, at most 12,000 characters: invalid_blocks), and
// the markdown blocks together at most 12,000 characters (msg_blocks_too_long). "" is no blocks.
func checkBlocks(arg string) (*checkedBlocks, string) {
	if arg == "" {
		return nil, ""
	}
	var blocks []map[string]any
	if err := json.Unmarshal([]byte(arg), &blocks); err != nil {
		return nil, "invalid_blocks_format"
	}
	if len(blocks) > maxBlocks {
		return nil, "invalid_blocks"
	}
	var md []string
	total := 0
	for _, b := range blocks {
		typ, _ := b["type"].(string)
		if !blockTypes[typ] {
			return nil, "invalid_blocks"
		}
		if typ != "markdown" {
			continue
		}
		text, ok := b["text"].(string)
		n := utf8.RuneCountInString(text)
		if !ok || strings.TrimSpace(text) == "" || n > maxMarkdownBlocks {
			return nil, "invalid_blocks"
		}
		total += n
		md = append(md, text)
	}
	if total > maxMarkdownBlocks {
		return nil, "msg_blocks_too_long"
	}
	return &checkedBlocks{raw: json.RawMessage(arg), markdown: strings.Join(md, "\n\n")}, ""
}

// textBlocks are the rich_text blocks Slack's client sends with a person's plain text: one
// section of text runs, a mention "<@U…>" a user element.
func textBlocks(text string) json.RawMessage {
	if text == "" {
		return nil
	}
	var els []map[string]any
	rest := text
	for rest != "" {
		i := strings.Index(rest, "<@")
		j := -1
		if i >= 0 {
			j = strings.IndexByte(rest[i:], '>')
		}
		if i < 0 || j < 0 {
			els = append(els, map[string]any{"type": "text", "text": rest})
			break
		}
		if i > 0 {
			els = append(els, map[string]any{"type": "text", "text": rest[:i]})
		}
		id, _, _ := strings.Cut(rest[i+2:i+j], "|")
		els = append(els, map[string]any{"type": "user", "user_id": id})
		rest = rest[i+j+1:]
	}
	b, _ := json.Marshal([]map[string]any{{
		"type": "rich_text", "block_id": randAlnum(5),
		"elements": []map[string]any{{"type": "rich_text_section", "elements": els}},
	}})
	return b
}
