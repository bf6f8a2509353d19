package adapter

import (
	"context"
	"errors"
)

// Poller is optional: an adapter whose users' messages come by polling the platform (Matrix
// /sync, Telegram getUpdates) rather than by a route the platform calls. Channels whose messages
// come through one platform stream (a Telegram bot's updates, whatever chat they are in) share
// one poll loop: PollKey names the stream. For each key, one live worker at a time runs Poll
// until ctx ends (the key's set of channels changes, the worker stops, or another worker takes
// the key over); a Poll that returns early is started again after a back-off. Poll keeps its
// position with the Feed's cursor (one per key), so a restart neither loses nor replays
// messages; a message read twice around a handover is still one message, by its message_id
// (edge-api §7.2).
type Poller interface {
	// PollKey names the stream ch's user messages come by; "" when ch is not polled (its config
	// takes them another way). It is stored (the cursor's key in KV xim_cursors) and logged, so
	// it is never a secret (a digest of one at most) and holds only letters, digits, '-', '_'
	// and '.'. A channel's own id is a valid key.
	PollKey(ch Channel) string
	// Poll reads the stream of feed's key for feed's channels until ctx ends.
	Poll(ctx context.Context, feed Feed) error
}

// ErrPollMoved is the cause (context.Cause) of a Poll's end when its key moved to another live
// worker (the live workers changed, or this one is leaving): an adapter whose platform pushes to
// one connection at a time (WeCom) may go on passing on what it pushes until the new worker
// takes the connection over, instead of losing it.
var ErrPollMoved = errors.New("the poll key moved to another worker")

// Feed is what one poll loop reads for: its channels and their inboxes, and the key's position
// in the platform's stream.
type Feed interface {
	Inboxes
	// Cursor is the position saved last ("" before the first save).
	Cursor(ctx context.Context) (string, error)
	// SaveCursor saves the position once everything read before it is submitted.
	SaveCursor(ctx context.Context, cursor string) error
}

// PollKeyOf is ch's poll key: key of its config when polled says the config takes its messages
// by polling, else "" (and "" when the config does not parse). An adapter's PollKey is this with
// its own two functions.
func (k Kit[C, P]) PollKeyOf(ch Channel, polled func(C) bool, key func(C) string) string {
	c, err := k.parse(ch.Target.Config)
	if err != nil || !polled(c) {
		return ""
	}
	return key(c)
}

// PollStart is what a Poll starts from: the feed's channels and the config of the first, which
// names the account (a bot, an app) every channel of the poll key shares.
type PollStart[C any] struct {
	Channels []Channel
	Account  C
}

// StartPoll is the poll prologue every Poll begins with. ok is false when the feed has no
// channels (the Poll has nothing to read and returns nil); the first channel's config failing
// to parse is the error.
func (k Kit[C, P]) StartPoll(feed Feed) (p PollStart[C], ok bool, err error) {
	p.Channels = feed.Channels()
	if len(p.Channels) == 0 {
		return p, false, nil
	}
	if p.Account, err = k.parse(p.Channels[0].Target.Config); err != nil {
		return p, false, err
	}
	return p, true, nil
}
