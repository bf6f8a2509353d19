package adapter

import (
	"encoding/json"
	"time"
)

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
	// Bot is the bot that opened the channel for Conversation ("": a channel PUT). A bot's
	// channel stores neither connection nor target: both are its bot's, with the conversation
	// bound ([BotTaker.Bind]), filled in when the channel is looked up.
	Bot          string        `json:"bot,omitempty"`
	Conversation *Conversation `json:"conversation,omitempty"`
	// Announced: xAgent acked a user message of this bot's channel sent after its channel.opened;
	// until then every user message is sent after one (edge-api §4.1).
	Announced bool `json:"announced,omitempty"`
	// Revision is the KV revision of this record (changes on every re-open).
	Revision uint64 `json:"-"`
	// BotRevision is the revision of the bot a bot's channel was filled in from (0: a channel
	// PUT): a target opened for the channel is opened again when either changes.
	BotRevision uint64 `json:"-"`
}

// BindGrace: a conversation's messages are the agent's from its channel's binding (PUT) on, and
// this much earlier, for a platform clock ahead of ximd's. Older messages (a late retry, updates
// a platform still holds from before the binding) were said before the conversation was the
// agent's, and are not passed on.
const BindGrace = 5 * time.Second

// Predates reports whether a platform message written at unixMilli (the platform's clock) was
// written before the channel was the agent's: before its binding, less [BindGrace].
func (c Channel) Predates(unixMilli int64) bool {
	return unixMilli < c.Since()
}

// Since is the earliest time, in Unix milliseconds, of a message the channel passes on: its
// binding less [BindGrace].
func (c Channel) Since() int64 { return c.OpenedAt - BindGrace.Milliseconds() }
