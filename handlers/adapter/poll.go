package adapter

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/ximd/ximd/profile"
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

// Inboxes are the open channels a poll loop or an inbound request serves, and their inboxes.
type Inboxes interface {
	// Channels are the channels served (a Poll's: those of its key, which stay the same for
	// the whole Poll; a Receiver's: every open channel of the adapter).
	Channels() []Channel
	// Inbox is the inbox of one of them.
	Inbox(channelID string) Inbox
}

// Feed is what one poll loop reads for: its channels and their inboxes, and the key's position
// in the platform's stream.
type Feed interface {
	Inboxes
	// Cursor is the position saved last ("" before the first save).
	Cursor(ctx context.Context) (string, error)
	// SaveCursor saves the position once everything read before it is submitted.
	SaveCursor(ctx context.Context, cursor string) error
}

// Inbox is where a poller (or a Receiver) puts what it reads of one channel: user messages for
// xAgent (the send path, as the webhook inbound route feeds it) and their files.
type Inbox interface {
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
	// Receive handles a request for ch, an open channel of the adapter: it checks the
	// platform's signature with ch's config, submits what the request carries through the
	// inbox of the channel it belongs to (ch's own, or, for a platform that calls one URL for a
	// whole account, one of in.Channels()), and writes the answer. It returns the outcome for
	// the metrics ([Accepted], [Duplicate], [Ignored], ...); a refusal is returned as a
	// *profile.Error instead, which the gateway writes.
	Receive(w http.ResponseWriter, r *http.Request, ch Channel, in Inboxes) (Received, error)
	// Refusal answers a request for a channel that is not open on this adapter exactly as a
	// bad signature is answered, so the route tells nobody without a secret which channels exist.
	Refusal() error
}

// Received is what became of a platform's message or event that reached an adapter, as the
// metrics count it (ximd_inbound_requests_total{outcome}, ximd_poll_updates_total{outcome}): one
// of the values below, or the code of a refusal the profile made.
type Received string

// Received values.
const (
	// Accepted: submitted for xAgent.
	Accepted Received = "accepted"
	// Duplicate: submitted already (a platform's redelivery).
	Duplicate Received = "duplicate"
	// Ignored: nothing to pass on (a bot's own message, a sticker, an event of no interest).
	Ignored Received = "ignored"
)

// Submit submits a user message through in and names the outcome for the metrics: [Accepted],
// [Duplicate] (submitted already), or the code of a refusal the profile makes (the message is
// then logged as event, with the channel, and skipped: it will not pass however often it comes).
// Any other failure is returned, and the platform's message is read again.
func Submit(ctx context.Context, in Inbox, m profile.Message, log *slog.Logger, event, channel string) (Received, error) {
	ok, err := in.Submit(ctx, m)
	var pe *profile.Error
	switch {
	case errors.As(err, &pe) && !pe.Retryable:
		log.Warn(event, "channel", channel, "message_id", m.MessageID, "code", pe.Code, "err", pe.Message)
		return Received(pe.Code), nil
	case err != nil:
		return "", err
	case !ok:
		return Duplicate, nil
	}
	return Accepted, nil
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

// FileOrNote passes one file of a user message on: fetch stores it in the Transfer Plane through
// in (Inbox.PutFile) and it is added to m.Files. A failure that will not pass however often the
// message is read (a *profile.Error that is not retryable: too large, gone, refused) names the
// file in m.Text instead ([Unpassed]), so the message says so rather than the file vanishing.
// Any other failure is returned, after the message's files stored so far are discarded: the
// platform's message is read again, and nothing of it stays behind meanwhile.
func FileOrNote(ctx context.Context, in Inbox, m *profile.Message, name string, fetch func() (profile.File, error)) error {
	f, err := fetch()
	var pe *profile.Error
	switch {
	case errors.As(err, &pe) && !pe.Retryable:
		m.Text = Unpassed(m.Text, name, pe.Message)
	case err != nil:
		for _, done := range m.Files {
			_ = in.Discard(context.WithoutCancel(ctx), done.FileRef)
		}
		return err
	default:
		m.Files = append(m.Files, f)
	}
	return nil
}

// ReadBody is the receive prologue: the body of a request the gateway routed to a [Receiver]
// (bounded by XIM_MAX_PACKET_BYTES). A body past the bound is a *profile.Error
// packet_too_large, another failure to read it bad_request.
func ReadBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, profile.Errorf(profile.CodePacketTooLarge, "body exceeds %d bytes", tooLarge.Limit)
		}
		return nil, profile.Errorf(profile.CodeBadRequest, "body: %v", err)
	}
	return body, nil
}

// Route is what a [Receiver] serves under each of its channels, for [Kit.StartReceive].
type Route[C any] struct {
	// Path is the route's last segment: POST /v1/targets/{adapter}/{channel}/{Path}.
	Path string
	// Accept checks the request against the channel's config before the body is read: the
	// config takes this route, the request carries the channel's secret. nil accepts.
	Accept func(r *http.Request, c C) bool
	// Refusal answers a request whose channel config does not parse or that Accept refuses:
	// the adapter's Refusal, so a refused request tells nothing of which channels exist.
	Refusal error
}

// StartReceive is the receive prologue of a [Receiver]: another path than rt.Path is
// not_found; ch's config is parsed and accepted, else the request is answered rt.Refusal, before
// anything of the body is read; then the body is read ([ReadBody]).
func (k Kit[C, P]) StartReceive(r *http.Request, ch Channel, rt Route[C]) (c C, body []byte, err error) {
	if r.PathValue("path") != rt.Path {
		return c, nil, profile.Errorf(profile.CodeNotFound, "no route %s %s", r.Method, r.URL.Path)
	}
	if c, err = k.parse(ch.Target.Config); err != nil || (rt.Accept != nil && !rt.Accept(r, c)) {
		return c, nil, rt.Refusal
	}
	body, err = ReadBody(r)
	return c, body, err
}
