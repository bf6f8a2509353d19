package adapter_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/adapter"
)

// edge-api §4.1 keys: the platform's id when token-safe and at most 64 characters, else h_ and
// 26 characters of the lowercase base32 of its SHA-256; a thread's "<id>_<thread>" with '.' as '_'.
func TestConversationKey(t *testing.T) {
	tests := []struct {
		name string
		c    adapter.Conversation
		want string
	}{
		{"telegram private chat", adapter.Conversation{ID: "42424242"}, "42424242"},
		{"telegram supergroup kept as is", adapter.Conversation{ID: "-1001234567890"}, "-1001234567890"},
		{"telegram topic", adapter.Conversation{ID: "-1001234567890", Thread: "17"}, "-1001234567890_17"},
		{"slack thread", adapter.Conversation{ID: "C0123ABC", Thread: "1700000000.000100"}, "C0123ABC_1700000000_000100"},
		{"matrix room hashed", adapter.Conversation{ID: "!abc:example.org"}, "h_"},
		{"too long hashed", adapter.Conversation{ID: strings.Repeat("a", 65)}, "h_"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.c.Key()
			if tt.want == "h_" {
				if !strings.HasPrefix(got, "h_") || len(got) != 28 || strings.ToLower(got) != got {
					t.Fatalf("Key() = %q, want h_ and 26 lowercase base32 characters", got)
				}
				if again := tt.c.Key(); again != got {
					t.Fatalf("Key() not stable: %q then %q", got, again)
				}
				return
			}
			if got != tt.want {
				t.Fatalf("Key() = %q, want %q", got, tt.want)
			}
		})
	}
	if id := (adapter.Conversation{ID: "42"}).ChannelID("tg1"); id != "tg1-42" {
		t.Fatalf("ChannelID = %q", id)
	}
}

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		want    adapter.Policy
		wantErr string
	}{
		{name: "absent: the defaults", raw: ``, want: adapter.Policy{Direct: adapter.DirectPairing, Groups: adapter.GroupsMention, Scope: adapter.ScopeConversation,
			AllowUsers: []string{}, AllowGroups: []string{}, PairingText: adapter.DefaultPairingText, MaxPerMinute: 20}},
		{name: "every key", raw: `{"direct":"allowlist","groups":"all","allow_users":["u1"],"allow_groups":["g1"],"scope":"thread","pairing_text":"code {code}","max_per_minute":5}`,
			want: adapter.Policy{Direct: adapter.DirectAllowlist, Groups: adapter.GroupsAll, Scope: adapter.ScopeThread, AllowUsers: []string{"u1"},
				AllowGroups: []string{"g1"}, PairingText: "code {code}", MaxPerMinute: 5}},
		{name: "unknown direct", raw: `{"direct":"maybe"}`, wantErr: `conversations.direct: must be "pairing", "allowlist", "open" or "closed"`},
		{name: "unknown groups", raw: `{"groups":"loud"}`, wantErr: `conversations.groups: must be "mention", "all" or "closed"`},
		{name: "unknown scope", raw: `{"scope":"room"}`, wantErr: `conversations.scope: must be "conversation" or "thread"`},
		{name: "unknown key", raw: `{"dms":"open"}`, wantErr: `unknown field "dms"`},
		{name: "wrong type", raw: `{"allow_users":"u1"}`, wantErr: "allow_users"},
		{name: "max_per_minute 0", raw: `{"max_per_minute":0}`, wantErr: "max_per_minute"},
		{name: "pairing text without code", raw: `{"pairing_text":"hi"}`, wantErr: "{code}"},
		{name: "empty allowed user", raw: `{"allow_users":[""]}`, wantErr: "allow_users"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := adapter.ParsePolicy(json.RawMessage(tt.raw))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "invalid_descriptor") {
					t.Fatalf("err = %v, want invalid_descriptor naming %q", err, tt.wantErr)
				}
				return
			}
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tt.want)
			if err != nil || string(gj) != string(wj) {
				t.Fatalf("ParsePolicy = %s, %v; want %s", gj, err, wj)
			}
		})
	}
}

// edge-api §4.1: which messages a policy passes, and the reason it refuses the others.
func TestPolicyDecide(t *testing.T) {
	direct := func(user string) adapter.Arrival {
		return adapter.Arrival{Conversation: adapter.Conversation{Kind: adapter.Direct, ID: user}, Author: adapter.Author{ID: user}}
	}
	group := func(id string, mentioned bool) adapter.Arrival {
		return adapter.Arrival{Conversation: adapter.Conversation{Kind: adapter.Group, ID: id}, Author: adapter.Author{ID: "u"}, Mentioned: mentioned}
	}
	fromBot := direct("b")
	fromBot.Author.IsBot = true
	tests := []struct {
		name   string
		policy string
		in     adapter.Arrival
		want   adapter.Decision
	}{
		{"stranger under pairing", `{}`, direct("x"), adapter.Decision{Refused: adapter.RefusedPairingPending, Pair: true}},
		{"allowed under pairing", `{"allow_users":["x"]}`, direct("x"), adapter.Decision{}},
		{"stranger under allowlist", `{"direct":"allowlist"}`, direct("x"), adapter.Decision{Refused: adapter.RefusedNotAllowed}},
		{"anyone under open", `{"direct":"open"}`, direct("x"), adapter.Decision{}},
		{"closed even if allowed", `{"direct":"closed","allow_users":["x"]}`, direct("x"), adapter.Decision{Refused: adapter.RefusedDirectClosed}},
		{"a bot, even open", `{"direct":"open"}`, fromBot, adapter.Decision{Refused: adapter.RefusedFromBot}},
		{"group without mention", `{}`, group("g", false), adapter.Decision{Refused: adapter.RefusedNotMentioned}},
		{"group with mention", `{}`, group("g", true), adapter.Decision{}},
		{"group all", `{"groups":"all"}`, group("g", false), adapter.Decision{}},
		{"group closed", `{"groups":"closed"}`, group("g", true), adapter.Decision{Refused: adapter.RefusedGroupClosed}},
		{"group not listed", `{"groups":"all","allow_groups":["h"]}`, group("g", true), adapter.Decision{Refused: adapter.RefusedGroupNotAllowed}},
		{"group listed", `{"groups":"all","allow_groups":["g"]}`, group("g", false), adapter.Decision{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := adapter.ParsePolicy(json.RawMessage(tt.policy))
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Decide(tt.in); got != tt.want {
				t.Fatalf("Decide = %+v, want %+v", got, tt.want)
			}
		})
	}
	p, _ := adapter.ParsePolicy(nil)
	if got := p.PairingAnswer("ABCD2345"); !strings.Contains(got, "ABCD2345") || strings.Contains(got, "{code}") {
		t.Fatalf("PairingAnswer = %q", got)
	}
}

func TestBindConfigAndNamedConversationKey(t *testing.T) {
	got, err := adapter.BindConfig(json.RawMessage(`{"url":"http://x","secret":"s"}`), map[string]any{"chat_id": "c1"})
	var m map[string]string
	if err != nil || json.Unmarshal(got, &m) != nil || m["chat_id"] != "c1" || m["url"] != "http://x" || m["secret"] != "s" {
		t.Fatalf("BindConfig = %s, %v", got, err)
	}
	if _, err := adapter.BindConfig(json.RawMessage(`[1]`), nil); err == nil {
		t.Fatal("BindConfig of a non-object: no error")
	}
	if k := adapter.NamedConversationKey(json.RawMessage(`{"token":"t","Chat_ID":"1"}`), []string{"chat_id"}); k != "chat_id" {
		t.Fatalf("NamedConversationKey = %q (keys match case-insensitively, as the config decoder does)", k)
	}
	if k := adapter.NamedConversationKey(json.RawMessage(`{"token":"t"}`), []string{"chat_id"}); k != "" {
		t.Fatalf("NamedConversationKey = %q", k)
	}
}
