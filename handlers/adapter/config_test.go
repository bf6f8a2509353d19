package adapter_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// testConfig has a field of every shape the adapters' configs use.
type testConfig struct {
	Token  string          `json:"token"`
	Count  *int            `json:"count"`
	On     bool            `json:"on"`
	Hosts  []string        `json:"hosts" want:"an array of host names"`
	ChatID json.RawMessage `json:"chat_id"`
	Inner  *struct {
		Name string `json:"name"`
	} `json:"inner"`
	Skipped string `json:"-"`
}

func TestDecodeConfig_RefusalsAreStructuredAndNameTheFieldNeverTheValue(t *testing.T) {
	tests := []struct {
		name      string
		raw       string
		wantKind  adapter.ConfigKind
		wantField string
		wantMsg   string
	}{
		{name: "absent", raw: ``, wantKind: adapter.ConfigRequired, wantMsg: "target.config: required"},
		{name: "null", raw: ` null `, wantKind: adapter.ConfigRequired, wantMsg: "target.config: required"},
		{name: "array", raw: `["SECRET"]`, wantKind: adapter.ConfigNotObject, wantMsg: "target.config: must be a JSON object"},
		{name: "string", raw: `"SECRET"`, wantKind: adapter.ConfigNotObject, wantMsg: "target.config: must be a JSON object"},
		{name: "bad JSON", raw: `{"token":"SECRET"`, wantKind: adapter.ConfigNotObject, wantMsg: "target.config: must be a JSON object"},
		{name: "trailing data", raw: `{"token":"SECRET"}{}`, wantKind: adapter.ConfigNotObject, wantMsg: "target.config: must be a JSON object"},
		{name: "unknown field", raw: `{"token":"SECRET","colour":"x"}`, wantKind: adapter.ConfigUnknownField, wantField: "colour", wantMsg: "target.config.colour: unknown field"},
		{name: "skipped field is unknown", raw: `{"Skipped":"SECRET"}`, wantKind: adapter.ConfigUnknownField, wantField: "Skipped", wantMsg: "target.config.Skipped: unknown field"},
		{name: "first refusal in order", raw: `{"count":"SECRET","colour":"x"}`, wantKind: adapter.ConfigWrongType, wantField: "count", wantMsg: "target.config.count: must be a int"},
		{name: "string wanted", raw: `{"token":42}`, wantKind: adapter.ConfigWrongType, wantField: "token", wantMsg: "target.config.token: must be a string"},
		{name: "int wanted", raw: `{"count":1.5}`, wantKind: adapter.ConfigWrongType, wantField: "count", wantMsg: "target.config.count: must be a int"},
		{name: "bool wanted", raw: `{"on":"SECRET"}`, wantKind: adapter.ConfigWrongType, wantField: "on", wantMsg: "target.config.on: must be true or false"},
		{name: "want tag", raw: `{"hosts":"SECRET"}`, wantKind: adapter.ConfigWrongType, wantField: "hosts", wantMsg: "target.config.hosts: must be an array of host names"},
		{name: "nested not an object", raw: `{"inner":["SECRET"]}`, wantKind: adapter.ConfigNotObject, wantField: "inner", wantMsg: "target.config.inner: must be a JSON object"},
		{name: "nested unknown", raw: `{"inner":{"colour":"SECRET"}}`, wantKind: adapter.ConfigUnknownField, wantField: "inner.colour", wantMsg: "target.config.inner.colour: unknown field"},
		{name: "nested type", raw: `{"inner":{"name":7}}`, wantKind: adapter.ConfigWrongType, wantField: "inner.name", wantMsg: "target.config.inner.name: must be a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w testConfig
			err := adapter.DecodeConfig(json.RawMessage(tt.raw), &w)
			var ce *adapter.ConfigError
			if !errors.As(err, &ce) || ce.Kind != tt.wantKind || ce.Field != tt.wantField {
				t.Fatalf("DecodeConfig(%s) = %#v, want kind %d field %q", tt.raw, err, tt.wantKind, tt.wantField)
			}
			var pe *profile.Error
			if !errors.As(err, &pe) || pe.Code != profile.CodeInvalidDescriptor || pe.Message != tt.wantMsg || pe.Retryable {
				t.Fatalf("DecodeConfig(%s) = %v, want invalid_descriptor %q", tt.raw, err, tt.wantMsg)
			}
			if !errors.Is(err, &profile.Error{Code: profile.CodeInvalidDescriptor}) || err.Error() != "invalid_descriptor: "+tt.wantMsg {
				t.Fatalf("error %q is not invalid_descriptor by errors.Is or by its text", err)
			}
			if strings.Contains(err.Error(), "SECRET") || strings.Contains(ce.Want, "SECRET") {
				t.Fatalf("error %q quotes a value", err)
			}
		})
	}
}

func TestDecodeConfig_DecodesEveryShapeNullLeavesTheField(t *testing.T) {
	w := testConfig{Token: "kept"}
	raw := `{"token":null,"count":3,"on":true,"hosts":["a","b"],"chat_id":-100,"inner":{"name":"n"}}`
	if err := adapter.DecodeConfig(json.RawMessage(raw), &w); err != nil {
		t.Fatal(err)
	}
	if w.Token != "kept" || w.Count == nil || *w.Count != 3 || !w.On || len(w.Hosts) != 2 || string(w.ChatID) != "-100" || w.Inner == nil || w.Inner.Name != "n" {
		t.Fatalf("decoded %+v", w)
	}
}

// Keys match their fields as encoding/json matched them (exactly, else ignoring case), so a
// channel bound with such a config keeps opening; a repeated key's last value counts.
func TestDecodeConfig_KeysMatchIgnoringCaseLastRepeatCounts(t *testing.T) {
	var w testConfig
	if err := adapter.DecodeConfig(json.RawMessage(`{"TOKEN":"a","Token":"b","Count":1,"count":2}`), &w); err != nil {
		t.Fatal(err)
	}
	if w.Token != "b" || w.Count == nil || *w.Count != 2 {
		t.Fatalf("decoded %+v", w)
	}
}

func TestConfigError_UnknownFieldWantsTheKnownKeys(t *testing.T) {
	var w testConfig
	var ce *adapter.ConfigError
	if err := adapter.DecodeConfig(json.RawMessage(`{"colour":1}`), &w); !errors.As(err, &ce) {
		t.Fatalf("%v", err)
	}
	if want := `"token", "count", "on", "hosts", "chat_id", "inner"`; ce.Want != want {
		t.Fatalf("Want = %s, want %s", ce.Want, want)
	}
}

func TestConfigCheck_SharedShapesKeepTheFirstRefusal(t *testing.T) {
	n := func(v int) *int { return &v }
	type result struct {
		got           any
		field, errMsg string
	}
	tests := []struct {
		name  string
		check func(ck *adapter.ConfigCheck) any
		want  result
	}{
		{name: "id", check: func(ck *adapter.ConfigCheck) any {
			return ck.ID("chat_id", "oc_1", adapter.PathSafe, "required: an id")
		},
			want: result{got: "oc_1"}},
		{name: "id empty", check: func(ck *adapter.ConfigCheck) any { return ck.ID("chat_id", "", adapter.PathSafe, "required: an id") },
			want: result{got: "", field: "chat_id", errMsg: "target.config.chat_id: required: an id"}},
		{name: "id with a slash", check: func(ck *adapter.ConfigCheck) any { return ck.ID("chat_id", "a/b", adapter.PathSafe, "required: an id") },
			want: result{got: "a/b", field: "chat_id", errMsg: "target.config.chat_id: required: an id"}},
		{name: "required", check: func(ck *adapter.ConfigCheck) any { return ck.Required("secret", "", "required") },
			want: result{got: "", field: "secret", errMsg: "target.config.secret: required"}},
		{name: "present absent", check: func(ck *adapter.ConfigCheck) any { return ck.Present("url", nil) },
			want: result{got: "", field: "url", errMsg: "target.config.url: required"}},
		{name: "present empty", check: func(ck *adapter.ConfigCheck) any { s := ""; return ck.Present("url", &s) },
			want: result{got: "", field: "url", errMsg: "target.config.url: must not be empty"}},
		{name: "base URL default", check: func(ck *adapter.ConfigCheck) any { return ck.BaseURL("api_url", "", "https://api.example/") },
			want: result{got: "https://api.example"}},
		{name: "base URL without default", check: func(ck *adapter.ConfigCheck) any { return ck.BaseURL("homeserver", "", "") },
			want: result{got: "", field: "homeserver", errMsg: "target.config.homeserver: required"}},
		{name: "base URL with query", check: func(ck *adapter.ConfigCheck) any { return ck.BaseURL("api_url", "https://h/?key=SECRET", "") },
			want: result{got: "", field: "api_url", errMsg: "target.config.api_url: must be an http(s) URL without user, query or fragment"}},
		{name: "base URL with user", check: func(ck *adapter.ConfigCheck) any { return ck.BaseURL("api_url", "https://u:SECRET@h", "") },
			want: result{got: "", field: "api_url", errMsg: "target.config.api_url: must be an http(s) URL without user, query or fragment"}},
		{name: "enum default", check: func(ck *adapter.ConfigCheck) any { return adapter.Enum(ck, "streaming", "", "edit", "edit", "none") },
			want: result{got: "edit"}},
		{name: "enum refused", check: func(ck *adapter.ConfigCheck) any {
			return adapter.Enum(ck, "streaming", "SECRET", "edit", "draft", "edit", "none")
		},
			want: result{got: "SECRET", field: "streaming", errMsg: `target.config.streaming: must be "draft", "edit" or "none"`}},
		{name: "int default", check: func(ck *adapter.ConfigCheck) any { return ck.Int("first_preview_words", nil, 3, 0, 100) },
			want: result{got: 3}},
		{name: "int given", check: func(ck *adapter.ConfigCheck) any { return ck.Int("first_preview_words", n(0), 3, 0, 100) },
			want: result{got: 0}},
		{name: "int out of range", check: func(ck *adapter.ConfigCheck) any { return ck.Int("first_preview_words", n(101), 3, 0, 100) },
			want: result{got: 3, field: "first_preview_words", errMsg: "target.config.first_preview_words: must be 0..100"}},
		{name: "first refusal kept", check: func(ck *adapter.ConfigCheck) any {
			ck.Fail("a", "x", "first")
			return adapter.Enum(ck, "b", "bad", "", "good")
		}, want: result{got: "bad", field: "a", errMsg: "target.config.a: first"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ck adapter.ConfigCheck
			got := result{got: tt.check(&ck)}
			if err := ck.Err(); err != nil {
				var ce *adapter.ConfigError
				if !errors.As(err, &ce) || profile.AsError(err).Code != profile.CodeInvalidDescriptor {
					t.Fatalf("%v is not a ConfigError", err)
				}
				got.field, got.errMsg = ce.Field, profile.AsError(err).Message
			}
			if got != tt.want || ck.Failed() != (tt.want.errMsg != "") {
				t.Fatalf("got %+v (failed %v), want %+v", got, ck.Failed(), tt.want)
			}
			if strings.Contains(got.errMsg, "SECRET") {
				t.Fatalf("%q quotes a value", got.errMsg)
			}
		})
	}
}

func TestOneOf(t *testing.T) {
	for _, tt := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"none"}, `"none"`},
		{[]string{"edit", "none"}, `"edit" or "none"`},
		{[]string{"status", "typing", "none"}, `"status", "typing" or "none"`},
	} {
		if got := adapter.OneOf(tt.in...); got != tt.want {
			t.Errorf("OneOf(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// The decoder never panics, and every refusal is a ConfigError that is invalid_descriptor
// naming target.config.
func FuzzDecodeConfig(f *testing.F) {
	for _, seed := range []string{``, `null`, `[]`, `{}`, `{"token":"x","count":3,"on":true,"hosts":["a"],"chat_id":7,"inner":{"name":"n"}}`,
		`{"count":"x"}`, `{"inner":{"x":1}}`, `{"TOKEN":1}`, `{"a":1}{}`, `{"hosts":[1]}`, `{"inner":null}`, `{"token":"\ud800"}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var w testConfig
		err := adapter.DecodeConfig(raw, &w)
		if err == nil {
			return
		}
		var ce *adapter.ConfigError
		pe := profile.AsError(err)
		if !errors.As(err, &ce) || pe.Code != profile.CodeInvalidDescriptor || !strings.HasPrefix(pe.Message, adapter.ConfigPath) ||
			!strings.HasPrefix(pe.Message, ce.Path()+": ") {
			t.Fatalf("DecodeConfig(%q) = %v, want a ConfigError invalid_descriptor naming target.config", raw, err)
		}
		if ce.Kind == adapter.ConfigWrongType && strings.Contains(ce.Problem, string(raw)) && len(raw) > 8 {
			t.Fatalf("DecodeConfig(%q) = %v quotes the config", raw, err)
		}
	})
}
