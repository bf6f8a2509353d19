package adapter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ximd/ximd/profile"
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

// DecodeConfig decodes a channel's target.config into w, refusing unknown fields. An error is a
// *profile.Error invalid_descriptor naming the field ("target.config.<name>"), never quoting a
// value (configs hold secrets).
func DecodeConfig(raw json.RawMessage, w any) error {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return profile.Errorf(profile.CodeInvalidDescriptor, "target.config: required")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(w)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	switch msg := err.Error(); {
	case strings.Contains(msg, "unknown field "):
		name := strings.Trim(msg[strings.Index(msg, "unknown field ")+len("unknown field "):], `"`)
		return profile.Errorf(profile.CodeInvalidDescriptor, "target.config.%s: unknown field", name)
	case errors.As(err, &te) && te.Field != "":
		return profile.Errorf(profile.CodeInvalidDescriptor, "target.config.%s: must be a %s", te.Field, te.Type)
	}
	return profile.Errorf(profile.CodeInvalidDescriptor, "target.config: must be a JSON object")
}
