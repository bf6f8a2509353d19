package test

import (
	"slices"
	"testing"
	"time"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

func activityCalls(e *env, n int) []string {
	e.t.Helper()
	calls := e.waitCalls("activity calls", func(c []testkit.Call) bool {
		k := 0
		for _, x := range c {
			if x.Path == "/activity" {
				k++
			}
		}
		return k >= n
	})
	_ = calls
	return e.target.ActivityCalls()
}

// §7.1 activity typing (P-ACT-4): thinking and tool degrade to typing; idle clears.
func TestActivity_TypingDegradesAndIdleClears(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{activity: "typing"})
	e.send(profile.TypeActivity, map[string]any{"status": "thinking"})
	activityCalls(e, 1)
	e.send(profile.TypeActivity, map[string]any{"status": "idle"})
	got := activityCalls(e, 2)
	if !slices.Equal(got, []string{"typing", "idle"}) {
		t.Fatalf("activity %v", got)
	}
	for _, c := range e.target.Calls() {
		if c.Path == "/activity" && c.Body["chat_id"] != "room-1" {
			t.Fatalf("activity body %s", c.Raw)
		}
	}
}

// §7.1 activity status: thinking / tool + tool_name / idle as such.
func TestActivity_StatusShowsToolName(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{activity: "status"})
	e.send(profile.TypeActivity, map[string]any{"status": "tool", "tool_name": "web_search"})
	activityCalls(e, 1)
	c := e.target.Calls()[0]
	if c.Body["status"] != "tool" || c.Body["tool_name"] != "web_search" || !c.SignatureOK {
		t.Fatalf("call %s", c.Raw)
	}
}

// §7.1 activity none: nothing is sent.
func TestActivity_NoneSendsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{activity: "none"})
	e.send(profile.TypeActivity, map[string]any{"status": "thinking"})
	_, ack := e.final(msg("m_after", "x")) // a later packet of the channel is processed
	wantAck(t, ack, profile.AckAccepted, "")
	if got := e.target.ActivityCalls(); len(got) != 0 {
		t.Fatalf("activity sent: %v", got)
	}
}

// edge-api §5.3, P-ACT-2/3: an invalid activity gets error invalid_packet and is not shown.
func TestActivity_InvalidIsErrorAndNotShown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{activity: "status"})
	for _, p := range []map[string]any{
		{"status": "sleeping"},
		{"status": "tool"},
		{"status": "thinking", "tool_name": "x"},
		{"status": "thinking", "reasoning": "secret"},
	} {
		pid := e.send(profile.TypeActivity, p)
		if ep := e.errorOf(pid); ep.Code != profile.CodeInvalidPacket {
			t.Fatalf("%v: error %+v", p, ep)
		}
	}
	if got := e.target.ActivityCalls(); len(got) != 0 {
		t.Fatalf("invalid activity shown: %v", got)
	}
}

// P-ACT-5: the final clears a shown status.
func TestActivity_ClearedByFinal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{activity: "status", streaming: "none"})
	e.send(profile.TypeActivity, map[string]any{"status": "thinking"})
	activityCalls(e, 1)
	_, ack := e.final(msg("m_clear", "x"))
	wantAck(t, ack, profile.AckAccepted, "")
	if got := activityCalls(e, 2); !slices.Equal(got, []string{"thinking", "idle"}) {
		t.Fatalf("activity %v", got)
	}
}

// P-ACT-5: the first displayed delta clears a shown status.
func TestActivity_ClearedByFirstDisplayedDelta(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{activity: "status", streaming: "edit"})
	e.send(profile.TypeActivity, map[string]any{"status": "thinking"})
	activityCalls(e, 1)
	e.send(profile.TypeDelta, delta("a_clr", 1, "x"))
	if got := activityCalls(e, 2); !slices.Equal(got, []string{"thinking", "idle"}) {
		t.Fatalf("activity %v", got)
	}
}

// P-ACT-6, edge-api §5.3: a local timeout (XIM_ACTIVITY_TIMEOUT) clears a status nothing else did.
func TestActivity_ClearedByLocalTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{activity: "typing", mutate: func(c *node.Config) { c.ActivityTimeout = 200 * time.Millisecond }})
	e.send(profile.TypeActivity, map[string]any{"status": "thinking"})
	if got := activityCalls(e, 2); !slices.Equal(got, []string{"typing", "idle"}) {
		t.Fatalf("activity %v", got)
	}
}

// P-ACT-6: a failing activity display never affects messages; activity is never acked.
func TestActivity_FailureNeverAffectsMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{activity: "status"})
	e.target.SetAnswer(func(c testkit.Call) int {
		if c.Path == "/activity" {
			return 500
		}
		return 200
	})
	e.send(profile.TypeActivity, map[string]any{"status": "thinking"})
	activityCalls(e, 1)
	_, ack := e.final(msg("m_act", "x"))
	wantAck(t, ack, profile.AckAccepted, "")
	e.quiet(200 * time.Millisecond)
	n := 0
	for _, c := range e.target.MessageCalls() {
		if c.Text() == "x" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("message calls %s", dump(e.target.MessageCalls()))
	}
}
