// Package files is the Transfer Plane of edge-api §6: file bytes in a JetStream Object Store
// bucket (default "xim_files"), uploaded by xAgent with POST /files/uploads and fetched with
// GET /files/refs/{file_ref}, by xAgent with its bearer token or by target systems with a signed
// link.
//
// # Storage
//
// Each file is one object named by its file_ref: "file_" followed by 32 lowercase hex digits
// (128 bits from crypto/rand), so refs are unguessable. The object's metadata holds the owning
// channel, type, filename, mime type and expires_at (unix ms). Provision creates the bucket with
// max age TTL (XIM_FILE_TTL, default 24h), which removes the bytes, and max bytes MaxBucketBytes
// (default 10 GiB, discard-new: a full bucket refuses uploads with a retryable internal_error
// instead of dropping files early). Stat and Open also treat a file whose expires_at has passed
// as not found, so an expired file is never served while the bucket's expiry catches up. A file
// of another channel is not found either, with the same error (no leak of which).
//
// Uploads are streamed into the bucket in chunks, never buffered whole; past MaxFileBytes
// (XIM_MAX_FILE_BYTES, default 64 MiB) the upload is answered 413 file_too_large and the chunks
// already written are purged. PurgeChannel removes every file of a channel when the channel is
// deleted (P-STATE-7).
//
// # Signed links
//
// SignedURL gives PublicURL + "/files/refs/<ref>?exp=<unix s>&sig=<hex HMAC-SHA256(key,
// ref + "\n" + exp)>", valid for LinkTTL (default 1h: long enough for a target to fetch right
// after delivery and retry, short enough not to leave lasting capabilities around). The key is
// shared by every gateway (the caller loads it; at least 32 bytes). A link is checked in
// constant time; a missing, tampered or expired link without the bearer token is answered 401
// unauthorized rather than 404, so a link never reveals whether its file exists. A link's
// signature, the token and the key are never logged or echoed.
//
// # Downloads
//
// Responses carry Content-Type (the stored mime type), Content-Length, Content-Disposition:
// attachment with an ASCII fallback filename and an RFC 8187 filename* (safe against
// header injection), Cache-Control: private, X-Content-Type-Options: nosniff and
// Content-Security-Policy: sandbox, so uploaded HTML or SVG is never rendered in the edge's
// origin.
package files
