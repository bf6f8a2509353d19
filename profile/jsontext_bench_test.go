package profile_test

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/ximd/ximd/profile"
)

// envelopeJSONText decodes the envelope's members with jsontext (github.com/go-json-experiment/json,
// the encoding/json/v2 candidate) as strictly as jsontext allows by default (duplicate names,
// invalid UTF-8 and lone surrogates refused), reusing one Decoder as a pool would: the reference
// DecodeEnvelope is measured against (see BenchmarkDecodeEnvelope_JSONText and the package doc).
// It checks less than DecodeEnvelope: nesting only to jsontext's own limit (10,000, not 64),
// nothing of packet_id's length or characters.
type envelopeJSONText struct {
	r bytes.Reader
	d jsontext.Decoder
}

func (x *envelopeJSONText) decode(frame []byte) (profile.Envelope, error) {
	var env profile.Envelope
	x.r.Reset(frame)
	x.d.Reset(&x.r)
	if tok, err := x.d.ReadToken(); err != nil || tok.Kind() != '{' {
		return env, errors.Join(errors.New("not a JSON object"), err)
	}
	for x.d.PeekKind() != '}' {
		name, err := x.d.ReadToken()
		if err != nil {
			return env, err
		}
		key := name.String() // a token lives until the next read
		switch key {
		case "payload":
			v, err := x.d.ReadValue()
			if err != nil {
				return env, err
			}
			env.Payload = slices.Clone([]byte(v))
		case "time":
			tok, err := x.d.ReadToken()
			if err != nil || tok.Kind() != '0' {
				return env, errors.Join(errors.New("time: must be an integer"), err)
			}
			env.Time = tok.Int()
		case "schema", "packet_id", "reply_to", "connector_channel_id", "type":
			tok, err := x.d.ReadToken()
			if err != nil || tok.Kind() != '"' {
				return env, errors.Join(errors.New(key+": must be a string"), err)
			}
			switch v := tok.String(); key {
			case "schema":
				env.Schema = v
			case "packet_id":
				env.PacketID = v
			case "reply_to":
				env.ReplyTo = v
			case "connector_channel_id":
				env.ChannelID = v
			default:
				env.Type = v
			}
		default:
			if err := x.d.SkipValue(); err != nil {
				return env, err
			}
		}
	}
	if _, err := x.d.ReadToken(); err != nil {
		return env, err
	}
	if _, err := x.d.ReadToken(); err != io.EOF {
		return env, errors.New("data after the top-level value")
	}
	return env, nil
}

// The jsontext reference reads the benchmark frames as DecodeEnvelope does, and refuses what
// jsontext's strictness covers: a duplicate key, invalid UTF-8, a lone surrogate escape.
func TestEnvelopeJSONTextMatches(t *testing.T) {
	var x envelopeJSONText
	for _, frame := range [][]byte{benchDeltaFrame, benchMsgFrame} {
		want, err := profile.DecodeEnvelope(frame)
		if err != nil {
			t.Fatal(err)
		}
		got, err := x.decode(frame)
		if err != nil {
			t.Fatal(err)
		}
		if got.Schema != want.Schema || got.PacketID != want.PacketID || got.ChannelID != want.ChannelID || got.Type != want.Type ||
			got.Time != want.Time || !bytes.Equal(got.Payload, want.Payload) {
			t.Fatalf("jsontext read %+v, DecodeEnvelope %+v", got, want)
		}
	}
	for _, bad := range []string{
		`{"packet_id":"a","packet_id":"b","type":"chat.message"}`,
		"{\"packet_id\":\"a\xff\",\"type\":\"chat.message\"}",
		`{"packet_id":"\ud800","type":"chat.message"}`,
	} {
		if _, err := x.decode([]byte(bad)); err == nil {
			t.Errorf("jsontext accepted %q", bad)
		}
		if _, err := profile.DecodeEnvelope([]byte(bad)); err == nil {
			t.Errorf("DecodeEnvelope accepted %q", bad)
		}
	}
}

func BenchmarkDecodeEnvelope_JSONText(b *testing.B) {
	for _, bc := range []struct {
		name  string
		frame []byte
	}{{"delta", benchDeltaFrame}, {"message", benchMsgFrame}} {
		b.Run(bc.name, func(b *testing.B) {
			var x envelopeJSONText
			b.SetBytes(int64(len(bc.frame)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := x.decode(bc.frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
