package adapter

import "net/url"

// StoredFile describes one stored file. Its JSON form is the 201 body of POST /files/uploads.
type StoredFile struct {
	// FileRef names the file: "file_" + 32 hex digits.
	FileRef string `json:"file_ref"`
	// ChannelID is the channel the file belongs to; only that channel may reference it.
	ChannelID string `json:"connector_channel_id"`
	// Type is image, video, audio or file (P-MSG-4).
	Type string `json:"type"`
	// Filename is the sanitized original name (no path, no control characters).
	Filename string `json:"filename"`
	// MimeType is the media type given at upload, or sniffed from the first 512 bytes.
	MimeType string `json:"mime_type"`
	// ByteSize is the exact size of the bytes.
	ByteSize int64 `json:"byte_size"`
	// ExpiresAt is when the file stops being served, in unix milliseconds.
	ExpiresAt int64 `json:"expires_at"`
}

// RefPath is the edge's path of a stored file's bytes (edge-api: GET /files/refs/{file_ref}).
func RefPath(fileRef string) string { return "/files/refs/" + url.PathEscape(fileRef) }
