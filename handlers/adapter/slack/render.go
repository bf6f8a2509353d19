package slack

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/markdown"
)

// The agent's Markdown in Slack (edge-api §7.3): a stream's markdown_text, and a `markdown` block
// in every post and update, with `text` the plain form (notifications, search, and the message
// itself when the block is refused). Never Slack's older mrkdwn for the agent's text.
const (
	// MaxTextLength bounds the rendered Markdown of one message: "The cumulative limit for all
	// markdown blocks in a single payload is 12,000 characters" (Block Kit, "Markdown block"),
	// which is also what chat.startStream and chat.appendStream take as markdown_text.
	MaxTextLength = 12000
	// maxPlainText is the most a message's `text` holds (chat.postMessage: "truncated ... 40,000
	// characters").
	maxPlainText = 40000
)

// Slack's answers that refuse a message's blocks for their content: the same message goes
// again as plain text, once (the reason of the fall-back is the code).
var blocksRefusals = []string{"invalid_blocks", "invalid_blocks_format", "msg_blocks_too_long"}

// form is a text as a Slack message carries it: the markdown block's text and the plain text.
type form struct{ md, plain string }

// formOf renders the agent's Markdown once for Slack.
func formOf(text string) form {
	d := markdown.Parse(text)
	return form{md: d.Slack(), plain: adapter.Truncate(d.Plain(), maxPlainText)}
}

// slackLen is what Slack counts of a text: the characters of its markdown form.
func slackLen(text string) int { return utf8.RuneCountInString(markdown.Parse(text).Slack()) }

// split cuts a final's text into messages whose markdown each fits MaxTextLength, between blocks.
func split(text string) []string { return markdown.Split(text, MaxTextLength, slackLen) }

// preview is the part of a streamed text a message shows: all of it, or its first part of
// MaxTextLength with "…" marking the cut (a preview past the limit is truncated, never an error).
func preview(text string) string {
	if slackLen(text) <= MaxTextLength {
		return text
	}
	return markdown.Split(text, MaxTextLength-1, slackLen)[0] + "…"
}

// options are the message options of f: a markdown block and the plain text, or (plain) the
// plain text alone. A text with nothing to show as a block (a final of files only) has no block.
func (f form) options(plain bool) []slack.MsgOption {
	if plain || strings.TrimSpace(f.md) == "" {
		return []slack.MsgOption{slack.MsgOptionText(f.plain, false)}
	}
	return []slack.MsgOption{slack.MsgOptionText(f.plain, false), slack.MsgOptionBlocks(slack.NewMarkdownBlock("", f.md))}
}

// blocksRefused is the Slack code of a definite refusal of a message's blocks ("" when err is
// none: a timeout or a connection error is never one, the message may have landed).
func blocksRefused(err error) string {
	for _, code := range blocksRefusals {
		if codeIs(err, code) {
			return code
		}
	}
	return ""
}

// rich sends a message in its Markdown form (call with plain false) and, when Slack refuses the
// blocks, once more as plain text, counting the fall-back.
func (t *Target) rich(ctx context.Context, call func(plain bool) error) error {
	err := call(false)
	if reason := blocksRefused(err); reason != "" {
		t.a.Fallback(Name, reason)
		return call(true)
	}
	return err
}
