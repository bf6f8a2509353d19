package webchat

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// Name is the adapter name, the value of `target.adapter`.
const Name = "webchat"

// Options configure an [Adapter].
type Options struct {
	// JetStream holds the webchat state (stream XIM_WEBCHAT). Required.
	JetStream jetstream.JetStream
	// Logger receives a debug record per write (never a secret). Optional: nil discards.
	Logger *slog.Logger
	// Now is the clock (tests). Optional.
	Now func() time.Time
}

// Adapter is the webchat [adapter.Opener]. It is safe for concurrent use. Its Name is
// "webchat"; its Public is the config without the secret and the stamped channel; Open returns
// the channel's target. A target opened from a config without the stamped channel id (the
// channels API's validation) cannot write: its calls fail with target_delivery_failed.
type Adapter struct {
	adapter.Kit[Config, publicConfig]
	store *Store
	log   *slog.Logger
	now   func() time.Time
}

var _ adapter.Opener = (*Adapter)(nil)

// New returns the webchat adapter.
func New(opts Options) (*Adapter, error) {
	if opts.JetStream == nil {
		return nil, errors.New("webchat: JetStream is required")
	}
	a := &Adapter{store: NewStore(opts.JetStream), log: adapter.OrDiscard(opts.Logger), now: opts.Now}
	if a.now == nil {
		a.now = time.Now
	}
	a.Kit = adapter.NewKit(Name, ParseConfig, Config.public, a.open)
	return a, nil
}

// Store is the adapter's store (the gateway's page handler reads and writes the same items).
func (a *Adapter) Store() *Store { return a.store }

// Capabilities of every webchat target: streamed by editing the bubble in place, status shown
// as such.
// A message is found by its idempotency key, so an interrupted delivery is settled by lookup.
var Capabilities = adapter.Capabilities{Streaming: adapter.StreamingEdit, Activity: adapter.ActivityStatus, Reply: adapter.ReplyNative, InDoubt: adapter.InDoubtLookup}

func (a *Adapter) open(c Config) (adapter.Target, error) {
	return &Target{a: a, channel: c.Channel}, nil
}

// Target is one channel's webchat: its messages and status are items of stream XIM_WEBCHAT,
// which the gateways stream to the channel's pages.
type Target struct {
	a       *Adapter
	channel string
}

var (
	_ adapter.Target         = (*Target)(nil)
	_ adapter.Editor         = (*Target)(nil)
	_ adapter.ActivityShower = (*Target)(nil)
	_ adapter.Reconciler     = (*Target)(nil)
)

// Capabilities: streaming edit, activity status.
func (t *Target) Capabilities() adapter.Capabilities { return Capabilities }

// Send creates an assistant message. It is idempotent on m.IdempotencyKey: the target message
// id is derived from the key, and a second Send with the same key returns the same id and
// writes nothing (the message keeps the state it has; the caller applies a final with Edit).
func (t *Target) Send(ctx context.Context, m adapter.Message) (string, error) {
	if err := t.bound(); err != nil {
		return "", err
	}
	key := m.IdempotencyKey
	if key == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		key = "nokey:" + hex.EncodeToString(b)
	}
	id := AssistantItemID(key)
	now := t.a.now().UnixMilli()
	it := Item{Kind: KindMessage, ID: id, Role: RoleAssistant, Text: m.Text, Files: filesOf(m.Files), Final: m.Final, ReplyTo: m.ReplyTo, Created: now, Updated: now}
	created, err := t.a.store.Put(ctx, t.channel, id, it, true)
	if err != nil {
		return "", unavailable("send", err)
	}
	t.a.log.Debug("webchat_send", "channel", t.channel, "target_message_id", id, "final", m.Final, "created", created)
	return id, nil
}

// Edit replaces the whole text (and files) of an assistant message. An edit that is not final
// after the final was applied is ignored: a late streamed part never undoes the final.
func (t *Target) Edit(ctx context.Context, targetMessageID string, m adapter.Message) error {
	if err := t.bound(); err != nil {
		return err
	}
	if !strings.HasPrefix(targetMessageID, "a") || len(targetMessageID) != 25 {
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "edit: %q is not a webchat message id", targetMessageID)
	}
	cur, _, found, err := t.a.store.Get(ctx, t.channel, targetMessageID)
	if err != nil {
		return unavailable("edit", err)
	}
	if !found {
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "edit: message %s not found (expired or channel purged)", targetMessageID)
	}
	if cur.Final && !m.Final {
		return nil
	}
	cur.Text, cur.Files, cur.Final, cur.Updated = m.Text, filesOf(m.Files), m.Final, t.a.now().UnixMilli()
	if _, err := t.a.store.Put(ctx, t.channel, targetMessageID, cur, false); err != nil {
		return unavailable("edit", err)
	}
	t.a.log.Debug("webchat_edit", "channel", t.channel, "target_message_id", targetMessageID, "final", m.Final, "text_bytes", len(m.Text))
	return nil
}

// ShowActivity sets the channel's status line (thinking, tool with its name, typing, idle).
func (t *Target) ShowActivity(ctx context.Context, act adapter.Activity) error {
	if err := t.bound(); err != nil {
		return err
	}
	it := Item{Kind: KindStatus, Status: string(act.Status), Updated: t.a.now().UnixMilli()}
	if act.Status == adapter.StatusTool {
		it.ToolName = act.ToolName
	}
	if _, err := t.a.store.Put(ctx, t.channel, statusItem, it, false); err != nil {
		return unavailable("activity", err)
	}
	return nil
}

// Lookup tells whether the message of idempotencyKey exists, and whether its final content
// was applied ([adapter.Reconciler]). It reads the stream, so it holds across restarts for as
// long as the message is kept (StoreConfig.MaxAge after its last change).
func (t *Target) Lookup(ctx context.Context, idempotencyKey string) (adapter.Shown, bool, error) {
	if err := t.bound(); err != nil {
		return adapter.Shown{}, false, err
	}
	id := AssistantItemID(idempotencyKey)
	it, _, found, err := t.a.store.Get(ctx, t.channel, id)
	if err != nil {
		return adapter.Shown{}, false, unavailable("lookup", err)
	}
	if !found {
		return adapter.Shown{}, false, nil
	}
	return adapter.Shown{ID: id, Final: it.Final, Text: it.Text}, true, nil
}

// statusItem is the item token of the channel's status (subjects.WebchatStatus).
const statusItem = "status"

func (t *Target) bound() error {
	if t.channel == "" {
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "webchat target opened without its channel (not bound through webchat.WithChannelIDs)")
	}
	return nil
}

func filesOf(fs []adapter.File) []File {
	if len(fs) == 0 {
		return nil
	}
	out := make([]File, len(fs))
	for i, f := range fs {
		out[i] = File{Type: f.Type, FileRef: f.FileRef, Filename: f.Filename, MimeType: f.MimeType, ByteSize: f.ByteSize}
	}
	return out
}

// unavailable maps a JetStream failure to target_unavailable (retryable): the webchat store is
// the target system, and NATS being unreachable is a temporary outage.
func unavailable(op string, err error) error {
	var pe *profile.Error
	if errors.As(err, &pe) {
		return err
	}
	return fmt.Errorf("%w: %w", profile.Errorf(profile.CodeTargetUnavailable, "webchat %s: store unavailable", op), err)
}
