package profile_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ximd/ximd/profile"
)

// payloadKinds are the xAgent -> Connector packet types whose payloads FuzzDecodePayload
// decodes, selected by the fuzzer's first argument (modulo their number).
var payloadKinds = []string{profile.TypeDelta, profile.TypeActivity, profile.TypeAck, profile.TypeToolInvoke, profile.TypeMessage}

// decodePayloadAs decodes raw as the payload of packet type typ, as the validate stage does; tool.invoke
// has no payload decoder in the profile (the tool stage reads it) and returns (nil, nil).
func decodePayloadAs(cat *profile.Catalog, typ string, raw []byte) (any, error) {
	switch typ {
	case profile.TypeDelta:
		return cat.DecodeDelta(raw)
	case profile.TypeActivity:
		return cat.DecodeActivity(raw)
	case profile.TypeAck:
		return cat.DecodeAck(raw)
	case profile.TypeMessage:
		return cat.DecodeMessage(raw, profile.FromAgent)
	}
	return nil, nil
}

// FuzzDecodePayload: the delta, activity and ack payload decoders never panic; they fail only
// with a non-retryable invalid_packet naming the problem; what they accept satisfies the profile's
// rules (P-DLT-1/5, P-ACT-1/2, profile §7) and survives a re-encode unchanged. Every payload,
// tool.invoke's included, decodes the same whether given alone or inside an envelope: the gateway
// (DecodeEnvelope) and the validate stage (Decode*) never disagree about one payload.
func FuzzDecodePayload(f *testing.F) {
	for _, v := range loadVectors(f) {
		env, err := profile.DecodeEnvelope(v.frame())
		if err != nil || env.Payload == nil {
			continue
		}
		for k, typ := range payloadKinds {
			if typ == env.Type {
				f.Add(uint8(k), []byte(env.Payload))
			}
		}
	}
	f.Add(uint8(0), []byte(`{"message_id":"m","sequence":9007199254740993,"text":"\ud83d\ude00"}`))
	f.Add(uint8(1), []byte(`{"status":"tool","tool_name":"search"}`))
	f.Add(uint8(2), []byte(`{"message_id":"m","status":"rejected","code":"x","retryable":true,"message":"m"}`))
	f.Add(uint8(3), []byte(`{"invocation_id":"inv_1","tool":"im.send_message","arguments":{"text":"hi"}}`))
	f.Fuzz(func(t *testing.T, kind uint8, raw []byte) {
		cat := profile.Default()
		typ := payloadKinds[int(kind)%len(payloadKinds)]
		got, err := decodePayloadAs(cat, typ, raw)
		if err != nil {
			var pe *profile.Error
			if !errors.As(err, &pe) || pe.Code != profile.CodeInvalidPacket || pe.Retryable || pe.Message == "" {
				t.Fatalf("%s: error %#v is not a non-retryable invalid_packet with a message", typ, err)
			}
		} else if typ != profile.TypeToolInvoke {
			if !json.Valid(raw) {
				t.Fatalf("%s: accepted invalid JSON %q", typ, raw)
			}
			checkPayload(t, cat, typ, raw, got)
		}
		envelopeAgrees(t, cat, typ, raw, got, err)
	})
}

// checkPayload asserts the rules an accepted payload satisfies and its re-encoding round trip.
func checkPayload(t *testing.T, cat *profile.Catalog, typ string, raw []byte, got any) {
	t.Helper()
	id := ""
	switch p := got.(type) {
	case profile.Delta:
		if p.Sequence < 1 || p.Text == "" || !utf8.ValidString(p.Text) {
			t.Fatalf("accepted delta breaks P-DLT-1/5: %+v", p)
		}
		id = p.MessageID
	case profile.Activity:
		switch p.Status {
		case profile.ActivityTool:
			if p.ToolName == "" || len(p.ToolName) > 256 {
				t.Fatalf("accepted tool activity breaks P-ACT-2: %+v", p)
			}
		case profile.ActivityThinking, profile.ActivityIdle:
			if p.ToolName != "" {
				t.Fatalf("accepted tool_name without status tool (P-ACT-2): %+v", p)
			}
		default:
			t.Fatalf("accepted activity status %q (P-ACT-1)", p.Status)
		}
		return // no message_id, and a closed record of two strings: round trip below
	case profile.Ack:
		switch p.Status {
		case profile.AckAccepted, profile.AckDuplicate:
		case profile.AckRejected:
			if p.Code == "" || p.Retryable == nil {
				t.Fatalf("accepted rejected ack without code and retryable: %+v", p)
			}
		default:
			t.Fatalf("accepted ack status %q", p.Status)
		}
		id = p.MessageID
	case profile.Message:
		id = p.MessageID
	}
	if id == "" || len(id) > 256 || !utf8.ValidString(id) {
		t.Fatalf("accepted %s with message_id %q (P-ID-4)", typ, id)
	}
	if got := profile.MessageIDOf(raw); got != id {
		t.Fatalf("MessageIDOf = %q, Decode = %q", got, id)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatalf("re-encode: %v", err)
	}
	again, err := decodePayloadAs(cat, typ, b)
	if err != nil {
		t.Fatalf("re-decode of %s: %v", b, err)
	}
	if !reflect.DeepEqual(got, again) {
		t.Fatalf("round trip changed the %s:\n%#v\n%#v", typ, got, again)
	}
}

// envelopeAgrees wraps one JSON value in an envelope of typ: the gateway's decoder must hand the
// stage exactly that value, and the stage must decide as on the bare payload. A payload the
// envelope refuses is one the stage would refuse too.
func envelopeAgrees(t *testing.T, cat *profile.Catalog, typ string, raw []byte, got any, gotErr error) {
	t.Helper()
	if !json.Valid(raw) {
		return // not one JSON value: wrapping it would change its meaning
	}
	frame := []byte(`{"schema":"xagent.connector.packet/v1","packet_id":"p","connector_channel_id":"c","type":"` + typ + `","time":1,"payload":` + string(raw) + `}`)
	env, err := profile.DecodeEnvelope(frame)
	if err != nil {
		if gotErr == nil && typ != profile.TypeToolInvoke {
			t.Fatalf("envelope refused a payload the %s decoder accepts: %v", typ, err)
		}
		return
	}
	if pt, ok := cat.Accepts(profile.FromAgent, env.Type); !ok || env.Type != typ || pt.Name != typ {
		t.Fatalf("type %q not accepted from xAgent", typ)
	}
	trimmed := strings.Trim(string(raw), " \t\r\n")
	if trimmed == "null" {
		if env.Payload != nil {
			t.Fatalf("null payload became %q", env.Payload)
		}
		return
	}
	if string(env.Payload) != trimmed {
		t.Fatalf("envelope payload %q, want %q", env.Payload, trimmed)
	}
	if typ == profile.TypeToolInvoke {
		return
	}
	inEnv, err := decodePayloadAs(cat, typ, env.Payload)
	if (err == nil) != (gotErr == nil) || (err == nil && !reflect.DeepEqual(inEnv, got)) {
		t.Fatalf("%s decodes differently inside an envelope: %#v %v, alone %#v %v", typ, inEnv, err, got, gotErr)
	}
}
