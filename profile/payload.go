package profile

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"strconv"
)

// Ack statuses (profile §7).
const (
	AckAccepted  = "accepted"
	AckDuplicate = "duplicate"
	AckRejected  = "rejected"
)

// Activity statuses (P-ACT-1).
const (
	ActivityThinking = "thinking"
	ActivityTool     = "tool"
	ActivityIdle     = "idle"
)

// File types (P-MSG-4).
const (
	FileImage = "image"
	FileVideo = "video"
	FileAudio = "audio"
	FileFile  = "file"
)

// Message is the payload of chat.message (profile §5).
type Message struct {
	// MessageID is the business idempotency key within the channel (P-ID-4, P-MSG-2).
	MessageID string `json:"message_id"`
	// Text is the full body; may be empty when Files is not (P-MSG-3).
	Text string `json:"text,omitempty"`
	// Files are references to Transfer Plane files, never bytes (P-MSG-8).
	Files []File `json:"files,omitempty"`
	// CreatedAt is the sender's creation time in Unix ms (optional).
	CreatedAt int64 `json:"created_at,omitempty"`
}

// File is one item of Message.Files (P-MSG-4 .. P-MSG-7).
type File struct {
	// Type is image, video, audio or file (P-MSG-4).
	Type string `json:"type"`
	// FileRef is unique within the message (P-MSG-5).
	FileRef  string `json:"file_ref"`
	Filename string `json:"filename,omitempty"`
	MimeType string `json:"mime_type,omitempty"`
	ByteSize int64  `json:"byte_size,omitempty"`
	// ExpiresAt is when the file_ref expires, Unix ms.
	ExpiresAt int64 `json:"expires_at,omitempty"`
	// DownloadURL is required Connector -> xAgent (P-MSG-6): ximd sends /files/refs/{file_ref}.
	// From xAgent it is optional and, if present, /files/refs/... or http(s) (edge-api §5.1).
	DownloadURL string `json:"download_url,omitempty"`
}

// Delta is the payload of chat.message.delta (profile §6).
type Delta struct {
	MessageID string `json:"message_id"`
	// Sequence starts at 1 per message_id and increases by one (P-DLT-1).
	Sequence int64 `json:"sequence"`
	// Text is the increment; never empty.
	Text string `json:"text"`
}

// Activity is the payload of chat.activity (profile §8).
type Activity struct {
	// Status is thinking, tool or idle (P-ACT-1).
	Status string `json:"status"`
	// ToolName is set iff Status is tool (P-ACT-2).
	ToolName string `json:"tool_name,omitempty"`
}

// Ack is the payload of chat.message.ack (profile §7). A rejected ack always has Code and
// Retryable set; build acks with [Accepted], [Duplicate] and [Rejected].
type Ack struct {
	MessageID string `json:"message_id"`
	// Status is AckAccepted, AckDuplicate or AckRejected.
	Status    string `json:"status"`
	Code      string `json:"code,omitempty"`
	Message   string `json:"message,omitempty"`
	Retryable *bool  `json:"retryable,omitempty"`
}

// ErrorPayload is the payload of an `error` packet (edge-api §5).
type ErrorPayload struct {
	Code      string `json:"code"`
	Message   string `json:"message,omitempty"`
	Retryable bool   `json:"retryable"`
}

// DecodeMessage decodes and validates a chat.message payload travelling in direction d. The
// payload is a closed record (edge-api §5.1); the rules applied are listed in catalog.json
// (P-ID-2, P-ID-4, P-MSG-3 .. P-MSG-6, P-MSG-8). Failures are *Error invalid_packet whose
// message names the field, e.g. "files[1].type: must be one of image, video, audio, file
// (P-MSG-4)". An empty files array decodes as nil Files.
func (c *Catalog) DecodeMessage(raw json.RawMessage, d Direction) (Message, error) {
	if !d.valid() {
		return Message{}, Errorf(CodeInternal, "profile: DecodeMessage with invalid %v", d)
	}
	r, err := c.decodePayload(raw, c.message, d)
	if err != nil {
		return Message{}, err
	}
	m := Message{
		MessageID: r.get("message_id").str,
		Text:      r.get("text").str,
		CreatedAt: r.get("created_at").num,
	}
	if items := r.get("files").items; len(items) > 0 {
		m.Files = make([]File, len(items))
		for i := range items {
			f := &items[i]
			m.Files[i] = File{
				Type:        f.get("type").str,
				FileRef:     f.get("file_ref").str,
				Filename:    f.get("filename").str,
				MimeType:    f.get("mime_type").str,
				ByteSize:    f.get("byte_size").num,
				ExpiresAt:   f.get("expires_at").num,
				DownloadURL: f.get("download_url").str,
			}
		}
	}
	return m, nil
}

// ToolInvoke is a tool.invoke payload (edge-api §8).
type ToolInvoke struct {
	InvocationID string          `json:"invocation_id"`
	Tool         string          `json:"tool"`
	Arguments    json.RawMessage `json:"arguments"`
}

// DecodeToolInvoke decodes and validates a tool.invoke payload: a closed record of invocation_id
// (1-256 bytes), tool and arguments (an object, checked against the tool's schema by
// [Tool.CheckArguments]); the P-ID-2 keys are refused as in every payload.
func (c *Catalog) DecodeToolInvoke(raw json.RawMessage) (ToolInvoke, error) {
	r, err := c.decodePayload(raw, c.toolInvoke, FromAgent)
	if err != nil {
		return ToolInvoke{}, err
	}
	return ToolInvoke{
		InvocationID: r.get("invocation_id").str,
		Tool:         r.get("tool").str,
		Arguments:    json.RawMessage(string(r.get("arguments").raw)),
	}, nil
}

// DecodeDelta decodes and validates a chat.message.delta payload (xAgent -> Connector only):
// exactly message_id, sequence (an integer >= 1, P-DLT-1) and a non-empty text (P-DLT-5).
// Sequence order (gaps, conflicts) is the caller's state, not checked here.
func (c *Catalog) DecodeDelta(raw json.RawMessage) (Delta, error) {
	r, err := c.decodePayload(raw, c.delta, FromAgent)
	if err != nil {
		return Delta{}, err
	}
	return Delta{
		MessageID: r.get("message_id").str,
		Sequence:  r.get("sequence").num,
		Text:      r.get("text").str,
	}, nil
}

// DecodeActivity decodes and validates a chat.activity payload: status is thinking, tool or
// idle (P-ACT-1), tool_name is present iff status is tool and at most 256 bytes (P-ACT-2), and
// nothing else is allowed (P-ACT-3, edge-api §5.3).
func (c *Catalog) DecodeActivity(raw json.RawMessage) (Activity, error) {
	r, err := c.decodePayload(raw, c.activity, FromAgent)
	if err != nil {
		return Activity{}, err
	}
	return Activity{Status: r.get("status").str, ToolName: r.get("tool_name").str}, nil
}

// DecodeAck decodes and validates a chat.message.ack payload (either direction): status is
// accepted, duplicate or rejected, and a rejected ack carries code and retryable (profile §7).
// Code is not checked against ximd's table: it is the sender's code.
func (c *Catalog) DecodeAck(raw json.RawMessage) (Ack, error) {
	r, err := c.decodePayload(raw, c.ack, 0)
	if err != nil {
		return Ack{}, err
	}
	a := Ack{
		MessageID: r.get("message_id").str,
		Status:    r.get("status").str,
		Code:      r.get("code").str,
		Message:   r.get("message").str,
	}
	if v := r.get("retryable"); v.set {
		b := v.b
		a.Retryable = &b
	}
	return a, nil
}

// MessageIDOf returns payload.message_id without validating anything else, so that an
// otherwise invalid chat.message can still be answered by a rejected ack (edge-api §5.1). It
// returns "" when raw is not a JSON object, when message_id is absent, empty, not a string, or
// given twice; the caller then sends an `error` packet instead.
func MessageIDOf(raw json.RawMessage) string {
	s := scanner{b: raw}
	if s.peek() != '{' {
		return ""
	}
	var id []byte
	found := 0
	err := s.object(func(key []byte) error {
		if string(key) != "message_id" || s.peek() != '"' {
			if string(key) == "message_id" {
				found++
			}
			return s.skip()
		}
		found++
		b, err := s.str(true)
		id = b
		return err
	})
	if err != nil || s.end() != nil || found != 1 {
		return ""
	}
	return string(id)
}

// Digest returns a stable hex SHA-256 of the message content: the text and the complete file
// list in order (type, file_ref, filename, mime_type, byte_size, download_url of each), every
// part length-prefixed so that no two different contents share an encoding. message_id,
// created_at and expires_at are not part of it. It identifies "the same content" for
// message_id_conflict (P-STATE-6, edge-api §5.1) and is stored across restarts, so the
// algorithm never changes (a test pins a golden value).
func (m Message) Digest() string {
	h := sha256.New()
	var n [8]byte
	putInt := func(v int64) {
		binary.BigEndian.PutUint64(n[:], uint64(v))
		h.Write(n[:])
	}
	put := func(s string) {
		putInt(int64(len(s)))
		io.WriteString(h, s)
	}
	io.WriteString(h, "xagent.im.v2/message-digest/v1\x00")
	put(m.Text)
	putInt(int64(len(m.Files)))
	for _, f := range m.Files {
		put(f.Type)
		put(f.FileRef)
		put(f.Filename)
		put(f.MimeType)
		putInt(f.ByteSize)
		put(f.DownloadURL)
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// Accepted is the ack for a message accepted for the first time (profile §7).
func Accepted(messageID string) Ack {
	return Ack{MessageID: messageID, Status: AckAccepted}
}

// Duplicate is the ack for a message already accepted (P-ACK-4).
func Duplicate(messageID string) Ack {
	return Ack{MessageID: messageID, Status: AckDuplicate}
}

// Rejected is the ack refusing a message with e's code, message and retryable (P-ACK-5,
// P-ERR-5); Code and Retryable are always set. A nil e gives internal_error.
func Rejected(messageID string, e *Error) Ack {
	if e == nil {
		e = Errorf(CodeInternal, "internal error")
	}
	retryable := e.Retryable
	return Ack{
		MessageID: messageID,
		Status:    AckRejected,
		Code:      e.Code,
		Message:   e.Message,
		Retryable: &retryable,
	}
}

// ErrorPayloadOf is the payload of an `error` packet carrying e. A nil e gives internal_error.
func ErrorPayloadOf(e *Error) ErrorPayload {
	if e == nil {
		e = Errorf(CodeInternal, "internal error")
	}
	return ErrorPayload{Code: e.Code, Message: e.Message, Retryable: e.Retryable}
}

func itoa(i int) string { return strconv.Itoa(i) }

// safeQuote quotes s for an error message, cut to 32 bytes.
func safeQuote(s string) string {
	if len(s) > 32 {
		s = s[:32] + "…"
	}
	return strconv.Quote(s)
}
