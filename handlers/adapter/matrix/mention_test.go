package matrix

import "testing"

// A mention is the account's user id, or its display name as a whole word (any case), written
// as clients write a pill in the plain body; it is removed with its '@' and ':'/','.
func TestWithoutMention(t *testing.T) {
	tests := []struct {
		name, body, want string
		found            bool
	}{
		{"pill at the start", "Ximbot: what is the weather?", "what is the weather?", true},
		{"user id inside", "hey @ximbot:example.org what time is it?", "hey what time is it?", true},
		{"at-name, other case", "thanks @XIMBOT, done", "thanks done", true},
		{"name inside a word", "Ximbotanic gardens", "Ximbotanic gardens", false},
		{"no mention", "chatter between people", "chatter between people", false},
		{"only the mention", "Ximbot:", "", true},
		{"lines kept", "Ximbot: first\nsecond", "first\nsecond", true},
	}
	for _, tt := range tests {
		got, found := withoutMention(tt.body, "@ximbot:example.org", "Ximbot")
		if got != tt.want || found != tt.found {
			t.Errorf("%s: %q, %v; want %q, %v", tt.name, got, found, tt.want, tt.found)
		}
	}
}

func TestWithoutReplyFallback(t *testing.T) {
	tests := []struct{ body, want string }{
		{"> <@bot:x> I am here\n> more\n\nthanks", "thanks"},
		{"no fallback", "no fallback"},
		{">not a quote line start", ">not a quote line start"},
	}
	for _, tt := range tests {
		if got := withoutReplyFallback(tt.body); got != tt.want {
			t.Errorf("%q: %q, want %q", tt.body, got, tt.want)
		}
	}
}
