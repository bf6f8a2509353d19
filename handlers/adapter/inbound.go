package adapter

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/ximd/ximd/profile"
)

// Inboxes are the open channels a poll loop or an inbound request serves, and their inboxes; and
// the bots it serves, which open channels for the conversations that reach them.
type Inboxes interface {
	Bots
	// Channels are the channels PUT that are served (a Poll's: those of its key, which stay the
	// same for the whole Poll; a Receiver's: every open channel PUT on the adapter). A bot's
	// channels are not among them: its arrivals find them through Admit.
	Channels() []Channel
	// Inbox is the inbox of one of them.
	Inbox(channelID string) Inbox
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
