package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/subjects"
)

// ReplyQueue holds the replies (acks, error packets) that found no live xAgent connection and
// sends them once a gateway has one, so an ack produced while xAgent was away is not lost
// (edge-api §5.1: every chat.message gets its ack). A reply goes to its gateway directly first
// (Replier); only one nobody could write costs a JetStream write here.
type ReplyQueue struct {
	js      jetstream.JetStream
	nc      *nats.Conn
	metrics *prometheus.CounterVec
	logger  *slog.Logger
}

// NewReplyQueue returns the queue on stream XIM_REPLIES (provisioned by pipeline.Provision);
// metrics counts every reply's fate in ximd_replies_total{outcome}.
func NewReplyQueue(js jetstream.JetStream, nc *nats.Conn, metrics *prometheus.CounterVec, logger *slog.Logger) *ReplyQueue {
	return &ReplyQueue{js: js, nc: nc, metrics: metrics, logger: logger}
}

// put queues an encoded reply packet. msgID de-duplicates a reply queued twice.
func (q *ReplyQueue) put(ctx context.Context, channel, msgID string, b []byte) error {
	subject, err := subjects.QueuedReply(channel)
	if err != nil {
		return err
	}
	if _, err := q.js.Publish(ctx, subject, b, jetstream.WithMsgID(msgID)); err != nil {
		return fmt.Errorf("queue reply: %w", err)
	}
	q.metrics.WithLabelValues(string(replyQueued)).Inc()
	return nil
}

// Run sends queued replies until ctx ends (the worker role): each goes to any gateway with a live
// connection; while there is none it is tried again, 1s doubling to 30s.
func (q *ReplyQueue) Run(ctx context.Context) error {
	return consumeWorkItems(ctx, q.js, subjects.StreamReplies, subjects.RepliesConsumer, 64, q.handle, q.logger)
}

func (q *ReplyQueue) handle(ctx context.Context, m jetstream.Msg) Outcome {
	rctx, cancel := context.WithTimeout(ctx, replyTimeout)
	resp, err := q.nc.RequestWithContext(rctx, subjects.GatewaySend, m.Data())
	cancel()
	if err == nil && string(resp.Data) == gatewaySent {
		q.metrics.WithLabelValues(string(replySentLate)).Inc()
		return Done()
	}
	attempts := uint64(1)
	if md, err := m.Metadata(); err == nil {
		attempts = md.NumDelivered
	}
	return RetryAfter(queuedReplyDelay(attempts))
}

// queuedReplyDelay is the wait before the attempts+1-th try of a queued reply: 1s doubling to 30s.
func queuedReplyDelay(attempts uint64) time.Duration {
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(time.Second), backoff.WithMaxInterval(30*time.Second),
		backoff.WithRandomizationFactor(0), backoff.WithMaxElapsedTime(0))
	d := b.NextBackOff()
	for i := uint64(1); i < min(attempts, 16); i++ {
		d = b.NextBackOff()
	}
	return d
}

// replyTimeout bounds one hand-over of a reply to a gateway.
const replyTimeout = 2 * time.Second

// errNoConnection: the gateway answered that it has no live xAgent connection.
var errNoConnection = errors.New("no live xAgent connection")
