package handlers

import (
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/ximd/ximd/subjects"
)

// FinishNotifier tells the assemble stage that a message is final when the final was delivered
// by a worker that held no delta buffer of it: the buffer, if any, is in the worker serving the
// message's assemble partition, and is dropped there (P-STATE-5).
type FinishNotifier interface {
	NotifyFinished(channel, messageID string, at Place)
}

// Publisher publishes a core NATS message (a *nats.Conn).
type Publisher interface {
	Publish(subject string, data []byte) error
}

// Finisher is the FinishNotifier of the deliver stage: a core NATS notice (subjects.FinishNotice)
// to the worker serving the channel's assemble partition, answered by nobody; none when that
// worker is this one (its buffers were just finished) or no worker runs the stage. A lost notice
// leaves the buffer to XIM_DELTA_TTL; the message's record keeps it from touching the final.
type Finisher struct {
	// Owner is the instance serving partition p of the assemble stage ("" when none), and Self
	// this worker's instance.
	Owner  func(p int) string
	Self   string
	Pub    Publisher
	Logger *slog.Logger
}

var (
	_ FinishNotifier = (*Finisher)(nil)
	_ Publisher      = (*nats.Conn)(nil)
)

// NotifyFinished sends the notice to the assemble stage's worker, unless it is this one.
func (f *Finisher) NotifyFinished(channel, messageID string, at Place) {
	owner := f.Owner(at.Partition)
	if owner == "" || owner == f.Self {
		return
	}
	subject, err := subjects.FinishNotice(owner, channel)
	if err == nil {
		err = f.Pub.Publish(subject, []byte(messageID))
	}
	if err != nil {
		f.Logger.Warn("finish_notice_failed", "channel", channel, "message_id", messageID, "stage", "deliver", "err", err)
	}
}
