package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/ximd/ximd/handlers/spans"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// OutState is a user message's record state in BucketOutbox (the JSON "state").
type OutState string

// The outbound record states.
const (
	OutPending   OutState = "pending"   // not yet acked accepted/duplicate: sent again until it is
	OutDelivered OutState = "delivered" // acked accepted or duplicate; kept to absorb target redeliveries
	OutFailed    OutState = "failed"    // rejected with retryable=false: never sent again (P-STATE-3)
	OutExpired   OutState = "expired"   // pending longer than the maximum age
)

// Code of the terminal failure of a user message pending too long.
const codeExpired = profile.CodeExpired

// OutRecord is one user message to xAgent (Connector -> xAgent chat.message).
type OutRecord struct {
	State     OutState        `json:"state"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt int64           `json:"created_at"`
	Attempts  int             `json:"attempts"`
	PacketID  string          `json:"packet_id,omitempty"` // of the last send
	SentAt    int64           `json:"sent_at,omitempty"`
	WorkSeq   uint64          `json:"work_seq"` // the XIM_OUT work item that schedules it
	Code      string          `json:"code,omitempty"`
	Message   string          `json:"message,omitempty"`
	At        int64           `json:"at"`
	// Opened is the payload of the channel.opened packet sent before every send of this message
	// (a bot's channel that xAgent has not acked a message of: edge-api §4.1); nil: none.
	Opened json.RawMessage `json:"opened,omitempty"`
}

// Failure is a terminal failure of a user message, listed by GET /v1/channels/{id}.
type Failure struct {
	MessageID string `json:"message_id"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	At        int64  `json:"at"`
}

// orphanGrace is how long a work item waits for its record before it is dropped.
const orphanGrace = time.Minute

// maxFailures bounds a channel's failure list.
const maxFailures = 50

// OutboxConfig configures the send path (edge-api §5.4).
type OutboxConfig struct {
	// AckTimeout (XIM_ACK_TIMEOUT): a sent message with no ack within it is sent again.
	AckTimeout time.Duration
	// BackoffMax (XIM_OUTBOUND_BACKOFF_MAX) caps the delay between two sends of one message.
	BackoffMax time.Duration
	// MaxAge (XIM_OUTBOUND_MAX_AGE): a message pending longer fails as `expired`.
	MaxAge time.Duration
	// SendTimeout bounds handing a packet to a gateway.
	SendTimeout time.Duration
}

func (c *OutboxConfig) defaults() {
	if c.AckTimeout <= 0 {
		c.AckTimeout = 10 * time.Second
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 5 * time.Minute
	}
	if c.MaxAge <= 0 {
		c.MaxAge = 24 * time.Hour
	}
	if c.SendTimeout <= 0 {
		c.SendTimeout = 2 * time.Second
	}
}

// Outbox is the pending set of user messages to xAgent (P-STATE-1..3): a record per message in
// KV BucketOutbox and one work item per pending message in stream XIM_OUT, whose delayed
// re-deliveries schedule the re-sends. It survives restarts and any worker's death.
type Outbox struct {
	cfg       OutboxConfig
	announced func(ctx context.Context, channel string) error
	kv        jetstream.KeyValue
	js        jetstream.JetStream
	nc        *nats.Conn
	metrics   *outboxMetrics
	logger    *slog.Logger
}

type outboxMetrics struct {
	sends    *prometheus.CounterVec // outcome: sent, no_connection
	acks     *prometheus.CounterVec // status
	ignored  *prometheus.CounterVec // reason
	terminal *prometheus.CounterVec // code
}

// OutboxDeps are the send path's connections and where it reports.
type OutboxDeps struct {
	JetStream jetstream.JetStream // the records (BucketOutbox) and work items (XIM_OUT)
	Conn      *nats.Conn          // the sends to gateways (xim.gw.send)
	// Announced records that xAgent acked a message sent after its channel's channel.opened
	// (the channel registry's MarkAnnounced); nil: nothing recorded.
	Announced func(ctx context.Context, channel string) error
	// Registerer takes the send path's metrics (nil: not registered).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// OpenOutbox opens the pending set.
func OpenOutbox(ctx context.Context, cfg OutboxConfig, deps OutboxDeps) (*Outbox, error) {
	js, nc, reg, logger := deps.JetStream, deps.Conn, deps.Registerer, deps.Logger
	cfg.defaults()
	kv, err := js.KeyValue(ctx, subjects.BucketOutbox)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	m := &outboxMetrics{
		sends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_outbound_sends_total", Help: "Sends of user messages to xAgent, by outcome (sent, no_connection).",
		}, []string{"outcome"}),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_outbound_acks_total", Help: "Acks from xAgent for user messages, by status.",
		}, []string{"status"}),
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_outbound_acks_ignored_total", Help: "Acks from xAgent ignored: unknown message or already finished.",
		}, []string{"reason"}),
		terminal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_outbound_failures_total", Help: "User messages that failed for good (never sent again), by code.",
		}, []string{"code"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.sends, m.acks, m.ignored, m.terminal} {
			if err := reg.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					return nil, err
				}
			}
		}
	}
	return &Outbox{cfg: cfg, announced: deps.Announced, kv: kv, js: js, nc: nc, metrics: m, logger: logger}, nil
}

// Exists reports whether a message_id of the channel was already submitted (within
// XIM_COMPLETED_TTL): a target's redelivery then yields the same message, never a second one.
func (o *Outbox) Exists(ctx context.Context, channel, messageID string) (bool, error) {
	key, err := subjects.MessageKey(channel, messageID)
	if err != nil {
		return false, err
	}
	_, rev, err := o.get(ctx, key)
	return rev != 0, err
}

// Submit makes a user message pending; it returns once the message is durable. A message_id
// already submitted is not submitted again (false).
func (o *Outbox) Submit(ctx context.Context, channel string, m profile.Message) (bool, error) {
	return o.SubmitOpened(ctx, channel, m, nil)
}

// SubmitOpened is Submit for a message that every send puts after a channel.opened packet with
// the payload opened (nil: none), until xAgent acks it (edge-api §4.1).
func (o *Outbox) SubmitOpened(ctx context.Context, channel string, m profile.Message, opened json.RawMessage) (bool, error) {
	// A user message is one trace: this span (the child of the caller's, if any), then the
	// outbound stage's sends, whose parent travels in the work item's headers.
	ctx, span := spans.Start(ctx, tracer, trace.SpanKindProducer, "outbox submit", "")
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attrChannel.String(channel), attrType.String(profile.TypeMessage))
	}
	key, err := subjects.MessageKey(channel, m.MessageID)
	if err != nil {
		return false, err
	}
	if _, rev, err := o.get(ctx, key); err != nil || rev != 0 {
		return false, err
	}
	subject, err := subjects.Out(channel)
	if err != nil {
		return false, err
	}
	// The work item first: a crash before the record leaves an item without a record, which the
	// sender drops; the other order could leave a pending record nothing ever sends.
	item := nats.NewMsg(subject)
	item.Data = []byte(key)
	otel.GetTextMapPropagator().Inject(ctx, NATSHeaderCarrier(item.Header))
	ack, err := o.js.PublishMsg(ctx, item, jetstream.WithMsgID(key))
	if err != nil {
		return false, fmt.Errorf("outbox: publish work item: %w", err)
	}
	payload, err := json.Marshal(m)
	if err != nil {
		return false, err
	}
	now := time.Now().UnixMilli()
	b, _ := json.Marshal(OutRecord{State: OutPending, Payload: payload, CreatedAt: now, WorkSeq: ack.Sequence, At: now, Opened: opened})
	if _, err := o.kv.Create(ctx, key, b); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return false, nil
		}
		return false, fmt.Errorf("outbox: create record: %w", err)
	}
	return true, nil
}

func (o *Outbox) get(ctx context.Context, key string) (OutRecord, uint64, error) {
	e, err := o.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return OutRecord{}, 0, nil
	}
	if err != nil {
		return OutRecord{}, 0, fmt.Errorf("outbox: get %s: %w", key, err)
	}
	var r OutRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return OutRecord{}, 0, fmt.Errorf("outbox: record %s unreadable: %w", key, err)
	}
	return r, e.Revision(), nil
}

func (o *Outbox) update(ctx context.Context, key string, r OutRecord, rev uint64) error {
	r.At = time.Now().UnixMilli()
	b, _ := json.Marshal(r)
	_, err := o.kv.Update(ctx, key, b, rev)
	return err
}

// HandleAck applies xAgent's chat.message.ack of a user message (P-ACK-1..5): accepted or
// duplicate completes it; rejected retryable=false fails it for good; rejected retryable=true
// leaves it pending. An ack of an unknown or finished message is ignored and counted. The ack is
// matched by message_id, the business identity (P-ID-5); reply_to may name any of its sends.
func (o *Outbox) HandleAck(ctx context.Context, channel string, ack profile.Ack) error {
	key, err := subjects.MessageKey(channel, ack.MessageID)
	if err != nil {
		o.metrics.ignored.WithLabelValues(string(ackUnknown)).Inc()
		return nil
	}
	var r OutRecord
	var finished bool
	err = compareAndSet(func() (bool, error) {
		var rev uint64
		var err error
		if r, rev, err = o.get(ctx, key); err != nil {
			return true, err
		}
		if rev == 0 {
			o.metrics.ignored.WithLabelValues(string(ackUnknown)).Inc()
			return true, nil
		}
		if r.State != OutPending {
			o.metrics.ignored.WithLabelValues(string(ackFinished)).Inc()
			return true, nil
		}
		retryable := ack.Retryable != nil && *ack.Retryable
		switch {
		case ack.Status == profile.AckAccepted || ack.Status == profile.AckDuplicate:
			r.State = OutDelivered
		case ack.Status == profile.AckRejected && !retryable:
			r.State, r.Code, r.Message = OutFailed, ack.Code, ack.Message
		default: // rejected, retryable: sent again at its next scheduled check (P-ACK-5)
			r.Code, r.Message = ack.Code, ack.Message
		}
		err = o.update(ctx, key, r, rev)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return false, nil // changed under us (a send): read again
		}
		if err != nil {
			return true, fmt.Errorf("outbox: update %s: %w", key, err)
		}
		o.metrics.acks.WithLabelValues(ack.Status).Inc()
		finished = r.State != OutPending
		return true, nil
	})
	if err != nil {
		return err // retried by the router
	}
	if finished {
		o.finish(ctx, channel, ack.MessageID, r)
		if r.State == OutDelivered && r.Opened != nil && o.announced != nil {
			if err := o.announced(ctx, channel); err != nil {
				o.logger.Warn("channel_announce_failed", "channel", channel, "err", err) // later messages carry channel.opened again
			}
		}
	}
	return nil
}

// finish removes a message's work item and, for a failure, makes it visible.
func (o *Outbox) finish(ctx context.Context, channel, messageID string, r OutRecord) {
	if s, err := o.js.Stream(ctx, subjects.StreamOut); err == nil {
		if err := s.DeleteMsg(ctx, r.WorkSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			o.logger.Debug("outbound_work_item_delete", "channel", channel, "message_id", messageID, "err", err)
		}
	}
	if r.State == OutDelivered {
		return
	}
	o.metrics.terminal.WithLabelValues(r.Code).Inc()
	o.logger.Warn("user_message_failed", "channel", channel, "message_id", messageID, "stage", "outbound", "code", r.Code, "attempts", r.Attempts)
	if err := o.addFailure(ctx, channel, Failure{MessageID: messageID, Code: r.Code, Message: r.Message, At: time.Now().UnixMilli()}); err != nil {
		o.logger.Warn("failure_list_update", "channel", channel, "err", err)
	}
}

func (o *Outbox) addFailure(ctx context.Context, channel string, f Failure) error {
	key, err := subjects.FailuresKey(channel)
	if err != nil {
		return err
	}
	return compareAndSet(func() (bool, error) {
		var list []Failure
		var rev uint64
		e, err := o.kv.Get(ctx, key)
		switch {
		case err == nil:
			rev = e.Revision()
			_ = json.Unmarshal(e.Value(), &list)
		case !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted):
			return true, err
		}
		list = append([]Failure{f}, list...)
		if len(list) > maxFailures {
			list = list[:maxFailures]
		}
		b, _ := json.Marshal(list)
		if rev == 0 {
			_, err = o.kv.Create(ctx, key, b)
		} else {
			_, err = o.kv.Update(ctx, key, b, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			return false, nil // changed meanwhile: read again
		}
		return true, err
	})
}

// Failures returns a channel's recent terminal failures, newest first.
func (o *Outbox) Failures(ctx context.Context, channel string) ([]Failure, error) {
	key, err := subjects.FailuresKey(channel)
	if err != nil {
		return nil, err
	}
	e, err := o.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var list []Failure
	return list, json.Unmarshal(e.Value(), &list)
}

// Pending counts a channel's pending user messages (its work items in XIM_OUT).
func (o *Outbox) Pending(ctx context.Context, channel string) (int, error) {
	subject, err := subjects.Out(channel)
	if err != nil {
		return 0, err
	}
	s, err := o.js.Stream(ctx, subjects.StreamOut)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, err
	}
	return int(info.State.Subjects[subject]), nil
}

// PurgeChannel removes a deleted channel's records, failures and work items (P-STATE-7).
func (o *Outbox) PurgeChannel(ctx context.Context, channel string) error {
	keys, err := subjects.ChannelKeys(channel)
	if err != nil {
		return err
	}
	subject, _ := subjects.Out(channel)
	var errs []error
	if s, err := o.js.Stream(ctx, subjects.KVStream(subjects.BucketOutbox)); err == nil {
		errs = append(errs, s.Purge(ctx, jetstream.WithPurgeSubject(subjects.KVKeys(subjects.BucketOutbox, keys))))
	} else {
		errs = append(errs, err)
	}
	if s, err := o.js.Stream(ctx, subjects.StreamOut); err == nil {
		errs = append(errs, s.Purge(ctx, jetstream.WithPurgeSubject(subject)))
	} else {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Run sends pending messages and schedules their re-sends until ctx ends (the worker role).
func (o *Outbox) Run(ctx context.Context) error {
	return consumeWorkItems(ctx, o.js, subjects.StreamOut, subjects.OutboundConsumer, 256, o.handle, o.logger)
}

// handle is one check of a work item: send if still pending, then schedule the next check.
func (o *Outbox) handle(ctx context.Context, m jetstream.Msg) Outcome {
	key := string(m.Data())
	channel := channelOfKey(key)
	r, rev, err := o.get(ctx, key)
	if err != nil {
		o.logger.Warn("outbound_record_unavailable", "stage", "outbound", "err", err)
		return RetryAfter(time.Second)
	}
	if rev == 0 {
		// Submit writes the work item before the record: give the record a moment, then drop an
		// item whose submitter died in between (the target redelivers its message).
		if md, err := m.Metadata(); err == nil && time.Since(md.Timestamp) < orphanGrace {
			return RetryAfter(50 * time.Millisecond)
		}
		return Done()
	}
	if r.State != OutPending {
		return Done() // finished
	}
	now := time.Now()
	var mm profile.Message
	_ = json.Unmarshal(r.Payload, &mm)
	if now.Sub(time.UnixMilli(r.CreatedAt)) > o.cfg.MaxAge {
		r.State, r.Code, r.Message = OutExpired, codeExpired, fmt.Sprintf("no terminal ack within %s (%d sends)", o.cfg.MaxAge, r.Attempts)
		if err := o.update(ctx, key, r, rev); err != nil {
			return RetryAfter(time.Second)
		}
		o.finish(ctx, channel, mm.MessageID, r)
		return Done()
	}
	pkt, err := profile.NewPacket(channel, profile.TypeMessage, "", json.RawMessage(r.Payload))
	if err != nil {
		o.logger.Error("outbound_packet_invalid", "channel", channel, "message_id", mm.MessageID, "err", err)
		return Reject("ximd outbound: the stored message is not a valid packet")
	}
	// Record the send before it happens, so an ack (which may come at once) finds this packet.
	r.Attempts++
	r.PacketID, r.SentAt = pkt.PacketID, now.UnixMilli()
	if err := o.update(ctx, key, r, rev); err != nil {
		return RetryAfter(100 * time.Millisecond) // changed meanwhile (an ack): check again
	}
	b, _ := json.Marshal(pkt)
	var frames [][]byte
	if r.Opened != nil {
		opened, err := profile.NewPacket(channel, profile.TypeChannelOpened, "", r.Opened)
		if err != nil {
			o.logger.Error("outbound_packet_invalid", "channel", channel, "message_id", mm.MessageID, "err", err)
			return Reject("ximd outbound: the stored channel.opened is not a valid packet")
		}
		ob, _ := json.Marshal(opened)
		frames = [][]byte{ob, b}
	}
	sctx, span := spans.Start(otel.GetTextMapPropagator().Extract(ctx, NATSHeaderCarrier(m.Headers())), tracer, trace.SpanKindProducer, "outbound send", "")
	sent := o.send(sctx, b, frames)
	if span.IsRecording() {
		span.SetAttributes(attrChannel.String(channel), attrType.String(profile.TypeMessage), attrPacketID.String(pkt.PacketID), attrSent.Bool(sent))
	}
	span.End()
	delay := o.delay(r.Attempts, sent)
	if sent {
		o.metrics.sends.WithLabelValues(string(sendSent)).Inc()
		o.logger.Debug("user_message_sent", "channel", channel, "message_id", mm.MessageID, "packet_id", pkt.PacketID, "stage", "outbound", "attempt", r.Attempts)
	} else {
		o.metrics.sends.WithLabelValues(string(sendNoConnection)).Inc()
	}
	return RetryAfter(delay)
}

// send hands a packet to a gateway with a live xAgent connection; frames, when not nil, are
// several packets (b among them) that it writes to one connection in their order.
func (o *Outbox) send(ctx context.Context, b []byte, frames [][]byte) bool {
	rctx, cancel := context.WithTimeout(ctx, o.cfg.SendTimeout)
	defer cancel()
	req := nats.NewMsg(subjects.GatewaySend)
	req.Data = b
	if frames != nil {
		var lengths string
		req.Data, lengths = subjects.JoinFrames(frames)
		req.Header.Set(subjects.HeaderFrames, lengths)
	}
	resp, err := o.nc.RequestMsgWithContext(rctx, req)
	return err == nil && string(resp.Data) == gatewaySent
}

// delay until a message's next check: XIM_ACK_TIMEOUT after a send, doubling with each attempt
// up to BackoffMax; without a live connection, 1s doubling up to 30s. Jitter (up to +20%) only
// lengthens it: no re-send ever comes before XIM_ACK_TIMEOUT.
func (o *Outbox) delay(attempts int, sent bool) time.Duration {
	base, ceiling := o.cfg.AckTimeout, o.cfg.BackoffMax
	if !sent {
		base, ceiling = time.Second, 30*time.Second
	}
	for i := 1; i < attempts && base < ceiling; i++ {
		base *= 2
	}
	base = min(base, ceiling)
	return base + time.Duration(rand.Int64N(int64(base)/5+1))
}

func channelOfKey(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '.' {
			return key[:i]
		}
	}
	return key
}
