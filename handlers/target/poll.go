package target

import (
	"context"
	"io"
	"net/http"

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

// Inbox is where a poller (or a Receiver) puts what it reads of one channel: user messages for xAgent (the send
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
	// already). A message the profile refuses is a *profile.Error; its files are discarded.
	Submit(ctx context.Context, m profile.Message) (bool, error)
	// Discard removes a stored file of a message that will not be submitted (a later file of it
	// failed), so nothing is left behind.
	Discard(ctx context.Context, fileRef string) error
}

// Receiver is optional: an adapter whose platform calls ximd with its users' messages (the
// webhook target's posts, an event subscription). The gateway routes
// POST /v1/targets/{adapter}/{channel}/{path...} to it, without the bearer token, with the body
// bounded by XIM_MAX_PACKET_BYTES and read under XIM_BODY_TIMEOUT, at most
// XIM_MAX_INBOUND_REQUESTS at once.
type Receiver interface {
	// Receive handles a request for an open channel of the adapter: it checks the platform's
	// signature, submits what the request carries through in, and writes the answer. It
	// returns the outcome for the metrics ("accepted", "duplicate", ...); a refusal is returned
	// as a *profile.Error instead, which the gateway writes.
	Receive(w http.ResponseWriter, r *http.Request, ch Channel, in Inbox) (outcome string, err error)
	// Refusal answers a request for a channel that is not open on this adapter exactly as a
	// bad signature is answered, so the route tells nobody without a secret which channels exist.
	Refusal() error
}
