package profile_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ximd/ximd/profile"
)

// vector is one wire-format test case in testdata/wire/*.json: a frame as received on /v1/ws
// (or sent to xAgent, by direction) and what ximd must make of it.
type vector struct {
	Description string          `json:"description"`
	Rule        string          `json:"rule"`
	Direction   string          `json:"direction"`
	Frame       json.RawMessage `json:"frame"`        // the frame as JSON, byte for byte
	FrameText   *string         `json:"frame_text"`   // or as a string (non-JSON, duplicate keys)
	FrameBase64 []byte          `json:"frame_base64"` // or as bytes (invalid UTF-8)
	Expect      struct {
		// Result is "ok", "drop" (type outside the catalog's set: silent, P-ERR-1) or "error".
		Result          string `json:"result"`
		Code            string `json:"code"`
		MessageContains string `json:"message_contains"`
		// PacketID, when set, is the packet_id the error packet must reply to.
		PacketID string `json:"packet_id"`
		// MessageID, when present for a chat.message error, is what MessageIDOf reads ("" means
		// an error packet instead of a rejected ack).
		MessageID *string `json:"message_id"`
		// Digest pins Message.Digest, which is stored across versions.
		Digest string `json:"digest"`
	} `json:"expect"`
}

func (v *vector) frame() []byte {
	switch {
	case v.FrameText != nil:
		return []byte(*v.FrameText)
	case v.FrameBase64 != nil:
		return v.FrameBase64
	}
	return v.Frame
}

func (v *vector) direction() profile.Direction {
	if v.Direction == profile.ToAgent.String() {
		return profile.ToAgent
	}
	return profile.FromAgent
}

func loadVectors(tb testing.TB) map[string]*vector {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "wire", "*.json"))
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no vectors: %v", err)
	}
	out := make(map[string]*vector, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		v := new(vector)
		if err := json.Unmarshal(data, v); err != nil {
			tb.Fatalf("%s: %v", p, err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".json")] = v
	}
	return out
}

// receive runs a frame through the edge-api §5 steps this package covers, as the gateway and
// the validate stage do. It returns the envelope, the decoded payload, whether the packet was
// dropped, and the error to answer with.
func receive(cat *profile.Catalog, frame []byte, d profile.Direction) (profile.Envelope, any, bool, error) {
	env, err := profile.DecodeEnvelope(frame)
	if err != nil {
		return env, nil, false, err
	}
	pt, ok := cat.Accepts(d, env.Type)
	if !ok {
		return env, nil, true, nil
	}
	if !profile.ValidChannelID(env.ChannelID) {
		return env, nil, false, profile.Errorf(profile.CodeInvalidPacket, "connector_channel_id: invalid")
	}
	var payload any
	switch pt.Name {
	case profile.TypeMessage:
		payload, err = cat.DecodeMessage(env.Payload, d)
	case profile.TypeDelta:
		payload, err = cat.DecodeDelta(env.Payload)
	case profile.TypeActivity:
		payload, err = cat.DecodeActivity(env.Payload)
	case profile.TypeAck:
		payload, err = cat.DecodeAck(env.Payload)
	}
	return env, payload, false, err
}

func TestWireVectors(t *testing.T) {
	cat := profile.Default()
	for name, v := range loadVectors(t) {
		t.Run(name, func(t *testing.T) {
			if v.Rule == "" || v.Description == "" {
				t.Fatal("vector needs rule and description")
			}
			env, payload, dropped, err := receive(cat, v.frame(), v.direction())
			switch v.Expect.Result {
			case "ok":
				if err != nil || dropped {
					t.Fatalf("want ok, got err=%v dropped=%v", err, dropped)
				}
			case "drop":
				if err != nil || !dropped {
					t.Fatalf("want silent drop, got err=%v dropped=%v", err, dropped)
				}
			case "error":
				var pe *profile.Error
				if !errors.As(err, &pe) {
					t.Fatalf("want *profile.Error %s, got %v (dropped=%v)", v.Expect.Code, err, dropped)
				}
				if pe.Code != v.Expect.Code {
					t.Fatalf("code = %s, want %s (%v)", pe.Code, v.Expect.Code, pe)
				}
				if !strings.Contains(pe.Message, v.Expect.MessageContains) {
					t.Fatalf("message %q does not contain %q", pe.Message, v.Expect.MessageContains)
				}
				if v.Expect.PacketID != "" && env.PacketID != v.Expect.PacketID {
					t.Fatalf("PacketID for reply_to = %q, want %q", env.PacketID, v.Expect.PacketID)
				}
				if v.Expect.MessageID != nil {
					if got := profile.MessageIDOf(env.Payload); got != *v.Expect.MessageID {
						t.Fatalf("MessageIDOf = %q, want %q", got, *v.Expect.MessageID)
					}
				}
			default:
				t.Fatalf("bad expect.result %q", v.Expect.Result)
			}
			if v.Expect.Digest != "" {
				m, ok := payload.(profile.Message)
				if !ok {
					t.Fatalf("digest expected but payload is %T", payload)
				}
				if got := m.Digest(); got != v.Expect.Digest {
					t.Fatalf("Digest = %s, want %s (the digest is persisted: it must never change)", got, v.Expect.Digest)
				}
			}
		})
	}
}
