package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ximd/ximd/handlers/spans"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// Stages is the handler of every stage consumer: it decodes a stored message's packets,
// validates each and hands it to the stage of its type. A channel's packets arrive one at a
// time, in order (its lane); other channels' run meanwhile.
type Stages struct {
	catalog  *profile.Catalog
	targets  *Targets
	assemble *Assembler
	deliver  *Deliverer
	activity *Activity
	outbox   *Outbox
	replies  *Replier
	metrics  *Metrics
	logger   *slog.Logger
}

// StagesDeps are what the stages dispatch to and report through.
type StagesDeps struct {
	Catalog   *profile.Catalog
	Targets   *Targets
	Assembler *Assembler
	Deliverer *Deliverer
	Activity  *Activity
	Outbox    *Outbox
	Replies   *Replier
	Metrics   *Metrics
	Logger    *slog.Logger
}

// NewStages wires the stages.
func NewStages(deps StagesDeps) *Stages {
	return &Stages{catalog: deps.Catalog, targets: deps.Targets, assemble: deps.Assembler, deliver: deps.Deliverer, activity: deps.Activity,
		outbox: deps.Outbox, replies: deps.Replies, metrics: deps.Metrics, logger: deps.Logger}
}

// Handle is the handler of a stage consumer (run by the router through Route). Its outcome is
// Retry for an infrastructure failure only (retried with back-off, then poisoned); protocol
// outcomes are replies, and the packet is then done; a stored message that is not a packet is
// rejected (dropped). A stored message holds one packet or several of one channel
// (subjects.HeaderFrames), handled in order; when one fails, the message comes again and the
// packets before it are handled again, which the stages' idempotence makes harmless (a delta
// already applied is a retransmission).
func (s *Stages) Handle(msg *message.Message) Outcome {
	from := Origin{Gateway: msg.Metadata.Get(subjects.HeaderGateway), Conn: msg.Metadata.Get(subjects.HeaderConn)}
	var received time.Time // first deliveries only
	if n, _ := strconv.Atoi(msg.Metadata.Get(subjects.MetaNumDelivered)); n > 1 {
		s.metrics.Redeliveries.Inc()
	} else if at, err := strconv.ParseInt(msg.Metadata.Get(subjects.HeaderReceived), 10, 64); err == nil {
		received = time.Unix(0, at)
		s.metrics.InboundAge.Observe(time.Since(received).Seconds())
	}
	frames, err := subjects.SplitFrames(msg.Metadata.Get(subjects.HeaderFrames), msg.Payload)
	if err != nil {
		s.metrics.Packets.WithLabelValues(string(packetUndecodable)).Inc()
		s.logger.Warn("stored_packet_undecodable", "stage", "validate", "err", err)
		return Reject(reasonUndecodable)
	}
	for _, frame := range frames {
		if o := s.handle(msg, from, received, frame); o.Kind() != OutcomeDone {
			return o
		}
	}
	return Done()
}

// Reasons of the stage packets dropped for good.
const (
	reasonUndecodable = "ximd stages: the stored message is not a packet"
)

// handle validates one stored packet and hands it to the stage of its type. A packet that is
// not one, or not one the stages take, is done (the frames after it still count).
func (s *Stages) handle(msg *message.Message, from Origin, received time.Time, frame []byte) Outcome {
	env, err := profile.DecodeEnvelope(frame)
	if err != nil {
		// Gateways store only decodable packets; anything else was published by someone else.
		s.metrics.Packets.WithLabelValues(string(packetUndecodable)).Inc()
		s.logger.Warn("stored_packet_undecodable", "stage", "validate", "err", err)
		return Done()
	}
	pt, ok := s.catalog.Accepts(profile.FromAgent, env.Type)
	if !ok {
		s.metrics.Packets.WithLabelValues(string(packetDropped)).Inc()
		return Done()
	}
	return outcomeOf(s.dispatch(msg, from, received, env, pt.Stage))
}

// dispatch hands a decoded packet of stage to the stage of its type; an error is an
// infrastructure failure.
func (s *Stages) dispatch(msg *message.Message, from Origin, received time.Time, env profile.Envelope, stage string) error {
	ctx := msg.Context()
	ctx, span := spans.Start(otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(msg.Metadata)), tracer,
		trace.SpanKindConsumer, "stage", stage)
	defer span.End()
	if span.IsRecording() { // off, no attribute is built
		span.SetAttributes(attrChannel.String(env.ChannelID), attrType.String(env.Type), attrPacketID.String(env.PacketID))
	}
	s.metrics.Packets.WithLabelValues(env.Type).Inc()
	b, err := s.targets.Resolve(ctx, env.ChannelID)
	var pe *profile.Error
	if errors.As(err, &pe) {
		// Closed between the gateway's check and now (P-ERR-2).
		return s.replies.Error(ctx, from, env, pe)
	}
	if err != nil {
		return err
	}
	at := placeOf(msg)
	if env.Type == profile.TypeToolInvoke {
		return s.invokeTool(ctx, from, env, b, at)
	}
	p, rej := Validate(s.catalog, env)
	if rej != nil {
		if rej.MessageID != "" {
			return s.replies.Ack(ctx, from, env, profile.Rejected(rej.MessageID, rej.Err))
		}
		return s.replies.Error(ctx, from, env, rej.Err)
	}
	switch {
	case p.Message != nil:
		err := s.deliver.Deliver(ctx, from, env, *p.Message, b, at)
		if err == nil && !received.IsZero() {
			s.metrics.AckLatency.Observe(time.Since(received).Seconds())
		}
		return err
	case p.Delta != nil:
		perr, err := s.assemble.Apply(ctx, b, *p.Delta, at, s.deliver.Completed(b.Channel, p.Delta.MessageID))
		if err != nil {
			return err
		}
		if perr != nil {
			return s.replies.Error(ctx, from, env, perr)
		}
	case p.Activity != nil:
		s.activity.Show(b, *p.Activity, at.Seq)
	case p.Ack != nil:
		return s.outbox.HandleAck(ctx, b.Channel, *p.Ack)
	}
	return nil
}

// placeOf reads a stored packet's place from the subscriber's metadata.
func placeOf(msg *message.Message) Place {
	seq, _ := strconv.ParseUint(msg.Metadata.Get(subjects.MetaStreamSeq), 10, 64)
	return Place{Partition: subjects.PartitionOfStored(msg.Metadata.Get(subjects.MetaSubject)), Seq: seq}
}

// ChannelClosed drops every piece of a closed channel's state held in this worker.
func (s *Stages) ChannelClosed(channel string) {
	s.assemble.DropChannel(channel)
	s.activity.Drop(channel)
	s.deliver.done.dropChannel(channel)
	s.targets.Forget(channel)
}

// PoisonHandler answers packets a partition gave up on (run by the router through Route): a
// chat.message still gets its one ack, `rejected` `internal_error` with retryable=true (xAgent
// retransmits it later), a tool.invoke its one tool.result with that error. A reply that could
// not be handed over is retried, like a stage's.
func (s *Stages) PoisonHandler(msg *message.Message) Outcome {
	frames, err := subjects.SplitFrames(msg.Metadata.Get(subjects.HeaderFrames), msg.Payload)
	if err != nil {
		return Reject(reasonUndecodable)
	}
	for _, frame := range frames {
		if err := s.poisoned(msg, frame); err != nil {
			return Retry(err)
		}
	}
	return Done()
}

// poisoned answers one packet of a message a stage gave up on.
func (s *Stages) poisoned(msg *message.Message, frame []byte) error {
	from := Origin{Gateway: msg.Metadata.Get(subjects.HeaderGateway), Conn: msg.Metadata.Get(subjects.HeaderConn)}
	env, err := profile.DecodeEnvelope(frame)
	if err == nil && env.Type == profile.TypeToolInvoke {
		var ti struct {
			InvocationID string `json:"invocation_id"`
		}
		if json.Unmarshal(env.Payload, &ti) != nil || ti.InvocationID == "" {
			return nil
		}
		s.logger.Error("tool_poisoned", "channel", env.ChannelID, "invocation_id", ti.InvocationID, "packet_id", env.PacketID, "stage", "deliver", "reason", msg.Metadata.Get("reason_poisoned"))
		return s.toolResult(context.Background(), from, env, ti.InvocationID, nil, profile.Errorf(profile.CodeInternal, "ximd could not run the tool; retry later"))
	}
	if err != nil || env.Type != profile.TypeMessage {
		return nil
	}
	id := profile.MessageIDOf(env.Payload)
	if id == "" {
		return nil
	}
	s.logger.Error("final_poisoned", "channel", env.ChannelID, "message_id", id, "packet_id", env.PacketID, "stage", "deliver", "reason", msg.Metadata.Get("reason_poisoned"))
	return s.replies.Ack(context.Background(), from, env, profile.Rejected(id, profile.Errorf(profile.CodeInternal, "ximd could not process the message; retry later")))
}

func errorCode(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return profile.CodeTargetUnavailable
	}
	return profile.CodeOf(err)
}
