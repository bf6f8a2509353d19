package matrix

import (
	"encoding/json"
	"unicode/utf8"

	"maunium.net/go/mautrix/event"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/markdown"
)

// Rich text (edge-api §7.3): the agent's Markdown as org.matrix.custom.html.
const (
	// FormatHTML is the format of every text event the adapter sends.
	FormatHTML = string(event.FormatHTML)
	// maxTextBytes bounds what the two forms of one event's text take in its JSON (body and
	// formatted_body, escaped), so the event stays under the spec's 64 KiB with its other keys,
	// an edit's fallback and the server's signatures.
	maxTextBytes = 60000
)

// textContent is the content of a text event: body the plain text, formatted_body the HTML, both
// rendered from one parse of the Markdown text. An empty text has no formatted form.
func textContent(text string) map[string]any {
	doc := markdown.Parse(text)
	c := map[string]any{"msgtype": string(event.MsgText), "body": doc.Plain()}
	if html := doc.HTML(markdown.Matrix); html != "" {
		c["format"] = FormatHTML
		c["formatted_body"] = html
	}
	return c
}

// textCount is how much of MaxTextLength a Markdown text takes: its characters (what the split
// has always counted), or, where the event's two forms take more bytes than maxTextBytes allows
// for that many characters (text in 3- and 4-byte UTF-8), its share of maxTextBytes.
func textCount(text string) int {
	doc := markdown.Parse(text)
	n := jsonLen(doc.Plain()) + jsonLen(doc.HTML(markdown.Matrix))
	return max(utf8.RuneCountInString(text), (n*MaxTextLength+maxTextBytes-1)/maxTextBytes)
}

// jsonLen is the length of s as a JSON string.
func jsonLen(s string) int {
	b, _ := json.Marshal(s)
	return len(b)
}

// splitText cuts a final's Markdown text into the texts of its events: at most MaxTextLength by
// textCount each, cut between blocks (markdown.Split), each rendering on its own.
func splitText(text string) []string {
	var out []string
	for _, part := range markdown.Split(text, MaxTextLength, textCount) {
		out = append(out, fitParts(part)...)
	}
	return out
}

// fitParts cuts again a part that still counts more than MaxTextLength (a split that measured
// characters alone), with a character limit scaled by how much it exceeds.
func fitParts(part string) []string {
	n := textCount(part)
	if n <= MaxTextLength {
		return []string{part}
	}
	limit := max(utf8.RuneCountInString(part)*MaxTextLength/n*9/10, 64)
	var out []string
	for _, p := range adapter.SplitText(part, limit) {
		if p == part { // no cut possible: let the server judge it
			return []string{part}
		}
		out = append(out, fitParts(p)...)
	}
	return out
}

// previewText is a streamed preview's text cut to what one event holds (the preview rolls over
// into the final's parts at the end).
func previewText(text string) string {
	if textCount(text) <= MaxTextLength {
		return text
	}
	n := utf8.RuneCountInString(text)
	for limit := min(n, MaxTextLength); limit > 64; limit = limit * 9 / 10 {
		if t := truncate(text, limit); textCount(t) <= MaxTextLength {
			return t
		}
	}
	return truncate(text, 64)
}
