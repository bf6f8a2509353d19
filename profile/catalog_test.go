package profile_test

import (
	"slices"
	"testing"

	"github.com/ximd/ximd/profile"
)

func TestLoad(t *testing.T) {
	cat, err := profile.Load()
	if err != nil {
		t.Fatalf("embedded catalog does not load: %v", err)
	}
	if cat.Profile() != profile.IM {
		t.Fatalf("profile = %s", cat.Profile())
	}
	if profile.Default() != profile.Default() {
		t.Fatal("Default must load once")
	}
}

func TestAccepts(t *testing.T) {
	cat := profile.Default()
	tests := []struct {
		name string
		dir  profile.Direction
		typ  string
		want bool
		kind string
		ack  bool
	}{
		{"edge-5 chat.message from xAgent", profile.FromAgent, profile.TypeMessage, true, "message", true},
		{"edge-5 delta from xAgent", profile.FromAgent, profile.TypeDelta, true, "delta", false},
		{"edge-5 ack from xAgent", profile.FromAgent, profile.TypeAck, true, "ack", false},
		{"edge-5 activity from xAgent", profile.FromAgent, profile.TypeActivity, true, "activity", false},
		{"edge-5 tool.invoke from xAgent", profile.FromAgent, profile.TypeToolInvoke, true, "tool", false},
		{"P-ERR-1 error from xAgent dropped", profile.FromAgent, profile.TypeError, false, "", false},
		{"P-ERR-1 tool.result from xAgent dropped", profile.FromAgent, profile.TypeToolResult, false, "", false},
		{"P-SCOPE-3 session.sync_request dropped", profile.FromAgent, "session.sync_request", false, "", false},
		{"P-SCOPE-3 session.sync_message dropped", profile.FromAgent, "session.sync_message", false, "", false},
		{"P-SCOPE-3 session.sync_end dropped", profile.FromAgent, "session.sync_end", false, "", false},
		{"P-SCOPE-2 interrupt dropped", profile.FromAgent, "chat.interrupt", false, "", false},
		{"P-SCOPE-6 case sensitive", profile.FromAgent, "Chat.Message", false, "", false},
		{"P-SCOPE-6 empty type", profile.FromAgent, "", false, "", false},
		{"P-MSG-1 chat.message to xAgent", profile.ToAgent, profile.TypeMessage, true, "message", true},
		{"P-ACK-1 ack to xAgent", profile.ToAgent, profile.TypeAck, true, "ack", false},
		{"edge-5 error to xAgent", profile.ToAgent, profile.TypeError, true, "error", false},
		{"edge-8 tool.result to xAgent", profile.ToAgent, profile.TypeToolResult, true, "tool", false},
		{"P-DLT-6 no delta to xAgent", profile.ToAgent, profile.TypeDelta, false, "", false},
		{"P-ACT-1 no activity to xAgent", profile.ToAgent, profile.TypeActivity, false, "", false},
		{"invalid direction", 0, profile.TypeMessage, false, "", false},
		{"invalid direction 3", 3, profile.TypeMessage, false, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pt, ok := cat.Accepts(tc.dir, tc.typ)
			if ok != tc.want {
				t.Fatalf("Accepts(%v, %q) = %v, want %v", tc.dir, tc.typ, ok, tc.want)
			}
			if ok && (pt.Name != tc.typ || pt.Kind != tc.kind || pt.NeedsAck != tc.ack) {
				t.Fatalf("entry = %+v, want kind %s needs_ack %v", pt, tc.kind, tc.ack)
			}
			if tc.dir == profile.ToAgent && cat.Emits(tc.typ) != tc.want {
				t.Fatalf("Emits(%q) = %v, want %v", tc.typ, !tc.want, tc.want)
			}
		})
	}
}

func TestTypes(t *testing.T) {
	cat := profile.Default()
	names := func(d profile.Direction) []string {
		var out []string
		for _, pt := range cat.Types(d) {
			out = append(out, pt.Name)
		}
		return out
	}
	// P-SCOPE-6: exactly the catalog's sets, nothing wider.
	if got, want := names(profile.FromAgent), []string{"chat.message", "chat.message.delta", "chat.message.ack", "chat.activity", "tool.invoke"}; !slices.Equal(got, want) {
		t.Fatalf("FromAgent = %v, want %v", got, want)
	}
	if got, want := names(profile.ToAgent), []string{"chat.message", "chat.message.ack", "tool.result", "channel.opened", "error"}; !slices.Equal(got, want) {
		t.Fatalf("ToAgent = %v, want %v", got, want)
	}
	if cat.Types(0) != nil {
		t.Fatal("Types(0) must be nil")
	}
	// A copy: callers cannot widen the catalog.
	ts := cat.Types(profile.FromAgent)
	ts[0].Name = "session.sync_request"
	if _, ok := cat.Accepts(profile.FromAgent, "session.sync_request"); ok || cat.Types(profile.FromAgent)[0].Name != profile.TypeMessage {
		t.Fatal("Types must return a copy")
	}
	// Kinds are subject tokens.
	for _, d := range []profile.Direction{profile.FromAgent, profile.ToAgent} {
		for _, pt := range cat.Types(d) {
			if pt.Kind == "" {
				t.Fatalf("%s has no kind", pt.Name)
			}
		}
	}
}

func TestDirectionString(t *testing.T) {
	if profile.FromAgent.String() != "xagent_to_connector" || profile.ToAgent.String() != "connector_to_xagent" || profile.Direction(7).String() != "Direction(7)" {
		t.Fatal("Direction.String")
	}
}
