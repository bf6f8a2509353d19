package adapter_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

func TestTruncate_CutsAtCharactersAndMarksTheCut(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int
		want string
	}{
		{"héllo wörld", 5, "héll…"},
		{"héllo", 5, "héllo"},
		{"你好世界", 3, "你好…"},
		{"abc", 0, "abc"},
	} {
		if got := adapter.Truncate(tt.in, tt.n); got != tt.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

func TestDecodeConfig_NamesTheFieldNeverTheValue(t *testing.T) {
	var w struct {
		Token string `json:"token"`
		Count int    `json:"count"`
	}
	for raw, want := range map[string]string{
		``:                                "target.config: required",
		`{"token":"SECRET","colour":"x"}`: "target.config.colour: unknown field",
		`{"token":"SECRET","count":"x"}`:  "target.config.count: must be a int",
		`["SECRET"]`:                      "target.config: must be a JSON object",
	} {
		err := adapter.DecodeConfig(json.RawMessage(raw), &w)
		pe := profile.AsError(err)
		if err == nil || pe.Code != profile.CodeInvalidDescriptor || pe.Message != want || strings.Contains(pe.Message, "SECRET") {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
}
