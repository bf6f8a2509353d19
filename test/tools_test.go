package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// toolAnswer is a tool.result payload as xAgent reads it.
type toolAnswer struct {
	InvocationID string `json:"invocation_id"`
	OK           bool   `json:"ok"`
	Result       struct {
		TargetMessageID string `json:"target_message_id"`
		Reply           string `json:"reply"`
	} `json:"result"`
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
	} `json:"error"`
}

// invoke sends a tool.invoke and returns its one answer, a tool.result.
func (e *env) invoke(invocationID, tool string, args any) toolAnswer {
	e.t.Helper()
	return invokeOn(e, e.channel, invocationID, tool, args)
}

// invokeOn is invoke on another channel of e's node.
func invokeOn(e *env, channel, invocationID, tool string, args any) toolAnswer {
	e.t.Helper()
	pid := e.sendTo(channel, profile.TypeToolInvoke, map[string]any{"invocation_id": invocationID, "tool": tool, "arguments": args})
	env, err := e.agent.Reply(pid, wait)
	if err != nil {
		e.t.Fatal(err)
	}
	var r toolAnswer
	if env.Type != profile.TypeToolResult || json.Unmarshal(env.Payload, &r) != nil || r.InvocationID != invocationID {
		e.t.Fatalf("answer to %s: %s %s", invocationID, env.Type, env.Payload)
	}
	return r
}

func wantToolError(t *testing.T, r toolAnswer, code, field string) {
	t.Helper()
	if r.OK || r.Error.Code != code || !strings.Contains(r.Error.Message, field) {
		t.Fatalf("tool.result %+v, want %s naming %q", r, code, field)
	}
	if info, _ := profile.Lookup(code); r.Error.Retryable != info.Retryable {
		t.Fatalf("retryable %v, want the table's %v", r.Error.Retryable, info.Retryable)
	}
}

// edge-api §8: im.send_message is answered by exactly one tool.result carrying the target's
// message id; the webhook target gets one POST with the text, final, and idempotency_key
// <channel>:tool:<invocation_id>.
func TestTools_SendMessageRunsOnceWithOneResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{streaming: "none", activity: "none"})
	r := e.invoke("inv_send", profile.ToolSendMessage, map[string]any{"text": "hello from a tool"})
	if !r.OK || r.Result.TargetMessageID == "" {
		t.Fatalf("tool.result %+v", r)
	}
	calls := e.target.MessageCalls()
	if len(calls) != 1 || calls[0].Method != http.MethodPost || calls[0].Text() != "hello from a tool" || !calls[0].Final() ||
		calls[0].Body["idempotency_key"] != e.channel+":tool:inv_send" {
		t.Fatalf("target calls %s", dump(calls))
	}
	e.quiet(300 * time.Millisecond) // exactly one answer
}

// edge-api §8: the same invocation again (new packet, same tool and arguments, keys in another
// order) gets the first result again and touches nothing; other arguments under that id are
// invocation_id_conflict.
func TestTools_SameInvocationIsIdempotentOtherArgumentsConflict(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{streaming: "none", activity: "none"})
	first := e.invoke("inv_idem", profile.ToolReplyMessage, map[string]any{"text": "once", "reply_to_target_message_id": "tm-0"})
	again := e.invoke("inv_idem", profile.ToolReplyMessage, json.RawMessage(`{"reply_to_target_message_id":"tm-0","text":"once"}`))
	if !first.OK || !again.OK || again.Result != first.Result {
		t.Fatalf("first %+v, again %+v", first, again)
	}
	if n := len(e.target.MessageCalls()); n != 1 {
		t.Fatalf("the repeated invocation touched the target: %s", dump(e.target.MessageCalls()))
	}
	wantToolError(t, e.invoke("inv_idem", profile.ToolReplyMessage, map[string]any{"text": "twice", "reply_to_target_message_id": "tm-0"}), profile.CodeInvocationIDConflict, "inv_idem")
	wantToolError(t, e.invoke("inv_idem", profile.ToolSendMessage, map[string]any{"text": "once"}), profile.CodeInvocationIDConflict, "inv_idem")
	if n := len(e.target.MessageCalls()); n != 1 {
		t.Fatalf("a conflicting invocation touched the target: %s", dump(e.target.MessageCalls()))
	}
}

// edge-api §8: a tool that is not one of the Card's is tool_not_supported; arguments that fail the
// Card's input_schema are invalid_arguments naming the field; a bad file_ref is file_not_found;
// a tool.invoke payload that is not the closed record is invalid_packet. None touches the target.
func TestTools_RefusalsNameTheirCause(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{streaming: "none", activity: "none"})
	wantToolError(t, e.invoke("inv_u", "im.delete_chat", map[string]any{}), profile.CodeToolNotSupported, "im.delete_chat")
	wantToolError(t, e.invoke("inv_a1", profile.ToolSendMessage, map[string]any{"text": ""}), profile.CodeInvalidArguments, "arguments.text")
	wantToolError(t, e.invoke("inv_a2", profile.ToolSendMessage, map[string]any{"text": "x", "files": []any{map[string]any{"file_ref": 1}}}), profile.CodeInvalidArguments, "arguments.files[0].file_ref")
	wantToolError(t, e.invoke("inv_a3", profile.ToolReplyMessage, map[string]any{"text": "x"}), profile.CodeInvalidArguments, "reply_to_target_message_id")
	wantToolError(t, e.invoke("inv_a4", profile.ToolSendFile, map[string]any{"text": "no file"}), profile.CodeInvalidArguments, "files")
	wantToolError(t, e.invoke("inv_f", profile.ToolSendFile, map[string]any{"files": []any{map[string]any{"file_ref": "file_nope"}}}), profile.CodeFileNotFound, "arguments.files[0].file_ref")

	pid := e.send(profile.TypeToolInvoke, map[string]any{"invocation_id": "inv_p", "tool": profile.ToolSendMessage, "arguments": map[string]any{"text": "x"}, "session_id": "s"})
	env, err := e.agent.Reply(pid, wait)
	var r toolAnswer
	if err != nil || env.Type != profile.TypeToolResult || json.Unmarshal(env.Payload, &r) != nil {
		t.Fatalf("answer %v %s %s", err, env.Type, env.Payload)
	}
	wantToolError(t, r, profile.CodeInvalidPacket, "session_id")
	pid = e.send(profile.TypeToolInvoke, map[string]any{"tool": profile.ToolSendMessage, "arguments": map[string]any{"text": "x"}})
	if p := e.errorOf(pid); p.Code != profile.CodeInvalidPacket {
		t.Fatalf("no invocation_id: %+v, want an error packet invalid_packet", p)
	}
	if calls := e.target.MessageCalls(); len(calls) != 0 {
		t.Fatalf("a refused invocation touched the target: %s", dump(calls))
	}
}

// edge-api §8: im.reply_message on webhook passes reply_to_target_message_id (capability reply
// native); im.send_file sends files from the Transfer Plane as a final's are sent.
func TestTools_ReplyAndSendFile(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{streaming: "none", activity: "none"})
	r := e.invoke("inv_r", profile.ToolReplyMessage, map[string]any{"reply_to_target_message_id": "tm-user-7", "text": "answering that"})
	if !r.OK || r.Result.Reply != "" {
		t.Fatalf("reply: %+v", r)
	}
	ref := upload(t, e.node, e.channel, "report.pdf", []byte("%PDF-1.4 tiny"))
	r = e.invoke("inv_file", profile.ToolSendFile, map[string]any{"files": []any{map[string]any{"file_ref": ref}}, "text": "the report"})
	if !r.OK {
		t.Fatalf("send_file: %+v", r)
	}
	calls := e.target.MessageCalls()
	if len(calls) != 2 || calls[0].Body["reply_to_target_message_id"] != "tm-user-7" || calls[0].Text() != "answering that" {
		t.Fatalf("reply call %s", dump(calls))
	}
	files, _ := calls[1].Body["files"].([]any)
	f, _ := files[0].(map[string]any)
	if len(files) != 1 || f["file_ref"] != ref || f["filename"] != "report.pdf" || !strings.Contains(fmt.Sprint(f["url"]), "/files/refs/"+ref) || calls[1].Text() != "the report" {
		t.Fatalf("send_file call %s", dump(calls))
	}
	if _, has := calls[1].Body["reply_to_target_message_id"]; has {
		t.Fatalf("a plain send carries reply_to_target_message_id: %s", calls[1].Raw)
	}
}

// edge-api §8: a tool's message reaches the target after every final xAgent sent before the
// invoke, on one channel, however fast they come (200 pairs pipelined).
func TestTools_OrderedWithFinals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{streaming: "none", activity: "none"})
	const n = 200
	var pids []string
	for i := 0; i < n; i++ {
		pids = append(pids, e.send(profile.TypeMessage, msg(fmt.Sprintf("m_%03d", i), fmt.Sprintf("final %03d", i))))
		pids = append(pids, e.send(profile.TypeToolInvoke, map[string]any{"invocation_id": fmt.Sprintf("inv_%03d", i), "tool": profile.ToolSendMessage,
			"arguments": map[string]any{"text": fmt.Sprintf("tool %03d", i)}}))
	}
	for _, pid := range pids {
		if _, err := e.agent.Reply(pid, wait); err != nil {
			t.Fatal(err)
		}
	}
	calls := e.waitCalls("every message", func(c []testkit.Call) bool { return len(c) == 2*n })
	for i, c := range calls {
		want := fmt.Sprintf("final %03d", i/2)
		if i%2 == 1 {
			want = fmt.Sprintf("tool %03d", i/2)
		}
		if c.Text() != want {
			t.Fatalf("call %d is %q, want %q: out of order", i, c.Text(), want)
		}
	}
}

// edge-api §8, like a final: an invocation a crash interrupted between intent and outcome is never
// run twice. A target that can tell (webhook lookup) settles it: absent → run; otherwise it is
// answered delivery_outcome_unknown (retryable false), now and on every retransmission.
func TestTools_InterruptedInvocationIsNeverRunTwice(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{streaming: "none", activity: "none"})
	args := map[string]any{"text": "maybe sent"}
	interruptInvocation(t, e, "inv_doubt", profile.ToolSendMessage, args)
	for i := 0; i < 2; i++ {
		wantToolError(t, e.invoke("inv_doubt", profile.ToolSendMessage, args), profile.CodeDeliveryOutcomeUnknown, "inv_doubt")
	}
	if calls := e.target.MessageCalls(); len(calls) != 0 {
		t.Fatalf("an invocation in doubt was run: %s", dump(calls))
	}

	cfg := e.target.Config("none", "none")
	cfg["lookup"] = true
	if err := e.node.OpenChannel(e.channel+"_lk", cfg); err != nil {
		t.Fatal(err)
	}
	e.channel += "_lk"
	interruptInvocation(t, e, "inv_lookup", profile.ToolSendMessage, args)
	if r := e.invoke("inv_lookup", profile.ToolSendMessage, args); !r.OK {
		t.Fatalf("looked up and absent: %+v, want it run", r)
	}
	if calls := e.target.MessageCalls(); len(calls) != 1 || calls[0].Body["idempotency_key"] != e.channel+":tool:inv_lookup" {
		t.Fatalf("want one POST, got %s", dump(calls))
	}
}

// interruptInvocation leaves the record a worker killed between an invocation's intent and its
// outcome leaves behind.
func interruptInvocation(t *testing.T, e *env, invocationID, tool string, args any) {
	t.Helper()
	raw, _ := json.Marshal(args)
	key, _ := subjects.InvocationKey(e.channel, invocationID)
	putRecord(t, messageRecords(t, e), key, handlers.Record{State: handlers.StateDelivering, Digest: handlers.InvocationDigest(tool, raw), PacketID: "pkt_dead", Worker: "dead/0000"})
}
