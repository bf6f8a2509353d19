package handlers

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ximd/ximd/subjects"
)

// Place is a packet's place in XIM_IN: its channel's partition and its stream sequence, which
// orders every packet of one channel whichever stage consumer reads it.
type Place struct {
	Partition int
	Seq       uint64
}

// StatusClearer clears a channel's shown status (P-ACT-5: the final, the first displayed delta)
// for a packet at place, and returns once no status call of the channel is in flight: what the
// caller shows next reaches the target after any status shown before it, and no status older than
// the packet is shown afterwards.
type StatusClearer interface {
	ClearStatus(ctx context.Context, channel string, at Place)
}

// Clearer is the StatusClearer of the deliver and assemble stages. The activity stage may run in
// this worker or in another one: the local stage is asked directly when this worker serves the
// channel's activity partition; otherwise a request on core NATS (subjects.ClearRequest,
// addressed to the worker that serves it) is answered by that worker's ServeClear, bounded by
// ClearTimeout (a worker that died answers nothing: no responders, at once). A lost request
// leaves the status to the activity timeout (P-ACT-6); it never fails the message.
type Clearer struct {
	// Local is this worker's activity stage (nil when it runs none).
	Local *Activity
	// Owner is the instance serving partition p of the activity stage ("" when none), and Self
	// this worker's instance.
	Owner func(p int) string
	Self  string
	// Req sends the requests.
	Req    Requester
	Logger *slog.Logger
}

// ClearTimeout bounds how long a final or a first display waits for the activity stage of
// another worker.
const ClearTimeout = 2 * time.Second

var _ StatusClearer = (*Clearer)(nil)

// ClearStatus clears the channel's status up to at and waits for a status call in flight.
func (c *Clearer) ClearStatus(ctx context.Context, channel string, at Place) {
	owner := c.Owner(at.Partition)
	if c.Local != nil && owner == c.Self {
		cctx, cancel := context.WithTimeout(ctx, ClearTimeout)
		defer cancel()
		_ = c.Local.ClearWait(cctx, channel, at.Seq)
		return
	}
	if c.Local != nil {
		c.Local.Clear(channel, at.Seq) // it may still show a status of this channel from before
	}
	if owner == "" {
		return // no worker runs the activity stage: nothing is shown
	}
	subject, err := subjects.ClearRequest(owner, channel)
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, ClearTimeout)
		_, err = c.Req.RequestMsgWithContext(rctx, &nats.Msg{Subject: subject, Data: []byte(strconv.FormatUint(at.Seq, 10))})
		cancel()
	}
	if err != nil && !errors.Is(err, nats.ErrNoResponders) {
		c.Logger.Warn("status_clear_failed", "channel", channel, "stage", "activity", "err", err)
	}
}

// ServeClear answers a clear request (subjects.ClearRequests of this worker) for the local
// activity stage once no status call of the channel is in flight. It blocks for that long: run it
// in its own goroutine.
func ServeClear(ctx context.Context, a *Activity, m *nats.Msg) {
	channel := subjects.ChannelOfClearRequest(m.Subject)
	seq, err := strconv.ParseUint(string(m.Data), 10, 64)
	if channel == "" || err != nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, ClearTimeout)
	defer cancel()
	_ = a.ClearWait(cctx, channel, seq)
	_ = m.Respond(nil)
}
