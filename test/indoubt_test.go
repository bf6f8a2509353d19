package test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers"
	"github.com/ximd/ximd/handlers/adapter/webhook"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// messageRecords opens the node's message record bucket on a connection of its own (closed when
// the test ends), to leave there what a killed worker would.
func messageRecords(t *testing.T, e *env) jetstream.KeyValue {
	t.Helper()
	nc := e.natsConn()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), subjects.BucketMessages)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// putRecord stores rec under key in the message record bucket.
func putRecord(t *testing.T, kv jetstream.KeyValue, key string, rec handlers.Record) {
	t.Helper()
	b, _ := json.Marshal(rec)
	if _, err := kv.Put(context.Background(), key, b); err != nil {
		t.Fatal(err)
	}
}

// interrupt makes the message's record what a worker killed between the final's intent and its
// outcome leaves behind: state delivering (keeping the displayed message's target id).
func interrupt(t *testing.T, e *env, messageID string, text string, displayed bool) {
	t.Helper()
	kv := messageRecords(t, e)
	key, _ := subjects.MessageKey(e.channel, messageID)
	rec := handlers.Record{State: handlers.StateDelivering, Digest: profile.Message{MessageID: messageID, Text: text}.Digest(), PacketID: "pkt_dead"}
	if displayed { // the display handle is written once the target answered the streamed part
		poll(t, "the displayed message's record", func() bool {
			entry, err := kv.Get(context.Background(), key)
			var cur handlers.Record
			if err == nil && json.Unmarshal(entry.Value(), &cur) == nil {
				rec.TargetMessageID = cur.TargetMessageID
			}
			return rec.TargetMessageID != ""
		})
	}
	putRecord(t, kv, key, rec)
}

// P-STATE-8: a final interrupted after its message was displayed on an edit target is settled by
// applying the final edit again: an edit replaces the whole content, so the message is shown
// once, in full, and the retransmission is accepted.
func TestInDoubt_DisplayedMessageIsCompletedByItsEdit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{streaming: "edit"})
	e.send(profile.TypeDelta, delta("m_doubt", 1, "Hello"))
	e.waitCalls("the streamed part", func(calls []testkit.Call) bool { return len(calls) == 1 })
	interrupt(t, e, "m_doubt", "Hello world", true)
	_, ack := e.final(msg("m_doubt", "Hello world"))
	wantAck(t, ack, profile.AckAccepted, "")
	calls := e.target.MessageCalls()
	if len(calls) != 2 || calls[0].Method != http.MethodPost || calls[1].Method != http.MethodPatch || !calls[1].Final() || calls[1].Text() != "Hello world" {
		t.Fatalf("want the POST of the part and one final PATCH, got %s", dump(calls))
	}
	_, ack = e.final(msg("m_doubt", "Hello world"))
	wantAck(t, ack, profile.AckDuplicate, "")
	if n := len(e.target.MessageCalls()); n != 2 {
		t.Fatalf("the duplicate touched the target: %d calls", n)
	}
}

// P-STATE-8, P-ACK-3: a direct final interrupted between intent and outcome, on a target that
// cannot tell whether it has the message, is never sent again: rejected delivery_outcome_unknown,
// retryable false, now and on every retransmission.
func TestInDoubt_UndisplayedFinalIsNeverSentBlindly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{streaming: "none"})
	interrupt(t, e, "m_blind", "once", false)
	for i := 0; i < 2; i++ {
		_, ack := e.final(msg("m_blind", "once"))
		wantAck(t, ack, profile.AckRejected, profile.CodeDeliveryOutcomeUnknown)
		if retryable(ack) {
			t.Fatal("delivery_outcome_unknown must not be retryable")
		}
	}
	if calls := e.target.MessageCalls(); len(calls) != 0 {
		t.Fatalf("an in-doubt final was sent: %s", dump(calls))
	}
}

// P-STATE-8 with a target that can tell (adapter.Reconciler): on a webchat channel an interrupted
// final is looked up by its idempotency key; nothing there → it is delivered afresh and accepted,
// and a retransmission after that is a duplicate: shown once, never in doubt.
func TestInDoubt_WebchatLooksTheMessageUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.channel += "_wc" // a channel of its own, opened on webchat
	status, body, err := e.node.Do(http.MethodPut, "/v1/channels/"+e.channel, map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "webchat"},
	})
	if err != nil || status != http.StatusOK {
		t.Fatalf("PUT webchat channel: %d %s %v", status, body, err)
	}
	interrupt(t, e, "m_lookup", "asked, not guessed", false)
	_, ack := e.final(msg("m_lookup", "asked, not guessed"))
	wantAck(t, ack, profile.AckAccepted, "")
	_, ack = e.final(msg("m_lookup", "asked, not guessed"))
	wantAck(t, ack, profile.AckDuplicate, "")
}

// P-STATE-8 with a webhook target configured "dedupe": true (it shows one message per
// idempotency_key): an interrupted direct final is sent again with the same key, and accepted.
func TestInDoubt_DedupingWebhookIsSentAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{streaming: "none"})
	cfg := e.target.Config("none", "none")
	cfg["dedupe"] = true
	if err := e.node.OpenChannel(e.channel+"_dd", cfg); err != nil {
		t.Fatal(err)
	}
	e.channel += "_dd"
	interrupt(t, e, "m_dedupe", "the target dedupes", false)
	_, ack := e.final(msg("m_dedupe", "the target dedupes"))
	wantAck(t, ack, profile.AckAccepted, "")
	calls := e.target.MessageCalls()
	if len(calls) != 1 || calls[0].Method != http.MethodPost || calls[0].Body["idempotency_key"] != e.channel+":m_dedupe" {
		t.Fatalf("want one POST with the message's idempotency_key, got %s", dump(calls))
	}
}

// P-STATE-8 with a webhook target configured "lookup": true (edge-api §7.1): an interrupted
// direct final is looked up by its idempotency key. Absent → sent, and accepted; already shown
// with its final text (the crash came after the target's answer) → accepted without a call.
func TestInDoubt_WebhookLookup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{streaming: "none"})
	cfg := e.target.Config("none", "none")
	cfg["lookup"] = true
	if err := e.node.OpenChannel(e.channel+"_lk", cfg); err != nil {
		t.Fatal(err)
	}
	e.channel += "_lk"

	interrupt(t, e, "m_absent", "not there yet", false)
	_, ack := e.final(msg("m_absent", "not there yet"))
	wantAck(t, ack, profile.AckAccepted, "")
	calls := e.target.MessageCalls()
	if len(calls) != 1 || calls[0].Method != http.MethodPost || calls[0].Text() != "not there yet" {
		t.Fatalf("want one POST of the looked-up final, got %s", dump(calls))
	}

	// The target already shows the next one: as if the crash came between its answer and the
	// record of it.
	body, _ := json.Marshal(map[string]any{"chat_id": "room-1", "text": "already shown", "files": []any{}, "final": true, "idempotency_key": e.channel + ":m_shown"})
	req, _ := http.NewRequest(http.MethodPost, e.target.URL+"/messages", bytes.NewReader(body))
	req.Header.Set("X-Xim-Signature", webhook.Sign([]byte(e.target.Secret), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("showing the message at the target: %v %v", resp, err)
	}
	resp.Body.Close()
	interrupt(t, e, "m_shown", "already shown", false)
	lookups := e.target.Lookups()
	_, ack = e.final(msg("m_shown", "already shown"))
	wantAck(t, ack, profile.AckAccepted, "")
	if n := len(e.target.MessageCalls()); n != 2 {
		t.Fatalf("a final the target showed was sent again: %s", dump(e.target.MessageCalls()))
	}
	if e.target.Lookups() != lookups+1 {
		t.Fatalf("lookups %d, want %d", e.target.Lookups(), lookups+1)
	}
	_, ack = e.final(msg("m_shown", "already shown"))
	wantAck(t, ack, profile.AckDuplicate, "")
}

// A streamed part whose create call a dead process started and never recorded (record
// displaying, no target id): the final's intent is this process's, yet it never sends the final
// as a new message. With lookup the part is found and the final applied by a PATCH.
func TestInDoubt_UnrecordedPartOfADeadProcessIsEditedNotCreated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{streaming: "edit"})
	cfg := e.target.Config("edit", "none")
	cfg["lookup"] = true
	if err := e.node.OpenChannel(e.channel+"_up", cfg); err != nil {
		t.Fatal(err)
	}
	e.channel += "_up"
	// The dead process's part at the target…
	body, _ := json.Marshal(map[string]any{"chat_id": "room-1", "text": "Hel", "files": []any{}, "final": false, "idempotency_key": e.channel + ":m_part"})
	req, _ := http.NewRequest(http.MethodPost, e.target.URL+"/messages", bytes.NewReader(body))
	req.Header.Set("X-Xim-Signature", webhook.Sign([]byte(e.target.Secret), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("showing the part: %v %v", resp, err)
	}
	resp.Body.Close()
	// …and its record: displaying, the create's answer never recorded.
	key, _ := subjects.MessageKey(e.channel, "m_part")
	putRecord(t, messageRecords(t, e), key, handlers.Record{State: handlers.StateDisplaying, Worker: "dead/0000"})
	_, ack := e.final(msg("m_part", "Hello, whole"))
	wantAck(t, ack, profile.AckAccepted, "")
	calls := e.target.MessageCalls()
	if len(calls) != 2 || calls[1].Method != http.MethodPatch || !calls[1].Final() || calls[1].Text() != "Hello, whole" {
		t.Fatalf("want the dead process's POST and one final PATCH, got %s", dump(calls))
	}
}
