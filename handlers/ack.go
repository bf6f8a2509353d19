package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/ximd/ximd/handlers/spans"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// Origin is where an inbound packet came from: replies go back to that gateway, which writes
// them to the same connection if it is still open, else to any live one.
type Origin struct {
	Gateway string
	Conn    string
}

// MsgPublisher publishes a core NATS message (a *nats.Conn).
type MsgPublisher interface {
	PublishMsg(m *nats.Msg) error
}

// Requester sends a core NATS request (a *nats.Conn).
type Requester interface {
	RequestMsgWithContext(ctx context.Context, m *nats.Msg) (*nats.Msg, error)
}

// Replier sends acks and error packets to xAgent (P-ACK-1, P-ACK-2, edge-api §5): to the gateway
// the packet came through, which writes it to the same connection if it is still open, else to any
// live one, and answers whether it could. A reply no gateway could write (xAgent disconnected, the
// gateway gone) is queued (ReplyQueue) and sent once xAgent is back.
type Replier struct {
	nc      Requester
	queue   *ReplyQueue
	metrics *Metrics
	logger  *slog.Logger
}

// NewReplier returns a Replier requesting on nc and queuing in q.
func NewReplier(nc Requester, q *ReplyQueue, m *Metrics, logger *slog.Logger) *Replier {
	return &Replier{nc: nc, queue: q, metrics: m, logger: logger}
}

// Ack answers a chat.message packet: reply_to is its packet_id, channel and message_id are the
// message's (P-ACK-1/2).
func (r *Replier) Ack(ctx context.Context, to Origin, in profile.Envelope, ack profile.Ack) error {
	code := ack.Code
	r.metrics.Acks.WithLabelValues(ack.Status, code).Inc()
	return r.send(ctx, to, in.ChannelID, profile.TypeAck, in.PacketID, ack)
}

// Error sends an `error` packet replying to in.
func (r *Replier) Error(ctx context.Context, to Origin, in profile.Envelope, e *profile.Error) error {
	r.metrics.Errors.WithLabelValues(e.Code).Inc()
	return r.send(ctx, to, in.ChannelID, profile.TypeError, in.PacketID, profile.ErrorPayloadOf(e))
}

func (r *Replier) send(ctx context.Context, to Origin, channel, typ, replyTo string, payload any) error {
	ctx, span := spans.Start(ctx, tracer, trace.SpanKindProducer, "reply", typ)
	defer span.End()
	if span.IsRecording() { // off, no attribute is built
		span.SetAttributes(attrChannel.String(channel), attrType.String(typ))
	}
	subject, err := subjects.Reply(to.Gateway)
	if err != nil {
		return fmt.Errorf("reply: %w", err)
	}
	pkt, err := profile.NewPacket(channel, typ, replyTo, payload)
	if err != nil {
		return fmt.Errorf("reply: %w", err)
	}
	b, err := json.Marshal(pkt)
	if err != nil {
		return fmt.Errorf("reply: %w", err)
	}
	m := nats.NewMsg(subject)
	m.Header.Set(subjects.HeaderConn, to.Conn)
	m.Data = b
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replyTimeout)
	resp, err := r.nc.RequestMsgWithContext(rctx, m)
	cancel()
	switch {
	case err == nil && string(resp.Data) == gatewaySent:
		r.metrics.Replies.WithLabelValues(string(replySent)).Inc()
		return nil
	case err == nil, errors.Is(err, nats.ErrNoResponders):
		if err == nil {
			err = errNoConnection
		}
		// No connection to write it to (or its gateway is gone): keep it for when xAgent is back.
		if qerr := r.queue.put(ctx, channel, typ+":"+replyTo, b); qerr != nil {
			return fmt.Errorf("reply (%v): %w", err, qerr)
		}
		return nil
	case errors.Is(err, nats.ErrConnectionClosed):
		return nil // shutting down: xAgent retransmits (P-ACK-3), answered duplicate
	default:
		// The gateway may or may not have written it: sending it again could answer the packet
		// twice. A lost reply is recovered by xAgent's retransmission (P-ACK-3).
		r.metrics.Replies.WithLabelValues(string(replyUnknown)).Inc()
		r.logger.Warn("reply_outcome_unknown", "channel", channel, "packet_id", replyTo, "stage", "reply", "err", err)
		return nil
	}
}
