package adapter

import (
	"fmt"
	"unicode/utf8"
)

// Truncate cuts a streamed preview to at most n characters (runes), the last one "…" marking the
// cut (edge-api §7.2: a preview past the platform's limit is truncated, never an error).
func Truncate(text string, n int) string {
	if n <= 0 || utf8.RuneCountInString(text) <= n {
		return text
	}
	count := 0
	for i := range text {
		if count == n-1 {
			return text[:i] + "…"
		}
		count++
	}
	return text
}

// Unpassed is the text of a user message whose file could not be passed on: a note on a line of
// its own, so the message says so rather than the file vanishing.
func Unpassed(text, name, reason string) string {
	note := fmt.Sprintf("[%s: not passed on: %s]", name, reason)
	if text == "" {
		return note
	}
	return text + "\n" + note
}
