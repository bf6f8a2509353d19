package profile_test

import (
	"encoding/json"
	"testing"

	"github.com/ximd/ximd/profile"
)

var (
	benchDeltaFrame = []byte(`{"schema":"xagent.connector.packet/v1","packet_id":"pkt_delta_1","connector_channel_id":"cch_123","type":"chat.message.delta","time":1790000000001,"payload":{"message_id":"assistant_1","sequence":1,"text":"the current page"}}`)
	benchMsgFrame   = []byte(`{"schema":"xagent.connector.packet/v1","packet_id":"pkt_message_1","connector_channel_id":"cch_123","type":"chat.message","time":1790000000000,"payload":{"message_id":"msg_1","text":"Summarise the current page.\nIt has \"quotes\" and é.","files":[{"type":"image","file_ref":"file_abc123","filename":"page.png","mime_type":"image/png","byte_size":155000,"expires_at":1790000300000,"download_url":"/files/refs/file_abc123"}],"created_at":1790000000000}}`)
)

func BenchmarkDecodeEnvelope(b *testing.B) {
	for _, bc := range []struct {
		name  string
		frame []byte
	}{{"delta", benchDeltaFrame}, {"message", benchMsgFrame}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.frame)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := profile.DecodeEnvelope(bc.frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeEnvelopeStdlib is the reference: encoding/json into the same struct (which
// checks less: no duplicate keys, no UTF-8 strictness, no required members).
func BenchmarkDecodeEnvelopeStdlib(b *testing.B) {
	b.SetBytes(int64(len(benchDeltaFrame)))
	b.ReportAllocs()
	for b.Loop() {
		var env profile.Envelope
		if err := json.Unmarshal(benchDeltaFrame, &env); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeDelta(b *testing.B) {
	env, err := profile.DecodeEnvelope(benchDeltaFrame)
	if err != nil {
		b.Fatal(err)
	}
	cat := profile.Default()
	b.SetBytes(int64(len(env.Payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cat.DecodeDelta(env.Payload); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeMessage(b *testing.B) {
	env, err := profile.DecodeEnvelope(benchMsgFrame)
	if err != nil {
		b.Fatal(err)
	}
	cat := profile.Default()
	b.SetBytes(int64(len(env.Payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cat.DecodeMessage(env.Payload, profile.FromAgent); err != nil {
			b.Fatal(err)
		}
	}
}
