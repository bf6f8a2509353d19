package test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/profile"
)

// edge-api §5.1: every chat.message gets exactly one ack with reply_to, channel and message_id.
func TestFinal_ExactlyOneAckMatchingPacketChannelAndMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	pid := e.send(profile.TypeMessage, msg("msg_1", "hello"))
	env, err := e.agent.Reply(pid, wait)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := testkit.AckOf(env)
	if err != nil {
		t.Fatal(err)
	}
	if env.ChannelID != e.channel || ack.MessageID != "msg_1" || env.ReplyTo != pid || env.Schema != profile.Schema {
		t.Fatalf("ack envelope %+v payload %+v", env, ack)
	}
	wantAck(t, ack, profile.AckAccepted, "")
	e.quiet(300 * time.Millisecond) // exactly one
}

// edge-api §5.1 + §7.1: a final with no displayed delta is one POST with final=true, signed,
// with idempotency_key <channel>:<message_id>; accepted comes after it.
func TestFinal_DirectFinalIsOneSignedPostWithIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	_, ack := e.final(msg("m_direct", "whole text"))
	wantAck(t, ack, profile.AckAccepted, "")
	calls := e.target.MessageCalls()
	if len(calls) != 1 {
		t.Fatalf("want 1 call, got %s", dump(calls))
	}
	c := calls[0]
	if c.Method != http.MethodPost || c.Path != "/messages" || !c.Final() || c.Text() != "whole text" || !c.SignatureOK {
		t.Fatalf("call %s %s %s sig=%v", c.Method, c.Path, c.Raw, c.SignatureOK)
	}
	if c.Body["idempotency_key"] != e.channel+":m_direct" || c.Body["chat_id"] != "room-1" {
		t.Fatalf("body %s", c.Raw)
	}
}

// edge-api §5.1: accepted only after every target side effect succeeded.
func TestFinal_AcceptedOnlyAfterTargetSucceeded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	var answered atomic.Int64
	e.target.SetAnswer(func(testkit.Call) int {
		time.Sleep(200 * time.Millisecond)
		answered.Store(time.Now().UnixNano())
		return 200
	})
	pid := e.send(profile.TypeMessage, msg("m_slow", "x"))
	ack := e.ackOf(pid)
	got := time.Now().UnixNano()
	wantAck(t, ack, profile.AckAccepted, "")
	if a := answered.Load(); a == 0 || got < a {
		t.Fatalf("ack before the target answered")
	}
}

// edge-api §5.1: a retransmission (new packet_id, same message_id and content) is duplicate and
// the target is not touched (P-ACK-4, P-MSG-9).
func TestFinal_RetransmissionIsDuplicateWithoutTargetCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	_, ack := e.final(msg("m_dup", "once"))
	wantAck(t, ack, profile.AckAccepted, "")
	_, ack = e.final(msg("m_dup", "once"))
	wantAck(t, ack, profile.AckDuplicate, "")
	if n := len(e.target.MessageCalls()); n != 1 {
		t.Fatalf("target called %d times", n)
	}
}

// edge-api §5.1: a retransmission arriving while the first is in flight is answered when the
// first finishes: duplicate if it was accepted.
func TestFinal_RetransmissionInFlightAnsweredAfterFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	release := make(chan struct{})
	e.target.SetAnswer(func(testkit.Call) int { <-release; return 200 })
	p1 := e.send(profile.TypeMessage, msg("m_fly", "x"))
	e.waitCalls("first call", func(c []testkit.Call) bool { return len(c) == 1 })
	p2 := e.send(profile.TypeMessage, msg("m_fly", "x"))
	e.quiet(200 * time.Millisecond) // neither is answered while the first is in flight
	close(release)
	a1, a2 := e.ackOf(p1), e.ackOf(p2)
	wantAck(t, a1, profile.AckAccepted, "")
	wantAck(t, a2, profile.AckDuplicate, "")
	if n := len(e.target.MessageCalls()); n != 1 {
		t.Fatalf("target called %d times", n)
	}
}

// edge-api §5.1: a retransmission queued behind an attempt the target refused for good gets that
// same outcome, and so does every later one; the target is called once.
func TestFinal_RetransmissionBehindARefusalGetsTheSameRefusal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{streaming: "none"})
	release := make(chan struct{})
	e.target.SetAnswer(func(testkit.Call) int { <-release; return 400 })
	p1 := e.send(profile.TypeMessage, msg("m_no", "x"))
	e.waitCalls("first call", func(c []testkit.Call) bool { return len(c) == 1 })
	p2 := e.send(profile.TypeMessage, msg("m_no", "x"))
	close(release)
	for _, pid := range []string{p1, p2} {
		wantAck(t, e.ackOf(pid), profile.AckRejected, profile.CodeTargetDeliveryFailed)
	}
	e.target.SetAnswer(nil) // the target would take it now: the refusal still stands
	_, ack := e.final(msg("m_no", "x"))
	wantAck(t, ack, profile.AckRejected, profile.CodeTargetDeliveryFailed)
	if retryable(ack) {
		t.Fatal("a refusal for good answered retryable")
	}
	if n := len(e.target.MessageCalls()); n != 1 {
		t.Fatalf("target called %d times, want once: %s", n, dump(e.target.MessageCalls()))
	}
}

// edge-api §5.1, P-STATE-6: same message_id with different text or files is
// message_id_conflict, retryable false, target untouched.
func TestFinal_SameIDDifferentContentIsConflict(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	_, ack := e.final(msg("m_c", "one"))
	wantAck(t, ack, profile.AckAccepted, "")
	_, ack = e.final(msg("m_c", "two"))
	wantAck(t, ack, profile.AckRejected, profile.CodeMessageIDConflict)
	if retryable(ack) {
		t.Fatal("conflict must not be retryable")
	}
	if n := len(e.target.MessageCalls()); n != 1 {
		t.Fatalf("target called %d times", n)
	}
}

// edge-api §5.1: payloads are closed records; an invalid payload is rejected invalid_packet,
// retryable false, and the message names the field.
func TestFinal_InvalidPayloadRejectedNamingField(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	tests := []struct {
		name, field string
		payload     map[string]any
	}{
		{name: "unknown key", field: "extra", payload: map[string]any{"message_id": "m1", "text": "x", "extra": 1}},
		{name: "P-ID-2 session_id", field: "session_id", payload: map[string]any{"message_id": "m2", "text": "x", "session_id": "s"}},
		{name: "P-MSG-3 empty", field: "text", payload: map[string]any{"message_id": "m3"}},
		{name: "P-MSG-4 file type", field: "type", payload: map[string]any{"message_id": "m4", "files": []any{map[string]any{"type": "pdf", "file_ref": "f"}}}},
		{name: "download_url file scheme", field: "download_url", payload: map[string]any{"message_id": "m5", "files": []any{map[string]any{"type": "file", "file_ref": "f", "download_url": "file:///etc/passwd"}}}},
	}
	for _, tt := range tests {
		_, ack := e.final(tt.payload)
		wantAck(t, ack, profile.AckRejected, profile.CodeInvalidPacket)
		if retryable(ack) || !strings.Contains(ack.Message, tt.field) {
			t.Fatalf("%s: ack %+v should name %q and not be retryable", tt.name, ack, tt.field)
		}
	}
	if n := len(e.target.MessageCalls()); n != 0 {
		t.Fatalf("target called for invalid packets: %s", dump(e.target.MessageCalls()))
	}
}

// edge-api §5.1: no readable message_id: an error packet invalid_packet instead of an ack.
func TestFinal_NoMessageIDIsErrorPacket(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	pid := e.send(profile.TypeMessage, map[string]any{"text": "x"})
	p := e.errorOf(pid)
	if p.Code != profile.CodeInvalidPacket {
		t.Fatalf("error %+v", p)
	}
}

// edge-api §5.1: target failures map to codes and retryable.
func TestFinal_TargetFailureCodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	tests := []struct {
		status    int
		code      string
		retryable bool
	}{
		{429, profile.CodeTargetRateLimited, true},
		{500, profile.CodeTargetUnavailable, true},
		{503, profile.CodeTargetUnavailable, true},
		{401, profile.CodeTargetAuthFailed, false},
		{403, profile.CodeTargetAuthFailed, false},
		{400, profile.CodeTargetDeliveryFailed, false},
		{404, profile.CodeTargetDeliveryFailed, false},
	}
	for i, tt := range tests {
		status := tt.status
		e.target.SetAnswer(func(testkit.Call) int { return status })
		_, ack := e.final(msg(fmt.Sprintf("m_code_%d", i), "x"))
		wantAck(t, ack, profile.AckRejected, tt.code)
		if retryable(ack) != tt.retryable {
			t.Fatalf("%d: retryable = %v", tt.status, retryable(ack))
		}
	}
}

// edge-api §5.1: after a retryable rejection, a retransmission is processed afresh and accepted.
func TestFinal_RetransmissionAfterRetryableRejectionIsAccepted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.target.SetAnswer(func(testkit.Call) int { return 503 })
	_, ack := e.final(msg("m_retry", "x"))
	wantAck(t, ack, profile.AckRejected, profile.CodeTargetUnavailable)
	e.target.SetAnswer(nil)
	_, ack = e.final(msg("m_retry", "x"))
	wantAck(t, ack, profile.AckAccepted, "")
}

// edge-api §5.1: a channel's finals reach the target in the order xAgent sent them.
func TestFinal_ChannelOrderKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	const n = 50
	for i := 0; i < n; i++ {
		e.send(profile.TypeMessage, msg(fmt.Sprintf("m_%03d", i), fmt.Sprintf("text %03d", i)))
	}
	calls := e.waitCalls("all finals", func(c []testkit.Call) bool { return len(c) >= n })
	for i, c := range calls {
		if want := fmt.Sprintf("text %03d", i); c.Text() != want {
			t.Fatalf("call %d is %q, want %q", i, c.Text(), want)
		}
	}
}

// edge-api §5.1: a file_ref that is unknown, or uploaded for another channel, is file_not_found.
func TestFinal_UnknownOrForeignFileRefIsFileNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	other := "cch_other"
	if err := e.node.OpenChannel(other, e.target.Config("none", "none")); err != nil {
		t.Fatal(err)
	}
	foreign := upload(t, e.node, other, "a.txt", []byte("bytes"))
	for i, ref := range []string{"file_00000000000000000000000000000000", foreign} {
		_, ack := e.final(map[string]any{"message_id": fmt.Sprintf("m_f%d", i), "files": []any{map[string]any{"type": "file", "file_ref": ref}}})
		wantAck(t, ack, profile.AckRejected, profile.CodeFileNotFound)
		if retryable(ack) {
			t.Fatal("file_not_found must not be retryable")
		}
	}
	if n := len(e.target.MessageCalls()); n != 0 {
		t.Fatalf("target called: %s", dump(e.target.MessageCalls()))
	}
}

// edge-api §5.1: completed message_ids survive a restart: no final is delivered twice.
func TestFinal_CompletedIDsSurviveRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	_, ack := e.final(msg("m_persist", "once"))
	wantAck(t, ack, profile.AckAccepted, "")
	e.restart()
	_, ack = e.final(msg("m_persist", "once"))
	wantAck(t, ack, profile.AckDuplicate, "")
	_, ack = e.final(msg("m_persist", "changed"))
	wantAck(t, ack, profile.AckRejected, profile.CodeMessageIDConflict)
	if n := len(e.target.MessageCalls()); n != 1 {
		t.Fatalf("target called %d times", n)
	}
}

// P-ID-5, edge-api §5.1: an identical frame sent twice (same packet_id) is two transmissions and
// each is answered: once the message is accepted, every later arrival of it is a duplicate; the
// target is touched once.
func TestFinal_IdenticalFrameSentTwiceIsAnsweredTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	frame, err := testkit.Packet("pkt_same", e.channel, profile.TypeMessage, msg("m_same", "x"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{profile.AckAccepted, profile.AckDuplicate} {
		if err := e.agent.SendRaw(context.Background(), frame); err != nil {
			t.Fatal(err)
		}
		wantAck(t, e.ackOf("pkt_same"), want, "")
	}
	if n := len(e.target.MessageCalls()); n != 1 {
		t.Fatalf("target called %d times", n)
	}
}

// edge-api §5.1: every chat.message gets its ack, even when xAgent disconnected before the final
// was delivered: the ack waits (XIM_REPLIES) and is sent on the next connection, once.
func TestFinal_AckProducedWhileDisconnectedIsSentOnReconnect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	release := make(chan struct{})
	e.target.SetAnswer(func(testkit.Call) int { <-release; return 200 })
	pid := e.send(profile.TypeMessage, msg("m_away", "delivered while xAgent is away"))
	e.waitCalls("the final reached the target", func(calls []testkit.Call) bool { return len(calls) == 1 })
	e.agent.Close()
	poll(t, "the gateway saw the connection go", func() bool { return metric(t, e.node, "ximd_gateway_connections 0") })
	close(release)
	poll(t, "the ack found no connection and was queued", func() bool {
		return metric(t, e.node, `ximd_replies_total{outcome="queued"} 1`)
	})

	again := dial(t, e.node)
	env, err := again.Reply(pid, wait)
	if err != nil {
		t.Fatalf("no ack for the final after reconnecting: %v", err)
	}
	ack, err := testkit.AckOf(env)
	if err != nil {
		t.Fatal(err)
	}
	wantAck(t, ack, profile.AckAccepted, "")
	if env, quiet := again.Quiet(1500 * time.Millisecond); !quiet {
		t.Fatalf("after the queued ack, another packet: %s %s", env.Type, env.Payload)
	}
}
