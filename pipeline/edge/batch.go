package edge

import (
	"context"
	"time"

	"github.com/ximd/ximd/subjects"
)

// Bounds of one batch of a channel's deltas (one XIM_IN message).
const (
	batchMaxFrames = 128
	batchMaxBytes  = 64 << 10
)

// frameQueue is how many frames a connection's reader reads ahead of the goroutine that checks
// and publishes them.
const frameQueue = 256

// batches holds, per channel, the deltas of one connection that are checked and not yet
// published. A connection's frames are handled one at a time; whatever frames of a channel have
// queued up behind one another by then go to XIM_IN as one message (subjects.HeaderFrames), so
// the stream, the assemble stage and the server's acknowledgements pay once for them. Nothing
// waits to fill a batch: the handler publishes every batch as soon as no frame is queued (and
// at least every batchMaxFrames frames), so a lone delta is published at once and batches form
// only under load.
//
// Order is kept: a channel's batch is published before any other packet of that channel (a
// final, an activity), and one connection's publishes reach the stream in the order they are
// made.
type batches struct {
	pending map[string]*batch // by channel
}

// batch is a channel's deltas waiting to be published together.
type batch struct {
	subject  string
	ctx      context.Context // the first frame's: the parent of the publish span
	received time.Time       // the first frame's arrival
	frames   [][]byte
	bytes    int
}

func newBatches() *batches { return &batches{pending: map[string]*batch{}} }

// add appends a checked delta to its channel's batch; it returns a full batch to publish now
// (taken out), or nil.
func (bs *batches) add(ctx context.Context, channel, subject string, received time.Time, frame []byte) (full *batch) {
	b := bs.pending[channel]
	if b != nil && (len(b.frames) == batchMaxFrames || b.bytes+len(frame) > batchMaxBytes) {
		full = b
		b = nil
	}
	if b == nil {
		b = &batch{subject: subject, ctx: ctx, received: received}
		bs.pending[channel] = b
	}
	b.frames = append(b.frames, frame)
	b.bytes += len(frame)
	return full
}

// take removes and returns a channel's batch (nil when it has none).
func (bs *batches) take(channel string) *batch {
	b := bs.pending[channel]
	delete(bs.pending, channel)
	return b
}

// payload is what the batch stores: the lone packet, or the packets joined (with the
// HeaderFrames value).
func (b *batch) payload() (data []byte, lengths string) {
	if len(b.frames) == 1 {
		return b.frames[0], ""
	}
	return subjects.JoinFrames(b.frames)
}
