package agent

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ximd/ximd/profile"
)

func TestChunks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		text string
		n    int
		want []string
	}{
		{name: "one word each", text: "a bb ccc", n: 1, want: []string{"a ", "bb ", "ccc"}},
		{name: "two words each", text: "a bb ccc", n: 2, want: []string{"a bb ", "ccc"}},
		{name: "leading, trailing and repeated space", text: "  a\n\nb  ", n: 1, want: []string{"  a\n\n", "b  "}},
		{name: "only space", text: "   ", n: 1, want: []string{"   "}},
		{name: "empty", text: "", n: 1, want: nil},
		{name: "unicode", text: "héllo wörld", n: 1, want: []string{"héllo ", "wörld"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := chunks(tt.text, tt.n)
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tt.want) {
				t.Fatalf("chunks(%q, %d) = %q, want %q", tt.text, tt.n, got, tt.want)
			}
			if strings.Join(got, "") != tt.text {
				t.Fatalf("pieces do not concatenate to the text")
			}
		})
	}
}

func TestFIFOMapForgetsOldest(t *testing.T) {
	t.Parallel()
	f := newFIFOMap[int](2)
	f.put("a", 1)
	f.put("b", 2)
	f.put("a", 3) // an update keeps its place
	f.put("c", 4) // forgets a, the oldest
	for k, want := range map[string]bool{"a": false, "b": true, "c": true} {
		if _, ok := f.get(k); ok != want {
			t.Errorf("get(%q) present = %v, want %v", k, ok, want)
		}
	}
	if len(f.m) != 2 {
		t.Errorf("holds %d keys, want 2", len(f.m))
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	msg := profile.Message{MessageID: "m", Text: "hi", Files: []profile.File{{FileRef: "file_1", Filename: "a.png"}, {FileRef: "file_2"}}}
	tests := []struct {
		name    string
		echo    bool
		echoErr error
		want    string
	}{
		{name: "named only", want: "Files received (not downloaded): a.png, file_2"},
		{name: "echoed", echo: true, want: "Files received and sent back: a.png, file_2"},
		{name: "echo failed", echo: true, echoErr: errors.New("HTTP 404"), want: "(could not send them back: HTTP 404)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{Reply: `You said: "{text}".`, EchoFiles: tt.echo}
			got := c.render(msg, nil, tt.echoErr)
			if !strings.HasPrefix(got, `You said: "hi".`) || !strings.Contains(got, tt.want) {
				t.Fatalf("render = %q, want the reply and %q", got, tt.want)
			}
		})
	}
}
