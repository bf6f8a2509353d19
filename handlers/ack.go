package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

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

// Replier sends acks and error packets to xAgent (P-ACK-1, P-ACK-2, edge-api §5).
type Replier struct {
	nc      MsgPublisher
	metrics *Metrics
	logger  *slog.Logger
}

// NewReplier returns a Replier publishing on nc.
func NewReplier(nc MsgPublisher, m *Metrics, logger *slog.Logger) *Replier {
	return &Replier{nc: nc, metrics: m, logger: logger}
}

// Ack answers a chat.message packet: reply_to is its packet_id, channel and message_id are the
// message's (P-ACK-1/2).
func (r *Replier) Ack(ctx context.Context, to Origin, in profile.Envelope, ack profile.Ack) error {
	code := ack.Code
	r.metrics.Acks.WithLabelValues(ack.Status, code).Inc()
	return r.send(to, in.ChannelID, profile.TypeAck, in.PacketID, ack)
}

// Error sends an `error` packet replying to in.
func (r *Replier) Error(ctx context.Context, to Origin, in profile.Envelope, e *profile.Error) error {
	r.metrics.Errors.WithLabelValues(e.Code).Inc()
	return r.send(to, in.ChannelID, profile.TypeError, in.PacketID, profile.ErrorPayloadOf(e))
}

func (r *Replier) send(to Origin, channel, typ, replyTo string, payload any) error {
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
	if err := r.nc.PublishMsg(m); err != nil {
		// A lost reply is recovered by xAgent's retransmission (P-ACK-3), answered duplicate.
		if errors.Is(err, nats.ErrConnectionClosed) {
			return nil
		}
		return fmt.Errorf("reply: %w", err)
	}
	return nil
}
