// Package profile is the xAgent IM Profile v2 (xagent.im.v2) as data, types and validation:
// the packet envelope, the IM packets (chat.message, chat.message.delta, chat.message.ack,
// chat.activity, tool.invoke, tool.result, error) and their payloads, the IM tools, the profile
// catalog and the protocol error codes. It imports no NATS; outside the standard library it
// uses only a JSON Schema validator (github.com/santhosh-tekuri/jsonschema) for tool arguments
// and golang.org/x/text for that validator's messages. Every other package asks it what the
// protocol allows.
//
// # Data
//
// Three embedded files are the protocol facts (STYLE 4):
//
//   - catalog.json: the packet types (name, subject kind, directions, whether each needs an
//     ack or another single answer, the worker stage of those received from xAgent), the
//     payload of each as closed records (fields with JSON type, required or required in one
//     direction, enum, max_bytes, min, max_items), the keys no payload may carry (P-ID-2), and
//     the names of the cross-field rules implemented in Go (text_or_files P-MSG-3,
//     unique_file_refs P-MSG-5, tool_name_iff_tool P-ACT-2, rejected_needs_code profile §7,
//     download_url_safe P-MSG-6/P-MSG-8, filename_safe P-MSG-8).
//   - errors.json: the error-code table (code, retryable, http_status, description).
//   - tools.json: the IM tools with their input schemas (edge-api §8), which the Card declares
//     and tool arguments are validated against ([Tool.CheckArguments]).
//
// [Load] parses and cross-checks them against the Go code (every Code*, Type* and status
// constant exists in the data, every named rule has an implementation and vice versa, every
// payload's fields equal its Go type's JSON fields, every Tool* constant is a tool whose schema
// compiles). [Default] is the embedded catalog, loaded once.
//
// # Receiving a frame
//
// The WebSocket edge and the workers follow edge-api §5 with this package:
//
//	env, err := profile.DecodeEnvelope(frame)   // invalid_packet / unsupported_schema
//	pt, ok := cat.Accepts(profile.FromAgent, env.Type) // !ok: drop silently (P-ERR-1)
//	profile.ValidChannelID(env.ChannelID)        // else error invalid_packet (edge-api §4)
//	msg, err := cat.DecodeMessage(env.Payload, profile.FromAgent) // per pt.Name
//
// A failing chat.message is answered with Rejected(MessageIDOf(payload), err) when a message_id
// can be read, else with an `error` packet (edge-api §5.1).
//
// # Strictness
//
// Decoding is single-pass and stricter than encoding/json: a frame must be valid UTF-8 with no
// lone surrogate escapes and nesting at most 64 deep; duplicate keys are rejected in the
// envelope and in every payload object; payload objects are closed records (an undefined key is
// invalid_packet citing the rule, and the P-ID-2 keys cite P-ID-2); integers must be written as
// JSON integers (1, not 1.0 or 1e0) within int64; null is the same as an absent member. Unknown
// envelope members are ignored, since the envelope belongs to the Common Protocol.
//
// Every validation failure is an *[Error] with a code from the table, a message naming the
// field (for example "files[1].type: must be one of image, video, audio, file (P-MSG-4)") and
// the table's retryable. Limits ximd adds where the profile is silent are in catalog.json:
// message_id, file_ref, tool_name, invocation_id and tool at most 256 bytes, code 128,
// filename 1024, mime_type 255, download_url 8192, at most 256 files per message, packet_id and
// reply_to at most [MaxPacketIDBytes] without control characters.
//
// Frames are read by a single-pass validating scanner of this package (jsonscan.go), not by a
// JSON library: measured against jsontext (github.com/go-json-experiment/json, the
// encoding/json/v2 candidate) reading the same envelope members as strictly as it can
// (duplicate names, invalid UTF-8 and lone surrogates refused; nesting only to its own limit of
// 10,000), DecodeEnvelope takes 0.8 µs for a delta frame and 1.5 µs for a message frame with a
// file (24 B, 2 allocations), jsontext 2.0 and 3.4 µs (160 and 392 B, 5 allocations),
// encoding/json into the same struct 5.5–7.3 µs and checks less (go test -bench DecodeEnvelope
// ./profile, 2 cores, 2026-12-03; TestEnvelopeJSONTextMatches keeps the reference honest). The
// scanner stays: it is faster and stricter (depth 64, packet_id bounds, the P-ID-2 keys).
//
// All functions and a *Catalog are safe for concurrent use.
package profile
