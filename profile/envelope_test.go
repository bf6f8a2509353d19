package profile_test

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/profile"
)

func TestDecodeEnvelope(t *testing.T) {
	const ok = `{"schema":"xagent.connector.packet/v1","packet_id":"pkt_1","reply_to":"pkt_0","connector_channel_id":"cch_123","type":"chat.message","time":1790000000000,"payload":{"message_id":"m","text":"x"}}`
	tests := []struct {
		name    string
		frame   string
		wantErr string
		want    profile.Envelope // compared in full, Payload included
	}{
		{name: "edge-5 valid", frame: ok, want: profile.Envelope{
			Schema: profile.Schema, PacketID: "pkt_1", ReplyTo: "pkt_0", ChannelID: "cch_123",
			Type: "chat.message", Time: 1790000000000, Payload: json.RawMessage(`{"message_id":"m","text":"x"}`)}},
		{name: "edge-5 white space and member order", frame: "\n { \"payload\" : [ 1 , {} ] ,\"type\":\"x\", \"packet_id\" :\"p\",\t\"schema\":\"xagent.connector.packet/v1\" } \r\n",
			want: profile.Envelope{Schema: profile.Schema, PacketID: "p", Type: "x", Payload: json.RawMessage(`[ 1 , {} ]`)}},
		{name: "edge-5 unknown members ignored", frame: `{"schema":"xagent.connector.packet/v1","packet_id":"p","type":"t","ext":{"a":[1,2,{"b":null}]},"v":2}`,
			want: profile.Envelope{Schema: profile.Schema, PacketID: "p", Type: "t"}},
		{name: "edge-5 null members are absent", frame: `{"schema":"xagent.connector.packet/v1","packet_id":"p","type":"t","reply_to":null,"time":null,"connector_channel_id":null}`,
			want: profile.Envelope{Schema: profile.Schema, PacketID: "p", Type: "t"}},
		{name: "edge-5 payload null is absent", frame: `{"schema":"xagent.connector.packet/v1","packet_id":"p","type":"t","payload":null}`,
			want: profile.Envelope{Schema: profile.Schema, PacketID: "p", Type: "t"}},
		{name: "edge-5 escaped strings", frame: `{"schema":"xagent.connector.packet\/v1","packet_id":"p\u00e9","type":"chat.activity"}`,
			want: profile.Envelope{Schema: profile.Schema, PacketID: "pé", Type: "chat.activity"}},
		{name: "edge-5 negative time", frame: `{"schema":"xagent.connector.packet/v1","packet_id":"p","type":"t","time":-1}`,
			want: profile.Envelope{Schema: profile.Schema, PacketID: "p", Type: "t", Time: -1}},

		{name: "edge-5 empty frame", frame: ``, wantErr: profile.CodeInvalidPacket},
		{name: "edge-5 not JSON", frame: `hello`, wantErr: profile.CodeInvalidPacket},
		{name: "edge-5 JSON array", frame: `[]`, wantErr: profile.CodeInvalidPacket},
		{name: "edge-5 JSON string", frame: `"x"`, wantErr: profile.CodeInvalidPacket},
		{name: "edge-5 BOM", frame: "\ufeff" + ok, wantErr: profile.CodeInvalidPacket},
		{name: "edge-5 trailing data", frame: ok + `x`, wantErr: profile.CodeInvalidPacket,
			want: profile.Envelope{Schema: profile.Schema, PacketID: "pkt_1", ReplyTo: "pkt_0", ChannelID: "cch_123",
				Type: "chat.message", Time: 1790000000000, Payload: json.RawMessage(`{"message_id":"m","text":"x"}`)}},
		{name: "edge-5 two objects", frame: ok + ok, wantErr: profile.CodeInvalidPacket,
			want: profile.Envelope{Schema: profile.Schema, PacketID: "pkt_1", ReplyTo: "pkt_0", ChannelID: "cch_123",
				Type: "chat.message", Time: 1790000000000, Payload: json.RawMessage(`{"message_id":"m","text":"x"}`)}},
		{name: "edge-5 truncated after packet_id", frame: `{"schema":"xagent.connector.packet/v1","packet_id":"pkt_1","connector_channel_id":"c1","type":"chat.message","payload":{"message_id":"m","text":"x`,
			wantErr: profile.CodeInvalidPacket,
			want:    profile.Envelope{Schema: profile.Schema, PacketID: "pkt_1", ChannelID: "c1", Type: "chat.message"}},
		{name: "edge-5 broken payload", frame: `{"packet_id":"p","payload":{"a":tru},"type":"t","schema":"xagent.connector.packet/v1"}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{PacketID: "p"}},
		{name: "edge-5 no packet_id", frame: `{"schema":"xagent.connector.packet/v1","connector_channel_id":"c1","type":"chat.message","payload":{}}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{Schema: profile.Schema, ChannelID: "c1", Type: "chat.message", Payload: json.RawMessage(`{}`)}},
		{name: "edge-5 empty packet_id", frame: `{"schema":"xagent.connector.packet/v1","packet_id":"","type":"t"}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{Schema: profile.Schema, Type: "t"}},
		{name: "edge-5 no type", frame: `{"schema":"xagent.connector.packet/v1","packet_id":"p","connector_channel_id":"c1"}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{Schema: profile.Schema, PacketID: "p", ChannelID: "c1"}},
		{name: "edge-5 no type beats bad schema", frame: `{"schema":"other","packet_id":"p"}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{Schema: "other", PacketID: "p"}},
		{name: "edge-5 packet_id number", frame: `{"schema":"xagent.connector.packet/v1","packet_id":1,"type":"t"}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{Schema: profile.Schema}},
		{name: "edge-5 type object", frame: `{"packet_id":"p","type":{}}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{PacketID: "p"}},
		{name: "edge-5 channel id number", frame: `{"packet_id":"p","type":"t","connector_channel_id":7}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{PacketID: "p", Type: "t"}},
		{name: "edge-5 time float", frame: `{"packet_id":"p","type":"t","time":1.5}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{PacketID: "p", Type: "t"}},
		{name: "edge-5 time string", frame: `{"packet_id":"p","type":"t","time":"1"}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{PacketID: "p", Type: "t"}},
		{name: "edge-5 time overflow", frame: `{"packet_id":"p","type":"t","time":99999999999999999999}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{PacketID: "p", Type: "t"}},
		{name: "edge-5 duplicate packet_id", frame: `{"packet_id":"a","packet_id":"b","type":"t","schema":"xagent.connector.packet/v1"}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{PacketID: "a"}},
		{name: "edge-5 duplicate payload", frame: `{"schema":"xagent.connector.packet/v1","packet_id":"p","type":"t","payload":{},"payload":{}}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{Schema: profile.Schema, PacketID: "p", Type: "t", Payload: json.RawMessage(`{}`)}},
		{name: "edge-5 duplicate unknown member", frame: `{"schema":"xagent.connector.packet/v1","packet_id":"p","type":"t","x":1,"x":2}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{Schema: profile.Schema, PacketID: "p", Type: "t"}},
		{name: "edge-5 packet_id too long", frame: `{"packet_id":"` + strings.Repeat("p", 257) + `","type":"t"}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{PacketID: strings.Repeat("p", 257)}},
		{name: "edge-5 packet_id control character", frame: `{"packet_id":"a\r\nNats-Msg-Id: x","type":"t"}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{PacketID: "a\r\nNats-Msg-Id: x"}},
		{name: "edge-5 reply_to control character", frame: `{"packet_id":"p","reply_to":"a\u0000","type":"t"}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{PacketID: "p", ReplyTo: "a\x00"}},
		{name: "edge-5 invalid UTF-8 in unknown member", frame: "{\"packet_id\":\"p\",\"type\":\"t\",\"x\":\"\xff\"}",
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{PacketID: "p", Type: "t"}},
		{name: "edge-5 lone surrogate in payload", frame: `{"packet_id":"p","type":"t","payload":{"text":"\ud800x"}}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{PacketID: "p", Type: "t"}},
		{name: "edge-5 nesting too deep", frame: `{"packet_id":"p","type":"t","payload":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{PacketID: "p", Type: "t"}},
		{name: "edge-5 nesting at the limit", frame: `{"schema":"xagent.connector.packet/v1","packet_id":"p","type":"t","payload":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}`,
			want: profile.Envelope{Schema: profile.Schema, PacketID: "p", Type: "t", Payload: json.RawMessage(strings.Repeat("[", 63) + strings.Repeat("]", 63))}},
		{name: "edge-5 leading zero", frame: `{"packet_id":"p","type":"t","time":01}`,
			wantErr: profile.CodeInvalidPacket, want: profile.Envelope{PacketID: "p", Type: "t"}},

		{name: "edge-5 other schema", frame: strings.Replace(ok, "packet/v1", "packet/v2", 1), wantErr: profile.CodeUnsupportedSchema,
			want: profile.Envelope{Schema: "xagent.connector.packet/v2", PacketID: "pkt_1", ReplyTo: "pkt_0", ChannelID: "cch_123",
				Type: "chat.message", Time: 1790000000000, Payload: json.RawMessage(`{"message_id":"m","text":"x"}`)}},
		{name: "edge-5 schema missing", frame: `{"packet_id":"p","type":"t","connector_channel_id":"c"}`, wantErr: profile.CodeUnsupportedSchema,
			want: profile.Envelope{PacketID: "p", Type: "t", ChannelID: "c"}},
		{name: "edge-5 schema not a string", frame: `{"schema":1,"packet_id":"p","type":"t"}`, wantErr: profile.CodeInvalidPacket,
			want: profile.Envelope{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, err := profile.DecodeEnvelope([]byte(tc.frame))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
			} else {
				var pe *profile.Error
				if !errors.As(err, &pe) || pe.Code != tc.wantErr {
					t.Fatalf("err = %v, want code %s", err, tc.wantErr)
				}
				if pe.Retryable {
					t.Fatalf("%s must not be retryable", pe.Code)
				}
			}
			if env.Schema != tc.want.Schema || env.PacketID != tc.want.PacketID || env.ReplyTo != tc.want.ReplyTo ||
				env.ChannelID != tc.want.ChannelID || env.Type != tc.want.Type || env.Time != tc.want.Time ||
				string(env.Payload) != string(tc.want.Payload) {
				t.Fatalf("envelope = %+v (payload %q)\nwant       %+v (payload %q)", env, env.Payload, tc.want, tc.want.Payload)
			}
		})
	}
}

func TestDecodeEnvelopeMessages(t *testing.T) {
	_, err := profile.DecodeEnvelope([]byte(`{"schema":"xagent.connector.packet/v9","packet_id":"p","type":"t"}`))
	if err == nil || err.Error() != `unsupported_schema: schema: "xagent.connector.packet/v9" is not supported, want xagent.connector.packet/v1` {
		t.Fatalf("err = %v", err)
	}
	_, err = profile.DecodeEnvelope([]byte(`{"packet_id":"p","type":"t","time":1.5}`))
	if err == nil || !strings.Contains(err.Error(), "time: must be an integer") {
		t.Fatalf("err = %v", err)
	}
	_, err = profile.DecodeEnvelope([]byte(`{"packet_id":"p" "type":"t"}`))
	if err == nil || !strings.Contains(err.Error(), "not valid JSON: expected ',' or '}' at byte 17") {
		t.Fatalf("err = %v", err)
	}
}

func TestDecodeEnvelopePayloadRoundTrip(t *testing.T) {
	// The payload is kept byte for byte, so a payload decoder sees exactly what xAgent sent.
	frame := []byte(`{"schema":"xagent.connector.packet/v1","packet_id":"p","type":"chat.message","payload": {"message_id":"m", "text":"a\u0000b"} }`)
	env, err := profile.DecodeEnvelope(frame)
	if err != nil {
		t.Fatal(err)
	}
	if string(env.Payload) != `{"message_id":"m", "text":"a\u0000b"}` {
		t.Fatalf("payload = %s", env.Payload)
	}
	m, err := profile.Default().DecodeMessage(env.Payload, profile.FromAgent)
	if err != nil || m.Text != "a\x00b" {
		t.Fatalf("message = %+v, %v", m, err)
	}
}

func TestValidChannelID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"cch_123", true},
		{"A-z_0", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"", false},
		{"a.b", false},
		{"a*", false},
		{"a>", false},
		{"a b", false},
		{"é", false},
		{"a/b", false},
		{"a:b", false},
	}
	for _, tc := range tests {
		t.Run("edge-4 "+tc.id, func(t *testing.T) {
			if got := profile.ValidChannelID(tc.id); got != tc.want {
				t.Fatalf("ValidChannelID(%q) = %v, want %v", tc.id, got, tc.want)
			}
		})
	}
}

func TestNewPacket(t *testing.T) {
	before := time.Now().UnixMilli()
	pkt, err := profile.NewPacket("cch_1", profile.TypeAck, "pkt_in", profile.Accepted("msg_1"))
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixMilli()
	if pkt.Schema != profile.Schema || pkt.ChannelID != "cch_1" || pkt.Type != profile.TypeAck || pkt.ReplyTo != "pkt_in" {
		t.Fatalf("packet = %+v", pkt)
	}
	if pkt.Time < before || pkt.Time > after {
		t.Fatalf("time %d not in [%d, %d]", pkt.Time, before, after)
	}
	if !regexp.MustCompile(`^pkt_[0-9a-f]{32}$`).MatchString(pkt.PacketID) {
		t.Fatalf("packet_id %q", pkt.PacketID)
	}
	if string(pkt.Payload) != `{"message_id":"msg_1","status":"accepted"}` {
		t.Fatalf("payload %s", pkt.Payload)
	}

	// The wire form decodes back (P-ACK-1, P-ACK-2).
	b, err := json.Marshal(pkt)
	if err != nil {
		t.Fatal(err)
	}
	env, err := profile.DecodeEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	if env.PacketID != pkt.PacketID || env.ReplyTo != "pkt_in" || env.ChannelID != "cch_1" || env.Time != pkt.Time {
		t.Fatalf("round trip = %+v", env)
	}
	ack, err := profile.Default().DecodeAck(env.Payload)
	if err != nil || ack != profile.Accepted("msg_1") {
		t.Fatalf("ack = %+v, %v", ack, err)
	}

	// Unique ids.
	ids := map[string]bool{}
	for range 1000 {
		id := profile.NewPacketID()
		if ids[id] {
			t.Fatalf("packet_id %s repeated", id)
		}
		ids[id] = true
	}

	// No reply_to: omitted on the wire.
	pkt, err = profile.NewPacket("c", profile.TypeError, "", profile.ErrorPayloadOf(profile.Errorf(profile.CodeChannelNotOpen, "closed")))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(pkt)
	if strings.Contains(string(b), "reply_to") || !strings.Contains(string(b), `"payload":{"code":"channel_not_open","message":"closed","retryable":false}`) {
		t.Fatalf("wire = %s", b)
	}

	// A raw payload is used as is.
	pkt, err = profile.NewPacket("c", profile.TypeToolResult, "p", json.RawMessage(`{"invocation_id":"i","ok":true}`))
	if err != nil || string(pkt.Payload) != `{"invocation_id":"i","ok":true}` {
		t.Fatalf("raw payload = %s, %v", pkt.Payload, err)
	}
}

func TestNewPacketRefusesWhatTheConnectorMayNotSend(t *testing.T) {
	tests := []struct {
		name    string
		typ     string
		payload any
	}{
		{"P-DLT-6 no deltas to xAgent", profile.TypeDelta, profile.Delta{MessageID: "m", Sequence: 1, Text: "x"}},
		{"P-ACT-1 no activity to xAgent", profile.TypeActivity, profile.Activity{Status: "idle"}},
		{"edge-8 no tool.invoke to xAgent", profile.TypeToolInvoke, map[string]string{}},
		{"P-SCOPE-3 no session sync", "session.sync_message", map[string]string{}},
		{"nil payload", profile.TypeAck, nil},
		{"invalid raw payload", profile.TypeAck, json.RawMessage(`{`)},
		{"unmarshalable payload", profile.TypeAck, func() {}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := profile.NewPacket("c", tc.typ, "", tc.payload); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}
