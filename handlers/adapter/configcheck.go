package adapter

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// PathSafe are the characters an id that goes into a URL path must not hold: a space, '/', '?'
// and '#'.
const PathSafe = " /?#"

// ConfigCheck checks a decoded config's fields one by one and keeps the first refusal, so an
// adapter's parse function declares its fields and checks in order and asks for the outcome
// once at the end ([Checked] or [ConfigCheck.Err]). Each check returns the field's value (its default filled in); after a
// refusal the checks still return values but record nothing. The zero value is ready to use.
//
//	w, ck := adapter.CheckConfig[wireConfig](raw)
//	c := &config{}
//	c.chatID = ck.ID("chat_id", w.ChatID, adapter.PathSafe, "required: the chat's id, like oc_…")
//	c.streaming = adapter.Enum(ck, "streaming", w.Streaming, "card", "card", adapter.StreamingNone)
//	c.firstWords = ck.Int("first_preview_words", w.FirstWords, 3, 0, 100)
//	return adapter.Checked(c, ck)
type ConfigCheck struct {
	err *ConfigError
}

// CheckConfig decodes raw with [DecodeConfig] into a new W, a config's wire struct, and starts
// the checks of its fields: a refusal of the decoder is the check's first, and the checks that
// follow record nothing.
func CheckConfig[W any](raw json.RawMessage) (*W, *ConfigCheck) {
	w, ck := new(W), &ConfigCheck{}
	if err := DecodeConfig(raw, w); err != nil {
		ck.err = err.(*ConfigError) // DecodeConfig returns no other error
	}
	return w, ck
}

// Checked is (v, nil) when ck refused nothing, else (the zero T, the refusal): the end of an
// adapter's parse function.
func Checked[T any](v T, ck *ConfigCheck) (T, error) {
	if err := ck.Err(); err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// Refusal is the first refusal, or nil.
func (ck *ConfigCheck) Refusal() *ConfigError { return ck.err }

// Err is the first refusal, a *[ConfigError], or nil.
func (ck *ConfigCheck) Err() error {
	if ck.err == nil {
		return nil
	}
	return ck.err
}

// Failed reports whether a check has refused the config.
func (ck *ConfigCheck) Failed() bool { return ck.err != nil }

// Fail refuses field (a path below target.config): it takes want, and problem says what is
// wrong. Only the first refusal is kept.
func (ck *ConfigCheck) Fail(field, want, problem string) {
	ck.fail(ConfigInvalid, field, want, problem)
}

func (ck *ConfigCheck) fail(kind ConfigKind, field, want, problem string) {
	if ck.err == nil {
		ck.err = &ConfigError{Kind: kind, Field: field, Want: want, Problem: problem}
	}
}

// Required is v, refused with problem when it is empty.
func (ck *ConfigCheck) Required(field, v, problem string) string {
	if v == "" {
		ck.fail(ConfigRequired, field, "a non-empty string", problem)
	}
	return v
}

// ID is v, an id or name, refused with problem when it is empty or holds any of except
// (usually [PathSafe]).
func (ck *ConfigCheck) ID(field, v, except, problem string) string {
	switch {
	case v == "":
		ck.fail(ConfigRequired, field, "a non-empty string", problem)
	case strings.ContainsAny(v, except):
		ck.fail(ConfigInvalid, field, fmt.Sprintf("a string without any of %q", except), problem)
	}
	return v
}

// Present is *v, a field that must be given: refused "required" when v is nil (absent or null)
// and "must not be empty" when *v is "".
func (ck *ConfigCheck) Present(field string, v *string) string {
	switch {
	case v == nil:
		ck.fail(ConfigRequired, field, "a non-empty string", "required")
		return ""
	case *v == "":
		ck.fail(ConfigRequired, field, "a non-empty string", "must not be empty")
	}
	return *v
}

// BaseURL is v, or def when v is empty, as an absolute http(s) URL with a host and without
// user, query or fragment, its trailing slashes cut. With no def, an empty v is refused
// "required".
func (ck *ConfigCheck) BaseURL(field, v, def string) string {
	const want = "an http(s) URL without user, query or fragment"
	if v == "" {
		v = def
	}
	if v == "" {
		ck.fail(ConfigRequired, field, want, "required")
		return ""
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		ck.fail(ConfigInvalid, field, want, "must be "+want)
		return ""
	}
	return strings.TrimRight(u.String(), "/")
}

// Enum is v, or def when v is empty, as a T, refused `must be "a", "b" or "c"` through ck unless
// it is one of allowed. T is a string type of the vocabulary (adapter.Streaming, a config's own).
func Enum[T ~string](ck *ConfigCheck, field, v string, def T, allowed ...T) T {
	if v == "" {
		v = string(def)
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		if v == string(a) {
			return a
		}
		names[i] = string(a)
	}
	want := OneOf(names...)
	ck.fail(ConfigInvalid, field, want, "must be "+want)
	return T(v)
}

// Int is *v, or def when v is nil (absent or null), refused "must be min..max" outside that
// range.
func (ck *ConfigCheck) Int(field string, v *int, def, min, max int) int {
	if v == nil {
		return def
	}
	if *v < min || *v > max {
		want := fmt.Sprintf("%d..%d", min, max)
		ck.fail(ConfigInvalid, field, want, "must be "+want)
		return def
	}
	return *v
}

// OneOf lists values for a message: `"a"`, `"a" or "b"`, `"a", "b" or "c"`.
func OneOf(values ...string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = `"` + v + `"`
	}
	if len(quoted) <= 1 {
		return strings.Join(quoted, "")
	}
	return strings.Join(quoted[:len(quoted)-1], ", ") + " or " + quoted[len(quoted)-1]
}
