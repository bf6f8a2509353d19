package profile_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ximd/ximd/profile"
)

// The IM tools' arguments are checked against the same schema document the Card declares;
// a failure names the field.
func TestToolArguments(t *testing.T) {
	cat := profile.Default()
	if len(cat.Tools()) != 3 {
		t.Fatalf("tools %d, want 3", len(cat.Tools()))
	}
	if _, ok := cat.Tool("im.delete_everything"); ok {
		t.Fatal("an unknown tool was found")
	}
	for _, tc := range []struct {
		tool, args string
		field      string // "" when valid
	}{
		{profile.ToolSendMessage, `{"text":"hi"}`, ""},
		{profile.ToolSendMessage, `{"files":[{"file_ref":"f1"}]}`, ""},
		{profile.ToolSendMessage, `{}`, "arguments"},
		{profile.ToolSendMessage, `{"text":""}`, "arguments.text"},
		{profile.ToolSendMessage, `{"text":"hi","colour":"red"}`, "arguments"},
		{profile.ToolSendMessage, `{"text":"hi","files":[{"file_ref":7}]}`, "arguments.files[0].file_ref"},
		{profile.ToolSendMessage, `[]`, "arguments"},
		{profile.ToolReplyMessage, `{"reply_to_target_message_id":"tm-1","text":"yes"}`, ""},
		{profile.ToolReplyMessage, `{"text":"yes"}`, "arguments"},
		{profile.ToolReplyMessage, `{"reply_to_target_message_id":"","text":"yes"}`, "arguments.reply_to_target_message_id"},
		{profile.ToolSendFile, `{"files":[{"file_ref":"f1"}],"text":"caption"}`, ""},
		{profile.ToolSendFile, `{"files":[]}`, "arguments.files"},
		{profile.ToolSendFile, `{"text":"no file"}`, "arguments"},
	} {
		tool, ok := cat.Tool(tc.tool)
		if !ok {
			t.Fatalf("no tool %s", tc.tool)
		}
		err := tool.CheckArguments(json.RawMessage(tc.args))
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s %s: %v, want valid", tc.tool, tc.args, err)
		case tc.field != "" && (err == nil || err.Code != profile.CodeInvalidArguments || !strings.HasPrefix(err.Message, tc.field+":")):
			t.Errorf("%s %s: %v, want invalid_arguments naming %s", tc.tool, tc.args, err, tc.field)
		}
	}
}

// edge-api §8: the tool.invoke payload is a closed record; the P-ID-2 keys are refused; the
// arguments must be an object, kept as sent.
func TestDecodeToolInvoke(t *testing.T) {
	cat := profile.Default()
	ti, err := cat.DecodeToolInvoke(json.RawMessage(`{"invocation_id":"inv_1","tool":"im.send_message","arguments":{"text":"hi"}}`))
	if err != nil || ti.InvocationID != "inv_1" || ti.Tool != "im.send_message" || string(ti.Arguments) != `{"text":"hi"}` {
		t.Fatalf("DecodeToolInvoke = %+v, %v", ti, err)
	}
	for payload, field := range map[string]string{
		`{"tool":"im.send_message","arguments":{}}`:                                      "invocation_id",
		`{"invocation_id":"","tool":"im.send_message","arguments":{}}`:                   "invocation_id",
		`{"invocation_id":"` + strings.Repeat("x", 257) + `","tool":"t","arguments":{}}`: "invocation_id",
		`{"invocation_id":"i","arguments":{}}`:                                           "tool",
		`{"invocation_id":"i","tool":"t"}`:                                               "arguments",
		`{"invocation_id":"i","tool":"t","arguments":[]}`:                                "arguments",
		`{"invocation_id":"i","tool":"t","arguments":{},"extra":1}`:                      "extra",
		`{"invocation_id":"i","tool":"t","arguments":{},"session_id":"s"}`:               "session_id",
	} {
		_, err := cat.DecodeToolInvoke(json.RawMessage(payload))
		if profile.CodeOf(err) != profile.CodeInvalidPacket || !strings.HasPrefix(err.(*profile.Error).Message, field) {
			t.Errorf("%s: %v, want invalid_packet naming %s", payload, err, field)
		}
	}
}
