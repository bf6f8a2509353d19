package test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

// edge-api §5.2 + §7.1 streaming edit: the first displayed delta is a POST final=false, later
// deltas PATCH the whole text so far, the final PATCHes the same message with final=true.
func TestDelta_EditTargetCreatesThenEditsSameMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{streaming: "edit"})
	e.send(profile.TypeDelta, delta("a1", 1, "Hel"))
	e.waitCalls("first display", func(c []testkit.Call) bool { return len(c) >= 1 })
	e.send(profile.TypeDelta, delta("a1", 2, "lo "))
	e.send(profile.TypeDelta, delta("a1", 3, "world"))
	e.waitCalls("whole text displayed", func(c []testkit.Call) bool { return len(c) > 0 && c[len(c)-1].Text() == "Hello world" })
	_, ack := e.final(msg("a1", "Hello world!"))
	wantAck(t, ack, profile.AckAccepted, "")
	calls := e.target.MessageCalls()
	first := calls[0]
	if first.Method != http.MethodPost || first.Final() || first.Text() != "Hel" {
		t.Fatalf("first call %s %s", first.Method, first.Raw)
	}
	last := calls[len(calls)-1]
	if last.Method != http.MethodPatch || last.Path != "/messages/tm-1" || !last.Final() || last.Text() != "Hello world!" {
		t.Fatalf("final call %s %s %s", last.Method, last.Path, last.Raw)
	}
	prev := ""
	for _, c := range calls[1 : len(calls)-1] {
		if c.Method != http.MethodPatch || c.Final() || !strings.HasPrefix(c.Text(), prev) {
			t.Fatalf("edit %s %s after %q", c.Method, c.Raw, prev)
		}
		prev = c.Text()
	}
}

// edge-api §5.2: deltas never get acks.
func TestDelta_NeverAcked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.send(profile.TypeDelta, delta("a_na", 1, "x"))
	e.waitCalls("display", func(c []testkit.Call) bool { return len(c) == 1 })
	e.quiet(300 * time.Millisecond)
}

// P-DLT-2, edge-api §5.2: a retransmitted sequence with the same text is ignored (never
// appended twice); with different text it is delta_sequence_conflict.
func TestDelta_RetransmitIgnoredConflictReported(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.send(profile.TypeDelta, delta("a2", 1, "ab"))
	e.send(profile.TypeDelta, delta("a2", 1, "ab"))
	e.send(profile.TypeDelta, delta("a2", 2, "cd"))
	e.waitCalls("ab+cd", func(c []testkit.Call) bool { return len(c) > 0 && c[len(c)-1].Text() == "abcd" })
	pid := e.send(profile.TypeDelta, delta("a2", 1, "XX"))
	p := e.errorOf(pid)
	if p.Code != profile.CodeDeltaSequenceConflict || p.Retryable {
		t.Fatalf("error %+v", p)
	}
	for _, c := range e.target.MessageCalls() {
		if strings.Contains(c.Text(), "abab") || strings.Contains(c.Text(), "XX") {
			t.Fatalf("retransmission displayed: %s", c.Raw)
		}
	}
}

// edge-api §5.2, P-ERR-4: a skipped sequence is delta_sequence_gap; nothing of it or later deltas
// is displayed; the final is still delivered in full.
func TestDelta_GapReportedNothingLaterShownFinalDelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.send(profile.TypeDelta, delta("a3", 1, "one "))
	e.waitCalls("seq 1", func(c []testkit.Call) bool { return len(c) == 1 })
	pid := e.send(profile.TypeDelta, delta("a3", 3, "three "))
	if p := e.errorOf(pid); p.Code != profile.CodeDeltaSequenceGap {
		t.Fatalf("error %+v", p)
	}
	e.send(profile.TypeDelta, delta("a3", 2, "two "))
	e.send(profile.TypeDelta, delta("a3", 4, "four "))
	_, ack := e.final(msg("a3", "one two three four"))
	wantAck(t, ack, profile.AckAccepted, "")
	calls := e.target.MessageCalls()
	if len(calls) != 2 || calls[1].Text() != "one two three four" || !calls[1].Final() {
		t.Fatalf("calls %s", dump(calls))
	}
}

// edge-api §5.2: a first seen sequence that is not 1 is a gap.
func TestDelta_FirstSequenceNotOneIsGap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	pid := e.send(profile.TypeDelta, delta("a4", 2, "x"))
	if p := e.errorOf(pid); p.Code != profile.CodeDeltaSequenceGap {
		t.Fatalf("error %+v", p)
	}
	if n := len(e.target.MessageCalls()); n != 0 {
		t.Fatalf("displayed: %s", dump(e.target.MessageCalls()))
	}
}

// edge-api §5.2: deltas for a completed message are ignored silently.
func TestDelta_AfterCompletedIgnoredSilently(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	_, ack := e.final(msg("a5", "done"))
	wantAck(t, ack, profile.AckAccepted, "")
	e.send(profile.TypeDelta, delta("a5", 1, "late"))
	e.send(profile.TypeDelta, delta("a5", 7, "later"))
	e.quiet(300 * time.Millisecond)
	if n := len(e.target.MessageCalls()); n != 1 {
		t.Fatalf("calls %s", dump(e.target.MessageCalls()))
	}
}

// A delta of a message whose final a worker delivered and then forgot (a restart) is ignored:
// its record is done, so no buffer opens and no gap is reported.
func TestDelta_AfterCompletedAndForgottenIgnored(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{streaming: "none"})
	_, ack := e.final(msg("a6", "done"))
	wantAck(t, ack, profile.AckAccepted, "")
	e.restart()
	e.send(profile.TypeDelta, delta("a6", 1, "late"))
	e.send(profile.TypeDelta, delta("a6", 3, "later"))
	_, ack = e.final(msg("a7", "a fence: every delta before it is handled"))
	wantAck(t, ack, profile.AckAccepted, "")
	e.quiet(300 * time.Millisecond)
	_, b, _ := e.node.Do(http.MethodGet, "/v1/channels/"+e.channel, nil)
	if st := jsonOf(t, b)["stats"].(map[string]any); st["open_delta_buffers"] != 0.0 {
		t.Fatalf("a completed message got a delta buffer: stats %v", st)
	}
}

// §7.1 streaming none, conformance 5: nothing before the final, then one POST final=true.
func TestDelta_StreamingNoneSendsOnlyTheFinal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{streaming: "none"})
	for i := 1; i <= 5; i++ {
		e.send(profile.TypeDelta, delta("a6", i, "x"))
	}
	e.quiet(200 * time.Millisecond)
	if n := len(e.target.MessageCalls()); n != 0 {
		t.Fatalf("displayed before the final: %s", dump(e.target.MessageCalls()))
	}
	_, ack := e.final(msg("a6", "xxxxx"))
	wantAck(t, ack, profile.AckAccepted, "")
	calls := e.target.MessageCalls()
	if len(calls) != 1 || calls[0].Method != http.MethodPost || !calls[0].Final() || calls[0].Text() != "xxxxx" {
		t.Fatalf("calls %s", dump(calls))
	}
}

// §7.1: edits are coalesced, never more often than XIM_EDIT_INTERVAL; the latest text wins.
func TestDelta_EditsCoalescedByEditInterval(t *testing.T) {
	t.Parallel()
	const interval = 150 * time.Millisecond
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { c.EditInterval = interval }})
	want := ""
	for i := 1; i <= 40; i++ {
		s := fmt.Sprintf("%d ", i)
		want += s
		e.send(profile.TypeDelta, delta("a7", i, s))
		time.Sleep(5 * time.Millisecond)
	}
	calls := e.waitCalls("latest text", func(c []testkit.Call) bool { return len(c) > 0 && c[len(c)-1].Text() == want })
	if len(calls) >= 20 {
		t.Fatalf("%d display calls for 40 deltas: not coalesced", len(calls))
	}
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].At.Sub(calls[i-1].At); gap < interval-10*time.Millisecond {
			t.Fatalf("calls %d and %d only %s apart", i-1, i, gap)
		}
	}
}

// P-DLT-7, edge-api §5.2: an evicted buffer (TTL) never blocks or corrupts the final, and the
// final edits the message already displayed instead of creating a second one.
func TestDelta_EvictedBufferFinalStillEditsDisplayedMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { c.DeltaTTL = 50 * time.Millisecond }})
	e.send(profile.TypeDelta, delta("a8", 1, "partial"))
	e.waitCalls("display", func(c []testkit.Call) bool { return len(c) == 1 })
	poll(t, "buffer evicted", func() bool {
		return metric(t, e.node, `ximd_delta_buffers_evicted_total{reason="ttl"} 1`)
	})
	e.send(profile.TypeDelta, delta("a8", 2, " and")) // ignored silently: no gap error, no display
	e.quiet(200 * time.Millisecond)
	_, ack := e.final(msg("a8", "partial and the rest"))
	wantAck(t, ack, profile.AckAccepted, "")
	calls := e.target.MessageCalls()
	last := calls[len(calls)-1]
	if len(calls) != 2 || last.Method != http.MethodPatch || last.Path != "/messages/tm-1" || last.Text() != "partial and the rest" {
		t.Fatalf("calls %s", dump(calls))
	}
}

// P-DLT-7: after a buffer is evicted (TTL) its later deltas are ignored silently (no gap error)
// and its final is delivered in full.
func TestDelta_EvictedBufferLaterDeltasIgnoredSilently(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{streaming: "none", mutate: func(c *node.Config) { c.DeltaTTL = 50 * time.Millisecond }})
	e.send(profile.TypeDelta, delta("a9", 1, "one "))
	poll(t, "buffer evicted", func() bool {
		return metric(t, e.node, `ximd_delta_buffers_evicted_total{reason="ttl"} 1`)
	})
	e.send(profile.TypeDelta, delta("a9", 2, "two"))
	e.quiet(300 * time.Millisecond)
	_, ack := e.final(msg("a9", "one two"))
	wantAck(t, ack, profile.AckAccepted, "")
	if calls := e.target.MessageCalls(); len(calls) != 1 || calls[0].Text() != "one two" {
		t.Fatalf("calls %s", dump(calls))
	}
}
