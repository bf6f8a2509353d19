package profile_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ximd/ximd/profile"
)

// decodeAs decodes raw as the payload of packetType travelling in direction d.
func decodeAs(cat *profile.Catalog, packetType string, d profile.Direction, raw string) (any, error) {
	switch packetType {
	case profile.TypeMessage:
		return cat.DecodeMessage([]byte(raw), d)
	case profile.TypeDelta:
		return cat.DecodeDelta([]byte(raw))
	case profile.TypeActivity:
		return cat.DecodeActivity([]byte(raw))
	case profile.TypeAck:
		return cat.DecodeAck([]byte(raw))
	}
	panic("no decoder for " + packetType)
}

type validateCase struct {
	name    string // starts with the rule it proves
	typ     string
	dir     profile.Direction // FromAgent when zero
	payload string
	wantErr string // "" or the code
	wantMsg string // substring of the message (the offending field, the rule)
}

const (
	msgT = profile.TypeMessage
	dltT = profile.TypeDelta
	actT = profile.TypeActivity
	ackT = profile.TypeAck
	inv  = profile.CodeInvalidPacket
)

func fileMsg(file string) string { return `{"message_id":"m","files":[` + file + `]}` }

func validateCases() []validateCase {
	long := func(n int) string { return strings.Repeat("a", n) }
	cases := []validateCase{
		// Payload shape.
		{name: "edge-5.1 payload null", typ: msgT, payload: `null`, wantErr: inv, wantMsg: "payload: must be a JSON object"},
		{name: "edge-5.1 payload array", typ: msgT, payload: `[]`, wantErr: inv, wantMsg: "payload: must be a JSON object"},
		{name: "edge-5.1 payload missing", typ: msgT, payload: ``, wantErr: inv, wantMsg: "payload"},
		{name: "edge-5.1 payload string", typ: dltT, payload: `"x"`, wantErr: inv, wantMsg: "payload: must be a JSON object"},
		{name: "edge-5.1 payload trailing data", typ: msgT, payload: `{"message_id":"m","text":"x"} {}`, wantErr: inv, wantMsg: "after the top-level value"},
		{name: "edge-5.1 payload broken JSON", typ: msgT, payload: `{"message_id":"m","text":"x",}`, wantErr: inv, wantMsg: "not valid JSON"},

		// Closed records (edge-api §5.1, §5.3).
		{name: "edge-5.1 closed message", typ: msgT, payload: `{"message_id":"m","text":"x","final":true}`, wantErr: inv, wantMsg: "final: unknown field; the payload is a closed record (edge-api §5.1)"},
		{name: "edge-5.1 closed file item", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","url":"https://h/x"}`), wantErr: inv, wantMsg: "files[0].url: unknown field"},
		{name: "P-MSG-8 file bytes key rejected", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","data":"aGVsbG8="}`), wantErr: inv, wantMsg: "files[0].data: unknown field"},
		{name: "edge-5.1 closed ack", typ: ackT, payload: `{"message_id":"m","status":"accepted","extra":1}`, wantErr: inv, wantMsg: "extra: unknown field"},
		{name: "edge-5.1 unknown key quoted", typ: msgT, payload: `{"message_id":"m","text":"x","a.b c":1}`, wantErr: inv, wantMsg: `"a.b c": unknown field`},

		// Duplicate keys.
		{name: "edge-5.1 duplicate message_id", typ: msgT, payload: `{"message_id":"m","message_id":"n","text":"x"}`, wantErr: inv, wantMsg: "message_id: duplicate key"},
		{name: "edge-5.1 duplicate key in file", typ: msgT, payload: fileMsg(`{"type":"file","type":"image","file_ref":"f"}`), wantErr: inv, wantMsg: "files[0].type: duplicate key"},
		{name: "P-DLT-2 duplicate sequence key", typ: dltT, payload: `{"message_id":"m","sequence":1,"sequence":2,"text":"x"}`, wantErr: inv, wantMsg: "sequence: duplicate key"},

		// P-ID-4 message_id.
		{name: "P-ID-4 message_id missing", typ: msgT, payload: `{"text":"x"}`, wantErr: inv, wantMsg: "message_id: required"},
		{name: "P-ID-4 message_id null is missing", typ: msgT, payload: `{"message_id":null,"text":"x"}`, wantErr: inv, wantMsg: "message_id: required"},
		{name: "P-ID-4 message_id empty", typ: msgT, payload: `{"message_id":"","text":"x"}`, wantErr: inv, wantMsg: "message_id: must not be empty"},
		{name: "P-ID-4 message_id number", typ: msgT, payload: `{"message_id":5,"text":"x"}`, wantErr: inv, wantMsg: "message_id: must be a string"},
		{name: "P-ID-4 message_id 256 bytes", typ: msgT, payload: `{"message_id":"` + long(256) + `","text":"x"}`},
		{name: "P-ID-4 message_id 257 bytes", typ: msgT, payload: `{"message_id":"` + long(257) + `","text":"x"}`, wantErr: inv, wantMsg: "message_id: must be at most 256 bytes"},
		{name: "P-ID-4 message_id invalid UTF-8", typ: msgT, payload: "{\"message_id\":\"m\xff\",\"text\":\"x\"}", wantErr: inv, wantMsg: "invalid UTF-8"},
		{name: "P-ID-4 message_id lone surrogate", typ: msgT, payload: `{"message_id":"m\ud800","text":"x"}`, wantErr: inv, wantMsg: "surrogate"},
		{name: "P-ID-4 delta message_id missing", typ: dltT, payload: `{"sequence":1,"text":"x"}`, wantErr: inv, wantMsg: "message_id: required"},
		{name: "P-ACK-1 ack message_id missing", typ: ackT, payload: `{"status":"accepted"}`, wantErr: inv, wantMsg: "message_id: required"},

		// P-MSG-3 text or files.
		{name: "P-MSG-3 text only", typ: msgT, payload: `{"message_id":"m","text":"x"}`},
		{name: "P-MSG-3 files only", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f"}`)},
		{name: "P-MSG-3 neither", typ: msgT, payload: `{"message_id":"m"}`, wantErr: inv, wantMsg: "text: text and files are both empty; at least one must be non-empty (P-MSG-3)"},
		{name: "P-MSG-3 both empty", typ: msgT, payload: `{"message_id":"m","text":"","files":[]}`, wantErr: inv, wantMsg: "(P-MSG-3)"},
		{name: "P-MSG-3 both null", typ: msgT, payload: `{"message_id":"m","text":null,"files":null}`, wantErr: inv, wantMsg: "(P-MSG-3)"},
		{name: "P-MSG-3 to agent", typ: msgT, dir: profile.ToAgent, payload: `{"message_id":"m","text":""}`, wantErr: inv, wantMsg: "(P-MSG-3)"},

		// P-MSG-4 file type enum.
		{name: "P-MSG-4 file type enum", typ: msgT, payload: `{"message_id":"m","files":[{"type":"image","file_ref":"a"},{"type":"document","file_ref":"b"}]}`, wantErr: inv, wantMsg: "files[1].type: must be one of image, video, audio, file (P-MSG-4)"},
		{name: "P-MSG-4 file type case sensitive", typ: msgT, payload: fileMsg(`{"type":"IMAGE","file_ref":"f"}`), wantErr: inv, wantMsg: "files[0].type: must be one of"},
		{name: "P-MSG-4 file type missing", typ: msgT, payload: fileMsg(`{"file_ref":"f"}`), wantErr: inv, wantMsg: "files[0].type: required (P-MSG-4)"},
		{name: "P-MSG-4 file type not string", typ: msgT, payload: fileMsg(`{"type":1,"file_ref":"f"}`), wantErr: inv, wantMsg: "files[0].type: must be a string"},
		{name: "P-MSG-4 all four types", typ: msgT, payload: `{"message_id":"m","files":[{"type":"image","file_ref":"1"},{"type":"video","file_ref":"2"},{"type":"audio","file_ref":"3"},{"type":"file","file_ref":"4"}]}`},

		// P-MSG-5 file_ref required and unique.
		{name: "P-MSG-5 file_ref missing", typ: msgT, payload: fileMsg(`{"type":"file"}`), wantErr: inv, wantMsg: "files[0].file_ref: required (P-MSG-5)"},
		{name: "P-MSG-5 file_ref empty", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":""}`), wantErr: inv, wantMsg: "files[0].file_ref: must not be empty"},
		{name: "P-MSG-5 file_ref 257 bytes", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"` + long(257) + `"}`), wantErr: inv, wantMsg: "files[0].file_ref: must be at most 256 bytes"},
		{name: "P-MSG-5 file_ref unique", typ: msgT, payload: `{"message_id":"m","files":[{"type":"file","file_ref":"a"},{"type":"file","file_ref":"b"},{"type":"image","file_ref":"a"}]}`, wantErr: inv, wantMsg: "files[2].file_ref: repeats files[0].file_ref; file_ref must be unique within the message (P-MSG-5)"},
		{name: "P-MSG-5 optional metadata", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","filename":"a.pdf","mime_type":"application/pdf","byte_size":0,"expires_at":1790000300000}`)},
		{name: "P-MSG-5 files not an array", typ: msgT, payload: `{"message_id":"m","files":{}}`, wantErr: inv, wantMsg: "files: must be an array"},
		{name: "P-MSG-5 file item not an object", typ: msgT, payload: `{"message_id":"m","files":["f"]}`, wantErr: inv, wantMsg: "files[0]: must be an object"},
		{name: "P-MSG-5 file item null", typ: msgT, payload: `{"message_id":"m","files":[null]}`, wantErr: inv, wantMsg: "files[0]: must be an object"},
		{name: "P-MSG-5 at most 256 files", typ: msgT, payload: manyFiles(257), wantErr: inv, wantMsg: "files: must have at most 256 items"},
		{name: "P-MSG-5 256 files", typ: msgT, payload: manyFiles(256)},

		// P-MSG-6 download_url Connector -> xAgent.
		{name: "P-MSG-6 to agent requires download_url", typ: msgT, dir: profile.ToAgent, payload: fileMsg(`{"type":"file","file_ref":"f"}`), wantErr: inv, wantMsg: "files[0].download_url: required in direction connector_to_xagent (P-MSG-6)"},
		{name: "P-MSG-6 to agent relative", typ: msgT, dir: profile.ToAgent, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"/files/refs/f"}`)},
		{name: "P-MSG-6 to agent other relative path", typ: msgT, dir: profile.ToAgent, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"/dl/f?x=1"}`)},
		{name: "P-MSG-6 to agent absolute https", typ: msgT, dir: profile.ToAgent, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"https://ximd.example/files/refs/f"}`)},
		{name: "P-MSG-6 to agent relative without slash", typ: msgT, dir: profile.ToAgent, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"files/refs/f"}`), wantErr: inv, wantMsg: "files[0].download_url: must be an absolute http(s) URL or a path starting with /"},
		{name: "P-MSG-6 to agent protocol-relative", typ: msgT, dir: profile.ToAgent, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"//evil.example/x"}`), wantErr: inv, wantMsg: "protocol-relative"},
		{name: "P-MSG-6 to agent empty", typ: msgT, dir: profile.ToAgent, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":""}`), wantErr: inv, wantMsg: "files[0].download_url: must not be empty"},
		{name: "P-MSG-7 from agent no download_url needed", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f"}`)},

		// P-MSG-8 and edge-api §5.1: download_url from xAgent.
		{name: "P-MSG-8 from agent files ref", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"/files/refs/f"}`)},
		{name: "P-MSG-8 from agent signed files ref", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"/files/refs/f?exp=1&sig=ab"}`)},
		{name: "P-MSG-8 from agent https", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"https://cdn.example/x.png"}`)},
		{name: "P-MSG-8 from agent HTTP upper case", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"HTTP://cdn.example/x.png"}`)},
		{name: "P-MSG-8 data URL", typ: msgT, payload: fileMsg(`{"type":"image","file_ref":"f","download_url":"data:image/png;base64,iVBORw0KGgo="}`), wantErr: inv, wantMsg: "files[0].download_url: data: URLs are not allowed"},
		{name: "P-MSG-8 data URL to agent", typ: msgT, dir: profile.ToAgent, payload: fileMsg(`{"type":"image","file_ref":"f","download_url":"DATA:text/plain,hi"}`), wantErr: inv, wantMsg: "data: URLs are not allowed"},
		{name: "P-MSG-8 file URL", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"file:///etc/passwd"}`), wantErr: inv, wantMsg: "file: URLs are not allowed"},
		{name: "P-MSG-8 local absolute path", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"/etc/passwd"}`), wantErr: inv, wantMsg: "a relative download_url must be /files/refs/{file_ref}"},
		{name: "P-MSG-8 files ref traversal", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"/files/refs/a/../../x"}`), wantErr: inv, wantMsg: "/files/refs/{file_ref}"},
		{name: "P-MSG-8 files ref empty", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"/files/refs/"}`), wantErr: inv, wantMsg: "/files/refs/{file_ref}"},
		{name: "P-MSG-8 windows path", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"C:\\Users\\a.png"}`), wantErr: inv, wantMsg: "backslashes"},
		{name: "P-MSG-8 windows path forward slashes", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"C:/Users/a.png"}`), wantErr: inv, wantMsg: `scheme "C" is not allowed`},
		{name: "P-MSG-8 relative dot path", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"../secret"}`), wantErr: inv, wantMsg: "path starting with /"},
		{name: "P-MSG-8 home path", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"~/a.png"}`), wantErr: inv, wantMsg: "path starting with /"},
		{name: "P-MSG-8 javascript URL", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"javascript:alert(1)"}`), wantErr: inv, wantMsg: "is not allowed"},
		{name: "P-MSG-8 ftp URL", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"ftp://h/x"}`), wantErr: inv, wantMsg: `scheme "ftp" is not allowed`},
		{name: "P-MSG-8 URL credentials", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"https://user:token@cdn.example/x"}`), wantErr: inv, wantMsg: "must not carry credentials (P-MSG-8)"},
		{name: "P-MSG-8 URL without host", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"https:///x"}`), wantErr: inv, wantMsg: "needs a host"},
		{name: "P-MSG-8 URL with space", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","download_url":"https://h/a b"}`), wantErr: inv, wantMsg: "spaces"},
		{name: "P-MSG-8 filename path", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","filename":"/home/u/a.png"}`), wantErr: inv, wantMsg: "files[0].filename: must be a bare file name, not a path (P-MSG-8)"},
		{name: "P-MSG-8 filename windows path", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","filename":"C:\\a.png"}`), wantErr: inv, wantMsg: "not a path"},
		{name: "P-MSG-8 filename dotdot", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","filename":".."}`), wantErr: inv, wantMsg: "not a path"},
		{name: "P-MSG-8 filename control", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","filename":"a\nb"}`), wantErr: inv, wantMsg: "control characters"},
		{name: "P-MSG-8 filename unicode ok", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","filename":"报告 v1.pdf"}`)},
		{name: "P-MSG-8 filename too long", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","filename":"` + long(1025) + `"}`), wantErr: inv, wantMsg: "at most 1024 bytes"},

		// Text.
		{name: "P-MSG-11 text invalid UTF-8", typ: msgT, payload: "{\"message_id\":\"m\",\"text\":\"a\xc3\"}", wantErr: inv, wantMsg: "invalid UTF-8"},
		{name: "P-MSG-11 text lone low surrogate", typ: msgT, payload: `{"message_id":"m","text":"\udc00"}`, wantErr: inv, wantMsg: "surrogate"},
		{name: "P-MSG-11 text control character raw", typ: msgT, payload: "{\"message_id\":\"m\",\"text\":\"a\tb\"}", wantErr: inv, wantMsg: "control character"},
		{name: "P-MSG-11 text not a string", typ: msgT, payload: `{"message_id":"m","text":["x"]}`, wantErr: inv, wantMsg: "text: must be a string"},

		// Integers.
		{name: "profile-5 created_at float", typ: msgT, payload: `{"message_id":"m","text":"x","created_at":1.5}`, wantErr: inv, wantMsg: "created_at: must be an integer"},
		{name: "profile-5 created_at 1.0", typ: msgT, payload: `{"message_id":"m","text":"x","created_at":1.0}`, wantErr: inv, wantMsg: "created_at: must be an integer"},
		{name: "profile-5 created_at exponent", typ: msgT, payload: `{"message_id":"m","text":"x","created_at":1e3}`, wantErr: inv, wantMsg: "created_at: must be an integer"},
		{name: "profile-5 created_at string", typ: msgT, payload: `{"message_id":"m","text":"x","created_at":"1790000000000"}`, wantErr: inv, wantMsg: "created_at: must be an integer"},
		{name: "profile-5 created_at negative", typ: msgT, payload: `{"message_id":"m","text":"x","created_at":-1}`, wantErr: inv, wantMsg: "created_at: must be at least 0"},
		{name: "profile-5 byte_size overflow", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","byte_size":9223372036854775808}`), wantErr: inv, wantMsg: "files[0].byte_size: must be an integer"},
		{name: "profile-5 byte_size max int64", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","byte_size":9223372036854775807}`)},
		{name: "profile-5 expires_at bool", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","expires_at":true}`), wantErr: inv, wantMsg: "files[0].expires_at: must be an integer"},

		// P-DLT-1 sequence.
		{name: "P-DLT-1 sequence 1", typ: dltT, payload: `{"message_id":"a","sequence":1,"text":"x"}`},
		{name: "P-DLT-1 sequence 2 (order is the caller's state)", typ: dltT, payload: `{"message_id":"a","sequence":2,"text":"x"}`},
		{name: "P-DLT-1 sequence 0", typ: dltT, payload: `{"message_id":"a","sequence":0,"text":"x"}`, wantErr: inv, wantMsg: "sequence: must be at least 1 (P-DLT-1)"},
		{name: "P-DLT-1 sequence negative", typ: dltT, payload: `{"message_id":"a","sequence":-3,"text":"x"}`, wantErr: inv, wantMsg: "sequence: must be at least 1"},
		{name: "P-DLT-1 sequence 1.0", typ: dltT, payload: `{"message_id":"a","sequence":1.0,"text":"x"}`, wantErr: inv, wantMsg: "sequence: must be an integer (P-DLT-1)"},
		{name: "P-DLT-1 sequence exponent", typ: dltT, payload: `{"message_id":"a","sequence":1e0,"text":"x"}`, wantErr: inv, wantMsg: "sequence: must be an integer"},
		{name: "P-DLT-1 sequence string", typ: dltT, payload: `{"message_id":"a","sequence":"1","text":"x"}`, wantErr: inv, wantMsg: "sequence: must be an integer"},
		{name: "P-DLT-1 sequence missing", typ: dltT, payload: `{"message_id":"a","text":"x"}`, wantErr: inv, wantMsg: "sequence: required (P-DLT-1)"},
		{name: "P-DLT-1 sequence null", typ: dltT, payload: `{"message_id":"a","sequence":null,"text":"x"}`, wantErr: inv, wantMsg: "sequence: required"},

		// P-DLT-5 text only.
		{name: "P-DLT-5 delta files", typ: dltT, payload: `{"message_id":"a","sequence":1,"text":"x","files":[]}`, wantErr: inv, wantMsg: "files: unknown field; the payload is a closed record (P-DLT-5)"},
		{name: "P-DLT-5 delta extra key", typ: dltT, payload: `{"message_id":"a","sequence":1,"text":"x","final":false}`, wantErr: inv, wantMsg: "final: unknown field"},
		{name: "P-DLT-5 delta text empty", typ: dltT, payload: `{"message_id":"a","sequence":1,"text":""}`, wantErr: inv, wantMsg: "text: must not be empty (P-DLT-5)"},
		{name: "P-DLT-5 delta text missing", typ: dltT, payload: `{"message_id":"a","sequence":1}`, wantErr: inv, wantMsg: "text: required (P-DLT-5)"},
		{name: "P-DLT-5 delta text number", typ: dltT, payload: `{"message_id":"a","sequence":1,"text":1}`, wantErr: inv, wantMsg: "text: must be a string"},

		// P-ACT-1 status.
		{name: "P-ACT-1 thinking", typ: actT, payload: `{"status":"thinking"}`},
		{name: "P-ACT-1 idle", typ: actT, payload: `{"status":"idle"}`},
		{name: "P-ACT-1 status enum", typ: actT, payload: `{"status":"typing"}`, wantErr: inv, wantMsg: "status: must be one of thinking, tool, idle (P-ACT-1)"},
		{name: "P-ACT-1 status missing", typ: actT, payload: `{}`, wantErr: inv, wantMsg: "status: required (P-ACT-1)"},
		{name: "P-ACT-1 status case", typ: actT, payload: `{"status":"Thinking"}`, wantErr: inv, wantMsg: "status: must be one of"},

		// P-ACT-2 tool_name.
		{name: "P-ACT-2 tool with name", typ: actT, payload: `{"status":"tool","tool_name":"web_search"}`},
		{name: "P-ACT-2 tool without name", typ: actT, payload: `{"status":"tool"}`, wantErr: inv, wantMsg: "tool_name: required when status is tool (P-ACT-2)"},
		{name: "P-ACT-2 tool with empty name", typ: actT, payload: `{"status":"tool","tool_name":""}`, wantErr: inv, wantMsg: "tool_name: must not be empty (P-ACT-2)"},
		{name: "P-ACT-2 thinking with name", typ: actT, payload: `{"status":"thinking","tool_name":"x"}`, wantErr: inv, wantMsg: "tool_name: must be absent unless status is tool (P-ACT-2)"},
		{name: "P-ACT-2 idle with null name", typ: actT, payload: `{"status":"idle","tool_name":null}`},
		{name: "P-ACT-2 name 256 bytes", typ: actT, payload: `{"status":"tool","tool_name":"` + long(256) + `"}`},
		{name: "P-ACT-2 name 257 bytes", typ: actT, payload: `{"status":"tool","tool_name":"` + long(257) + `"}`, wantErr: inv, wantMsg: "tool_name: must be at most 256 bytes (P-ACT-2)"},
		{name: "P-ACT-2 name multi-byte counted in bytes", typ: actT, payload: `{"status":"tool","tool_name":"` + strings.Repeat("工", 86) + `"}`, wantErr: inv, wantMsg: "at most 256 bytes"},

		// P-ACT-3 nothing else.
		{name: "P-ACT-3 reasoning", typ: actT, payload: `{"status":"thinking","reasoning":"..."}`, wantErr: inv, wantMsg: "reasoning: unknown field; the payload is a closed record (P-ACT-3)"},
		{name: "P-ACT-3 arguments", typ: actT, payload: `{"status":"tool","tool_name":"t","arguments":{}}`, wantErr: inv, wantMsg: "arguments: unknown field"},
		{name: "P-ACT-3 url", typ: actT, payload: `{"status":"idle","url":"https://x"}`, wantErr: inv, wantMsg: "url: unknown field"},

		// Ack (profile §7).
		{name: "profile-7 ack accepted", typ: ackT, payload: `{"message_id":"m","status":"accepted"}`},
		{name: "profile-7 ack duplicate", typ: ackT, payload: `{"message_id":"m","status":"duplicate"}`},
		{name: "profile-7 ack rejected", typ: ackT, payload: `{"message_id":"m","status":"rejected","code":"x","retryable":false,"message":"m"}`},
		{name: "profile-7 ack rejected code not in our table", typ: ackT, payload: `{"message_id":"m","status":"rejected","code":"brain_busy","retryable":true}`},
		{name: "profile-7 ack status enum", typ: ackT, payload: `{"message_id":"m","status":"ok"}`, wantErr: inv, wantMsg: "status: must be one of accepted, duplicate, rejected"},
		{name: "profile-7 ack rejected needs code", typ: ackT, payload: `{"message_id":"m","status":"rejected","retryable":false}`, wantErr: inv, wantMsg: "code: required when status is rejected (profile §7)"},
		{name: "profile-7 ack rejected needs retryable", typ: ackT, payload: `{"message_id":"m","status":"rejected","code":"x"}`, wantErr: inv, wantMsg: "retryable: required when status is rejected"},
		{name: "profile-7 ack retryable not bool", typ: ackT, payload: `{"message_id":"m","status":"rejected","code":"x","retryable":"false"}`, wantErr: inv, wantMsg: "retryable: must be true or false"},
		{name: "profile-7 ack code empty", typ: ackT, payload: `{"message_id":"m","status":"rejected","code":"","retryable":false}`, wantErr: inv, wantMsg: "code: must not be empty"},
	}
	// P-ID-2: every forbidden key, in every payload and in a nested file item.
	for _, k := range []string{"session_id", "user_connector_id", "user_id", "connector_id", "role"} {
		want := k + ": must not appear in a payload (P-ID-2)"
		cases = append(cases,
			validateCase{name: "P-ID-2 " + k + " in message", typ: msgT, payload: `{"message_id":"m","text":"x","` + k + `":"v"}`, wantErr: inv, wantMsg: want},
			validateCase{name: "P-ID-2 " + k + " in message to agent", typ: msgT, dir: profile.ToAgent, payload: `{"` + k + `":"v","message_id":"m","text":"x"}`, wantErr: inv, wantMsg: want},
			validateCase{name: "P-ID-2 " + k + " in file", typ: msgT, payload: fileMsg(`{"type":"file","file_ref":"f","` + k + `":1}`), wantErr: inv, wantMsg: "files[0]." + want},
			validateCase{name: "P-ID-2 " + k + " in delta", typ: dltT, payload: `{"message_id":"m","sequence":1,"text":"x","` + k + `":null}`, wantErr: inv, wantMsg: want},
			validateCase{name: "P-ID-2 " + k + " in activity", typ: actT, payload: `{"status":"idle","` + k + `":"v"}`, wantErr: inv, wantMsg: want},
			validateCase{name: "P-ID-2 " + k + " in ack", typ: ackT, payload: `{"message_id":"m","status":"accepted","` + k + `":"v"}`, wantErr: inv, wantMsg: want},
		)
	}
	return cases
}

func manyFiles(n int) string {
	var b strings.Builder
	b.WriteString(`{"message_id":"m","files":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"file","file_ref":"f%d"}`, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// TestValidate runs every payload rule: each case is named after the requirement it proves and
// fails if that rule is broken or if a valid payload is refused.
func TestValidate(t *testing.T) {
	cat := profile.Default()
	seen := map[string]bool{}
	for _, tc := range validateCases() {
		if seen[tc.name] {
			t.Fatalf("duplicate case name %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			d := tc.dir
			if d == 0 {
				d = profile.FromAgent
			}
			_, err := decodeAs(cat, tc.typ, d, tc.payload)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var pe *profile.Error
			if !errors.As(err, &pe) {
				t.Fatalf("want *profile.Error %s, got %v", tc.wantErr, err)
			}
			if pe.Code != tc.wantErr || pe.Retryable {
				t.Fatalf("got code %s retryable %v, want %s not retryable (%v)", pe.Code, pe.Retryable, tc.wantErr, pe)
			}
			if !strings.Contains(pe.Message, tc.wantMsg) {
				t.Fatalf("message %q does not contain %q", pe.Message, tc.wantMsg)
			}
		})
	}
}

func TestDecodeMessageValues(t *testing.T) {
	cat := profile.Default()
	raw := `{"message_id":"m\u00e9","text":"a\nb \ud83d\ude00 \"q\" \/","created_at":1790000000000,
	  "files":[{"type":"image","file_ref":"f1","filename":"p.png","mime_type":"image/png","byte_size":155000,
	  "expires_at":1790000300000,"download_url":"/files/refs/f1"},{"type":"file","file_ref":"f2","download_url":null}]}`
	m, err := cat.DecodeMessage([]byte(raw), profile.FromAgent)
	if err != nil {
		t.Fatal(err)
	}
	want := profile.Message{
		MessageID: "mé",
		Text:      "a\nb 😀 \"q\" /",
		CreatedAt: 1790000000000,
		Files: []profile.File{
			{Type: "image", FileRef: "f1", Filename: "p.png", MimeType: "image/png", ByteSize: 155000, ExpiresAt: 1790000300000, DownloadURL: "/files/refs/f1"},
			{Type: "file", FileRef: "f2"},
		},
	}
	if fmt.Sprintf("%#v", m) != fmt.Sprintf("%#v", want) {
		t.Fatalf("got  %#v\nwant %#v", m, want)
	}

	m, err = cat.DecodeMessage([]byte(`{"message_id":"m","text":"x","files":[]}`), profile.FromAgent)
	if err != nil || m.Files != nil {
		t.Fatalf("empty files: got %#v, %v; want nil Files", m.Files, err)
	}
}

func TestDecodeMessageInvalidDirection(t *testing.T) {
	_, err := profile.Default().DecodeMessage([]byte(`{"message_id":"m","text":"x"}`), 0)
	if profile.CodeOf(err) != profile.CodeInternal {
		t.Fatalf("got %v, want internal_error", err)
	}
}

func TestDecodeDeltaActivityAckValues(t *testing.T) {
	cat := profile.Default()
	d, err := cat.DecodeDelta([]byte(`{"text":"hé","sequence":9223372036854775807,"message_id":"a1"}`))
	if err != nil || d != (profile.Delta{MessageID: "a1", Sequence: 9223372036854775807, Text: "hé"}) {
		t.Fatalf("delta = %+v, %v", d, err)
	}
	a, err := cat.DecodeActivity([]byte(` { "status" : "tool" , "tool_name" : "web_search" } `))
	if err != nil || a != (profile.Activity{Status: profile.ActivityTool, ToolName: "web_search"}) {
		t.Fatalf("activity = %+v, %v", a, err)
	}
	ack, err := cat.DecodeAck([]byte(`{"message_id":"m","status":"rejected","code":"target_delivery_failed","message":"no","retryable":false}`))
	if err != nil || ack.Retryable == nil || *ack.Retryable || ack.Code != "target_delivery_failed" || ack.Message != "no" || ack.Status != profile.AckRejected {
		t.Fatalf("ack = %+v, %v", ack, err)
	}
	ack, err = cat.DecodeAck([]byte(`{"message_id":"m","status":"accepted"}`))
	if err != nil || ack.Retryable != nil || ack != profile.Accepted("m") {
		t.Fatalf("ack = %+v, %v", ack, err)
	}
}

func TestMessageIDOf(t *testing.T) {
	tests := []struct {
		name, raw, want string
	}{
		{"readable in an invalid message", `{"message_id":"msg_1","files":[{"type":"bogus"}],"session_id":"s"}`, "msg_1"},
		{"escaped", `{"text":1,"message_id":"m\u00e9"}`, "mé"},
		{"too long is still read (the ack echoes it, P-ACK-1)", `{"message_id":"` + strings.Repeat("x", 300) + `"}`, strings.Repeat("x", 300)},
		{"absent", `{"text":"x"}`, ""},
		{"not a string", `{"message_id":5}`, ""},
		{"empty", `{"message_id":""}`, ""},
		{"twice is ambiguous", `{"message_id":"a","message_id":"b"}`, ""},
		{"twice, second not a string", `{"message_id":"a","message_id":1}`, ""},
		{"not an object", `["message_id"]`, ""},
		{"not JSON", `{"message_id":"a"`, ""},
		{"nil", ``, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := profile.MessageIDOf([]byte(tc.raw)); got != tc.want {
				t.Fatalf("MessageIDOf = %q, want %q", got, tc.want)
			}
		})
	}
}
