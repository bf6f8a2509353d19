// Package agent plays xAgent against a running ximd over the real WebSocket edge (/v1/ws), for
// `ximctl agent` and `ximd --demo`: it acks every user chat.message (accepted, duplicate, or
// rejected) and answers it with chat.activity thinking -> tool (web_search) -> idle, the answer
// streamed as chat.message.deltas, and the final chat.message, which it sends again until it
// is acked (P-STATE-1). With EchoFiles it sends the user's files back (fetched from ximd and
// uploaded again). Failure injection (FailRate, NoAckRate) exercises ximd's retry path.
package agent
