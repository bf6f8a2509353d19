package profile

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestScanString(t *testing.T) {
	tests := []struct {
		name, in, want, wantErr string
	}{
		{name: "plain", in: `"abc"`, want: "abc"},
		{name: "empty", in: `""`, want: ""},
		{name: "escapes", in: `"\"\\\/\b\f\n\r\t"`, want: "\"\\/\b\f\n\r\t"},
		{name: "unicode escape", in: `"\u00e9\u4E2D"`, want: "é中"},
		{name: "surrogate pair", in: `"\ud83d\ude00"`, want: "😀"},
		{name: "raw UTF-8 and escape", in: `"é\nü"`, want: "é\nü"},
		{name: "NUL escape", in: `"\u0000"`, want: "\x00"},
		{name: "lone high surrogate", in: `"\ud83d"`, wantErr: "surrogate"},
		{name: "high then non-low", in: `"\ud83d\u0041"`, wantErr: "surrogate"},
		{name: "lone low surrogate", in: `"\ude00"`, wantErr: "surrogate"},
		{name: "bad escape", in: `"\x"`, wantErr: "invalid escape"},
		{name: "short unicode escape", in: `"\u12"`, wantErr: `invalid \u escape`},
		{name: "raw control", in: "\"a\x01\"", wantErr: "control character"},
		{name: "raw DEL allowed", in: "\"a\x7f\"", want: "a\x7f"},
		{name: "invalid UTF-8", in: "\"\xe2\x82\"", wantErr: "invalid UTF-8"},
		{name: "invalid UTF-8 before escape", in: "\"\xe2\x82\\n\"", wantErr: "invalid UTF-8"},
		{name: "invalid UTF-8 after escape", in: "\"\\n\xff\"", wantErr: "invalid UTF-8"},
		{name: "unterminated", in: `"abc`, wantErr: "end of input"},
		{name: "unterminated escape", in: `"abc\`, wantErr: "unterminated string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, build := range []bool{true, false} {
				s := scanner{b: []byte(tc.in)}
				got, err := s.str(build)
				if tc.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("build=%v: err = %v, want %q", build, err, tc.wantErr)
					}
					continue
				}
				if err != nil {
					t.Fatalf("build=%v: %v", build, err)
				}
				if build && string(got) != tc.want {
					t.Fatalf("got %q, want %q", got, tc.want)
				}
				if s.i != len(tc.in) {
					t.Fatalf("build=%v: consumed %d of %d", build, s.i, len(tc.in))
				}
			}
		})
	}
}

func TestParseInt(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"-0", 0, true}, {"1", 1, true}, {"-1", -1, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"9223372036854775808", 0, false},
		{"-9223372036854775808", -9223372036854775808, true},
		{"-9223372036854775809", 0, false},
		{"99999999999999999999", 0, false},
	}
	for _, tc := range tests {
		if got, ok := parseInt([]byte(tc.in)); got != tc.want || ok != tc.ok {
			t.Errorf("parseInt(%s) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzScanner checks the scanner against encoding/json: whatever the scanner accepts is valid
// JSON; valid JSON the scanner refuses must break one of its documented extra rules (UTF-8,
// lone surrogates, depth); and strings decode to what encoding/json decodes.
func FuzzScanner(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `"a\u00e9\ud83d\ude00"`, `{"a":[1,-2.5e3,true,false,null,{"b":"c"}]}`,
		`1`, `-0.0E+1`, `"\ud800"`, "\"\xff\"", `[[[[]]]]`, `{"a":1,}`, ` "x" `, `01`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := scanner{b: data}
		err := s.skip()
		if err == nil {
			err = s.end()
		}
		valid := json.Valid(data)
		if err == nil && !valid {
			t.Fatalf("scanner accepts invalid JSON %q", data)
		}
		if err != nil && valid && utf8.Valid(data) && !strings.Contains(string(data), `\u`) && depth(data) < maxDepth {
			t.Fatalf("scanner refuses valid JSON %q: %v", data, err)
		}
		if err == nil && len(data) > 0 && s.peek() == 0 {
			s2 := scanner{b: data}
			if s2.peek() == '"' {
				got, err := s2.str(true)
				var want string
				if err == nil && json.Unmarshal(data, &want) == nil && string(got) != want {
					t.Fatalf("string %q decodes to %q, encoding/json says %q", data, got, want)
				}
			}
		}
	})
}

// depth is the maximum nesting of brackets outside strings (for valid JSON).
func depth(b []byte) int {
	d, max, inStr, esc := 0, 0, false, false
	for _, c := range b {
		switch {
		case inStr && esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case !inStr && (c == '[' || c == '{'):
			d++
			if d > max {
				max = d
			}
		case !inStr && (c == ']' || c == '}'):
			d--
		}
	}
	return max
}
