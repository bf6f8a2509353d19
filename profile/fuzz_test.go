package profile_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/ximd/ximd/profile"
)

// FuzzDecodeEnvelope: DecodeEnvelope never panics; it fails only with invalid_packet or
// unsupported_schema; whatever it accepts is valid JSON; and an accepted envelope re-encodes and
// re-decodes to the same values.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, v := range loadVectors(f) {
		f.Add(v.frame())
	}
	f.Add([]byte(`{"schema":"xagent.connector.packet/v1","packet_id":"p","type":"t","payload":{"a":[1,{"b":"\ud83d\ude00"}]}}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		env, err := profile.DecodeEnvelope(frame)
		if err != nil {
			var pe *profile.Error
			if !errors.As(err, &pe) || (pe.Code != profile.CodeInvalidPacket && pe.Code != profile.CodeUnsupportedSchema) {
				t.Fatalf("error %v is not invalid_packet/unsupported_schema", err)
			}
			return
		}
		if !json.Valid(frame) {
			t.Fatalf("accepted invalid JSON %q", frame)
		}
		if env.PacketID == "" || env.Type == "" || env.Schema != profile.Schema {
			t.Fatalf("accepted incomplete envelope %+v", env)
		}
		if env.Payload != nil && !json.Valid(env.Payload) {
			t.Fatalf("payload %q is not valid JSON", env.Payload)
		}
		// Re-encode as the wire would carry it; without HTML escaping, so that the payload's
		// bytes compare equal ("&" is not turned into "\u0026").
		var enc bytes.Buffer
		e := json.NewEncoder(&enc)
		e.SetEscapeHTML(false)
		if err := e.Encode(env); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		b := enc.Bytes()
		env2, err := profile.DecodeEnvelope(b)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", b, err)
		}
		var p1, p2 bytes.Buffer
		_ = json.Compact(&p1, env.Payload)
		_ = json.Compact(&p2, env2.Payload)
		env.Payload, env2.Payload = nil, nil
		if !reflect.DeepEqual(env, env2) || p1.String() != p2.String() {
			t.Fatalf("round trip changed the envelope:\n%+v %s\n%+v %s", env, p1.Bytes(), env2, p2.Bytes())
		}
		// The payload decoders never panic on what the envelope lets through.
		cat := profile.Default()
		_, _ = cat.DecodeMessage(env2.Payload, profile.FromAgent)
		_, _ = cat.DecodeDelta(env2.Payload)
		_, _ = cat.DecodeActivity(env2.Payload)
		_, _ = cat.DecodeAck(env2.Payload)
		_ = profile.MessageIDOf(env2.Payload)
	})
}

// FuzzDecodeMessage: DecodeMessage never panics; it fails only with invalid_packet; an accepted
// message satisfies the rules, and re-encodes and re-decodes to an equal message with the same
// Digest (so a retransmission of what we accepted is never a message_id_conflict).
func FuzzDecodeMessage(f *testing.F) {
	for _, v := range loadVectors(f) {
		env, err := profile.DecodeEnvelope(v.frame())
		if err == nil && env.Type == profile.TypeMessage {
			f.Add([]byte(env.Payload), v.direction() == profile.ToAgent)
		}
	}
	f.Add([]byte(`{"message_id":"m","text":"a\u0000\ud83d\ude00<>&","files":[{"type":"video","file_ref":"r","filename":"a b.mp4","mime_type":"video/mp4","byte_size":1,"expires_at":2,"download_url":"https://h/x?a=1"}],"created_at":0}`), true)
	f.Fuzz(func(t *testing.T, raw []byte, toAgent bool) {
		d := profile.FromAgent
		if toAgent {
			d = profile.ToAgent
		}
		cat := profile.Default()
		m, err := cat.DecodeMessage(raw, d)
		if err != nil {
			var pe *profile.Error
			if !errors.As(err, &pe) || pe.Code != profile.CodeInvalidPacket || pe.Retryable || pe.Message == "" {
				t.Fatalf("error %#v is not a non-retryable invalid_packet with a message", err)
			}
			return
		}
		if !json.Valid(raw) {
			t.Fatalf("accepted invalid JSON %q", raw)
		}
		if m.MessageID == "" || len(m.MessageID) > 256 || (m.Text == "" && len(m.Files) == 0) {
			t.Fatalf("accepted message breaks P-ID-4/P-MSG-3: %+v", m)
		}
		if got := profile.MessageIDOf(raw); got != m.MessageID {
			t.Fatalf("MessageIDOf = %q, DecodeMessage = %q", got, m.MessageID)
		}
		refs := map[string]bool{}
		for _, f := range m.Files {
			if refs[f.FileRef] || f.FileRef == "" {
				t.Fatalf("accepted duplicate or empty file_ref (P-MSG-5): %+v", m.Files)
			}
			refs[f.FileRef] = true
			if d == profile.ToAgent && f.DownloadURL == "" {
				t.Fatalf("accepted user file without download_url (P-MSG-6)")
			}
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		m2, err := cat.DecodeMessage(b, d)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", b, err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip changed the message:\n%#v\n%#v", m, m2)
		}
		if m.Digest() != m2.Digest() {
			t.Fatal("round trip changed the digest")
		}
	})
}
