package webchat

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/subjects"
)

// Item kinds of the webchat stream.
const (
	KindMessage = "message"
	KindStatus  = "status"
)

// Message roles.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Item is one entry of a webchat channel, exactly as stored in stream XIM_WEBCHAT and as sent
// to the page: the whole current state of one message, or the channel's activity status.
type Item struct {
	// Kind is KindMessage or KindStatus.
	Kind string `json:"kind"`
	// ID is the message's target message id ("a…" assistant, "u…" user); empty for a status.
	ID string `json:"id,omitempty"`
	// Role is RoleUser or RoleAssistant.
	Role string `json:"role,omitempty"`
	// Text is the whole text so far: the agent's Markdown, or the person's text as typed.
	Text string `json:"text,omitempty"`
	// HTML is Text rendered for the page, on an assistant message only: set by [Item.ForPage]
	// as the gateway sends the item, never stored (a stored value is dropped).
	HTML string `json:"html,omitempty"`
	// Files of a final message.
	Files []File `json:"files,omitempty"`
	// Final is true once the message's final content is applied.
	Final bool `json:"final,omitempty"`
	// ReplyTo is the id of the message this one replies to (im.reply_message): the page quotes
	// it above the text.
	ReplyTo string `json:"reply_to,omitempty"`
	// ClientID is the page's id of a user message (so the page matches its own bubble).
	ClientID string `json:"client_id,omitempty"`
	// Created is when the message was first shown, Unix ms (the page orders by it).
	Created int64 `json:"created,omitempty"`
	// Updated is when this state was written, Unix ms.
	Updated int64 `json:"updated"`
	// Status and ToolName of a status item: thinking, tool, typing or idle.
	Status   string `json:"status,omitempty"`
	ToolName string `json:"tool_name,omitempty"`
}

// File is a file of a message as the page shows it; the bytes are served by the page route
// /webchat/{channel}/files/{file_ref}.
type File struct {
	Type     string `json:"type"`
	FileRef  string `json:"file_ref"`
	Filename string `json:"filename,omitempty"`
	MimeType string `json:"mime_type,omitempty"`
	ByteSize int64  `json:"byte_size,omitempty"`
}

// StoreConfig bounds stream XIM_WEBCHAT.
type StoreConfig struct {
	// MaxAge is how long a message stays after its last change: the history a page reloads
	// and the window in which [Target.Lookup] can reconcile. Default 24h.
	MaxAge time.Duration
	// MaxBytes bounds the whole stream (oldest dropped first). Default 256 MiB.
	MaxBytes int64
	// Replicas of the stream. Default 1.
	Replicas int
}

// Defaults of StoreConfig.
const (
	DefaultMaxAge   = 24 * time.Hour
	DefaultMaxBytes = 256 << 20
)

func (c StoreConfig) withDefaults() StoreConfig {
	if c.MaxAge <= 0 {
		c.MaxAge = DefaultMaxAge
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	return c
}

// StreamConfig is the configuration of stream XIM_WEBCHAT: one message kept per subject, so it
// holds the latest state of every message of every webchat channel.
func StreamConfig(c StoreConfig) jetstream.StreamConfig {
	c = c.withDefaults()
	return jetstream.StreamConfig{
		Name:              subjects.StreamWebchat,
		Description:       "ximd webchat target: latest state of each chat message and each channel's status",
		Subjects:          []string{subjects.WebchatAll},
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		MaxMsgsPerSubject: 1,
		MaxAge:            c.MaxAge,
		MaxBytes:          c.MaxBytes,
		MaxMsgSize:        4 << 20,
		Storage:           jetstream.FileStorage,
		Replicas:          c.Replicas,
		AllowDirect:       true,
		Duplicates:        time.Minute,
	}
}

// Provision creates or updates stream XIM_WEBCHAT; it is idempotent and safe to run from
// several processes at once.
func Provision(ctx context.Context, js jetstream.JetStream, c StoreConfig) error {
	if _, err := js.CreateOrUpdateStream(ctx, StreamConfig(c)); err != nil {
		return fmt.Errorf("provision stream %s: %w", subjects.StreamWebchat, err)
	}
	return nil
}

// Store reads and writes webchat items. It is safe for concurrent use.
type Store struct {
	js jetstream.JetStream

	mu     sync.Mutex
	stream jetstream.Stream
}

// NewStore returns a store on js; it binds to the stream (created by Provision) on first use.
func NewStore(js jetstream.JetStream) *Store { return &Store{js: js} }

// JetStream is the store's JetStream context.
func (s *Store) JetStream() jetstream.JetStream { return s.js }

func (s *Store) bind(ctx context.Context) (jetstream.Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stream != nil {
		return s.stream, nil
	}
	st, err := s.js.Stream(ctx, subjects.StreamWebchat)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", subjects.StreamWebchat, err)
	}
	s.stream = st
	return st, nil
}

// isWrongLast reports a failed expected-last-sequence check (10164 on replicated streams).
func isWrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Get returns the current item of subject's item, found false when there is none.
func (s *Store) Get(ctx context.Context, channel, item string) (Item, uint64, bool, error) {
	subj, err := subjects.WebchatItem(channel, item)
	if err != nil {
		return Item{}, 0, false, err
	}
	st, err := s.bind(ctx)
	if err != nil {
		return Item{}, 0, false, err
	}
	m, err := st.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Item{}, 0, false, nil
	}
	if err != nil {
		return Item{}, 0, false, err
	}
	var it Item
	if err := json.Unmarshal(m.Data, &it); err != nil {
		return Item{}, 0, false, fmt.Errorf("webchat item %s: %w", subj, err)
	}
	return it, m.Sequence, true, nil
}

// Put writes it as the current state of channel's item. With create, it succeeds only if the
// item has no state yet (created false and no error otherwise).
func (s *Store) Put(ctx context.Context, channel, item string, it Item, create bool) (created bool, err error) {
	subj, err := subjects.WebchatItem(channel, item)
	if err != nil {
		return false, err
	}
	b, err := json.Marshal(it)
	if err != nil {
		return false, err
	}
	var opts []jetstream.PublishOpt
	if create {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(0))
	}
	if _, err := s.js.Publish(ctx, subj, b, opts...); err != nil {
		if create && isWrongLast(err) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// PurgeChannel removes every item of a channel (the channel was deleted).
func (s *Store) PurgeChannel(ctx context.Context, channel string) error {
	filter, err := subjects.WebchatChannel(channel)
	if err != nil {
		return err
	}
	st, err := s.bind(ctx)
	if err != nil {
		return err
	}
	return st.Purge(ctx, jetstream.WithPurgeSubject(filter))
}

// AssistantItemID is the target message id of an assistant message: derived from its
// idempotency key, so the same key always names the same message.
func AssistantItemID(idempotencyKey string) string {
	sum := sha256.Sum256([]byte("assistant\x00" + idempotencyKey))
	return "a" + hex.EncodeToString(sum[:12])
}

// UserMessageID is the message_id to xAgent of the page's message clientID: the same client id
// always yields the same message, so a page retry never sends a second one (P-MSG-2).
func UserMessageID(clientID string) string {
	sum := sha256.Sum256([]byte("webchat-user\x00" + clientID))
	return "wc_" + hex.EncodeToString(sum[:16])
}

// UserItemID is the item id of the page's message clientID.
func UserItemID(clientID string) string {
	sum := sha256.Sum256([]byte("webchat-user\x00" + clientID))
	return "u" + hex.EncodeToString(sum[:12])
}
