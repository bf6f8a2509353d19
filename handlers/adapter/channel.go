package adapter

import "encoding/json"

// Connection is the Connection Descriptor's `connection` object (P-DECL-1).
type Connection struct {
	TargetType string   `json:"target_type"`
	Profiles   []string `json:"profiles"`
}

// Binding binds a channel to one target adapter; Config may hold secrets and is never returned
// by the API as is.
type Binding struct {
	Adapter string          `json:"adapter"`
	Config  json.RawMessage `json:"config,omitempty"`
}

// Channel is one open channel: its descriptor and its target binding (the registry's record,
// KV xim_channels).
type Channel struct {
	ID         string     `json:"connector_channel_id"`
	Connection Connection `json:"connection"`
	Target     Binding    `json:"target"`
	OpenedAt   int64      `json:"opened_at"`
	// Revision is the KV revision of this record (changes on every re-open).
	Revision uint64 `json:"-"`
}
