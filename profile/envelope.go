package profile

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// MaxPacketIDBytes bounds packet_id (and reply_to). The Common Protocol sets no limit; ximd
// needs one because packet_id is echoed in every reply's reply_to and stored with intent records.
const MaxPacketIDBytes = 256

// Envelope is the WirePacket (profile §4): one WebSocket text frame.
type Envelope struct {
	Schema    string          `json:"schema"`
	PacketID  string          `json:"packet_id"`
	ReplyTo   string          `json:"reply_to,omitempty"`
	ChannelID string          `json:"connector_channel_id"`
	Type      string          `json:"type"`
	Time      int64           `json:"time"`
	Payload   json.RawMessage `json:"payload"`
}

// Envelope member indexes, for duplicate detection.
const (
	envSchema = iota
	envPacketID
	envReplyTo
	envChannelID
	envType
	envTime
	envPayload
)

var envelopeKeys = [...]string{
	envSchema: "schema", envPacketID: "packet_id", envReplyTo: "reply_to",
	envChannelID: "connector_channel_id", envType: "type", envTime: "time", envPayload: "payload",
}

// DecodeEnvelope parses one WebSocket frame (edge-api §5 step 1) in a single pass.
//
// It fails with a *Error:
//   - invalid_packet when the frame is not a JSON object (strictly: valid UTF-8, no lone
//     surrogate escapes, nesting at most 64 deep), when a key appears twice, when packet_id or
//     type is missing or empty, when a member has the wrong JSON type (schema, packet_id,
//     reply_to, connector_channel_id and type are strings, time an integer), or when packet_id
//     or reply_to is longer than MaxPacketIDBytes or holds control characters;
//   - otherwise unsupported_schema when schema is absent or not [Schema].
//
// On failure the returned Envelope is filled as far as the frame could be read, so the caller
// can answer with reply_to = PacketID on ChannelID. Unknown envelope members are ignored (the
// envelope belongs to the Common Protocol; payloads are the closed records). null counts as
// absent. DecodeEnvelope validates neither the payload (see the Decode* methods of [Catalog])
// nor the channel id (see [ValidChannelID]); the payload is only checked to be well-formed JSON.
//
// Payload aliases frame (no copy): do not modify frame while the Envelope is in use.
func DecodeEnvelope(frame []byte) (Envelope, error) {
	d := envelopeDecoder{s: scanner{b: frame}}
	if d.s.peek() != '{' {
		if d.s.i >= len(frame) {
			return d.env, invalidf("not valid JSON: empty frame")
		}
		return d.env, invalidf("the packet must be a JSON object")
	}
	err := d.s.object(d.member)
	if err == nil {
		err = d.s.end()
	}
	if err != nil {
		return d.env, err
	}
	return d.env, d.complete()
}

// envelopeDecoder is DecodeEnvelope's state: the scanner over the frame, the envelope read so
// far and the members seen.
type envelopeDecoder struct {
	s         scanner
	env       Envelope
	seen      uint8               // bit k: envelopeKeys[k] was read
	extra     map[string]struct{} // unknown members seen, for duplicate detection (a map: a frame may hold ~100k of them)
	hasSchema bool
}

// member reads the value of one envelope member, key, refusing a key seen before.
func (d *envelopeDecoder) member(key []byte) error {
	k := envelopeKey(key)
	if k < 0 {
		return d.unknown(key)
	}
	if d.seen&(1<<k) != 0 {
		return invalidf("%s: duplicate key", envelopeKeys[k])
	}
	d.seen |= 1 << k
	switch k {
	case envTime:
		return d.time()
	case envPayload:
		return d.payload()
	}
	return d.text(k)
}

// envelopeKey returns the index of key in envelopeKeys, or -1 for a member the envelope does not
// define.
func envelopeKey(key []byte) int {
	for i, name := range envelopeKeys {
		if name == string(key) {
			return i
		}
	}
	return -1
}

// unknown skips the value of a member the envelope does not define, refusing a key seen before.
func (d *envelopeDecoder) unknown(key []byte) error {
	if _, dup := d.extra[string(key)]; dup {
		return invalidf("%s: duplicate key", join("", key))
	}
	if d.extra == nil {
		d.extra = map[string]struct{}{}
	}
	d.extra[string(key)] = struct{}{}
	return d.s.skip()
}

// time reads the time member: an integer (Unix ms) or null.
func (d *envelopeDecoder) time() error {
	if isNull, err := d.s.null(); isNull || err != nil {
		return err
	}
	if c := d.s.peek(); c != '-' && (c < '0' || c > '9') {
		return invalidf("time: must be an integer (Unix ms)")
	}
	span, isInt, err := d.s.number()
	if err != nil {
		return err
	}
	n, ok := parseInt(span)
	if !isInt || !ok {
		return invalidf("time: must be an integer (Unix ms)")
	}
	d.env.Time = n
	return nil
}

// payload checks the payload member is well-formed JSON and keeps its span of the frame.
func (d *envelopeDecoder) payload() error {
	if isNull, err := d.s.null(); isNull || err != nil {
		return err // like every member, null is absent: Payload stays nil
	}
	start := d.s.i
	if err := d.s.skip(); err != nil {
		return err
	}
	d.env.Payload = d.s.b[start:d.s.i]
	return nil
}

// text reads the string member envelopeKeys[k] (schema, packet_id, reply_to,
// connector_channel_id or type), or null.
func (d *envelopeDecoder) text(k int) error {
	if isNull, err := d.s.null(); isNull || err != nil {
		return err
	}
	if d.s.peek() != '"' {
		return invalidf("%s: must be a string", envelopeKeys[k])
	}
	b, err := d.s.str(true)
	if err != nil {
		return err
	}
	switch k {
	case envSchema:
		d.env.Schema, d.hasSchema = intern(b), true // the common values cost no allocation
	case envType:
		d.env.Type = intern(b)
	case envPacketID:
		d.env.PacketID = string(b)
		return checkPacketID("packet_id", d.env.PacketID)
	case envReplyTo:
		d.env.ReplyTo = string(b)
		return checkPacketID("reply_to", d.env.ReplyTo)
	case envChannelID:
		d.env.ChannelID = string(b)
	}
	return nil
}

// complete checks the members every envelope needs once the whole frame is read: packet_id,
// type and the supported schema.
func (d *envelopeDecoder) complete() error {
	switch {
	case d.env.PacketID == "":
		return invalidf("packet_id: required")
	case d.env.Type == "":
		return invalidf("type: required")
	case !d.hasSchema:
		return Errorf(CodeUnsupportedSchema, "schema: missing, want %s", Schema)
	case d.env.Schema != Schema:
		return Errorf(CodeUnsupportedSchema, "schema: %s is not supported, want %s", safeQuote(d.env.Schema), Schema)
	}
	return nil
}

// interned are the strings DecodeEnvelope returns without allocating.
var interned = [...]string{Schema, TypeMessage, TypeDelta, TypeAck, TypeActivity, TypeToolInvoke, TypeToolResult, TypeError}

func intern(b []byte) string {
	for _, s := range interned {
		if s == string(b) {
			return s
		}
	}
	return string(b)
}

func checkPacketID(field, v string) error {
	if len(v) > MaxPacketIDBytes {
		return invalidf("%s: must be at most %d bytes", field, MaxPacketIDBytes)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' || c == 0x7f {
			return invalidf("%s: must not contain control characters", field)
		}
	}
	return nil
}

// ValidChannelID reports whether id is a valid connector_channel_id: ^[A-Za-z0-9_-]{1,128}$
// (edge-api §4), which makes it a safe NATS subject token and KV key.
func ValidChannelID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// NewPacketID returns a fresh packet_id: "pkt_" and 16 random bytes in hex.
func NewPacketID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return "pkt_" + hex.EncodeToString(b[:])
}

// NewPacket builds an outbound packet (Connector -> xAgent): schema [Schema], a fresh packet_id
// ([NewPacketID]), time = now in Unix ms, and payload marshalled to JSON (a json.RawMessage is
// used as is, after a validity check). replyTo may be empty. It fails with an internal_error
// *Error if packetType is not one the catalog lets the Connector emit ([Catalog.Emits]) or
// payload is nil, and with the marshalling error if payload cannot be marshalled. It does not
// check channelID, so that an `error` can answer a packet whose channel id is invalid.
func NewPacket(channelID, packetType, replyTo string, payload any) (Envelope, error) {
	if !Default().Emits(packetType) {
		return Envelope{}, Errorf(CodeInternal, "profile: %s is not a Connector -> xAgent packet type", safeQuote(packetType))
	}
	if payload == nil {
		return Envelope{}, Errorf(CodeInternal, "profile: nil payload for %s", packetType)
	}
	var raw json.RawMessage
	if r, ok := payload.(json.RawMessage); ok {
		if !json.Valid(r) {
			return Envelope{}, fmt.Errorf("profile: %s payload is not valid JSON", packetType)
		}
		raw = r
	} else {
		b, err := json.Marshal(payload)
		if err != nil {
			return Envelope{}, fmt.Errorf("profile: marshal %s payload: %w", packetType, err)
		}
		raw = b
	}
	return Envelope{
		Schema:    Schema,
		PacketID:  NewPacketID(),
		ReplyTo:   replyTo,
		ChannelID: channelID,
		Type:      packetType,
		Time:      time.Now().UnixMilli(),
		Payload:   raw,
	}, nil
}
