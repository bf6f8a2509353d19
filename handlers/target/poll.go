package target

import (
	"context"
	"io"

	"github.com/ximd/ximd/profile"
)

// Poller is optional: an adapter whose users' messages come by polling the platform (Matrix
// /sync, Telegram getUpdates) rather than by a route the platform calls. For each open channel
// of the adapter, one live worker at a time runs Poll until ctx ends (the channel closed or
// changed, the worker stops, or another worker takes the channel over); a Poll that returns
// early is started again after a back-off. Poll keeps its position with the Inbox's cursor, so
// a restart neither loses nor replays messages; a message read twice around a handover is
// still one message, by its message_id (edge-api §7.2).
type Poller interface {
	Poll(ctx context.Context, ch Channel, in Inbox) error
}

// Inbox is where a poller puts what it reads of one channel: user messages for xAgent (the send
// path, as the webhook inbound route feeds it), their files, and its position.
type Inbox interface {
	// Cursor is the position saved last ("" before the first save).
	Cursor(ctx context.Context) (string, error)
	// SaveCursor saves the position once everything read before it is submitted.
	SaveCursor(ctx context.Context, cursor string) error
	// Seen reports whether a message_id was submitted already (a platform redelivery).
	Seen(ctx context.Context, messageID string) (bool, error)
	// PutFile stores a file of a user message in the Transfer Plane, and returns it as the
	// message's file.
	PutFile(ctx context.Context, f StoredFile, r io.Reader) (profile.File, error)
	// Submit validates a user message and makes it pending for xAgent (false: submitted
	// already). A message the profile refuses is a *profile.Error.
	Submit(ctx context.Context, m profile.Message) (bool, error)
}
