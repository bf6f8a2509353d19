package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Sentinel errors callers act on.
var (
	// ErrClosed is returned by Publish after Publisher.Close and by Subscribe and
	// SubscribeInitialize after Subscriber.Close.
	ErrClosed = errors.New("bus: closed")
	// ErrInvalidMetadata is returned by Publish for a metadata key that is not a NATS header name.
	ErrInvalidMetadata = errors.New("bus: invalid metadata")
	// ErrCloseTimeout is returned by Subscriber.Close when a subscription's goroutine did not end
	// within CloseTimeout plus the connection flush bound. The goroutine still ends on its own;
	// messages it could not hand back are redelivered by JetStream after AckWait.
	ErrCloseTimeout = errors.New("bus: close timed out")
)

// PublisherConfig configures a [Publisher]. The zero value is valid.
type PublisherConfig struct {
	// Subject maps a Watermill topic to the NATS subject to publish to (default: the topic itself).
	// An empty result is an error.
	Subject func(topic string) string
	// MsgID returns the Nats-Msg-Id of a message (default: msg.UUID), so JetStream stores a
	// re-publish within the stream's duplicate window once. An empty result sends no Nats-Msg-Id.
	MsgID func(topic string, msg *message.Message) string
}

func (c PublisherConfig) withDefaults() PublisherConfig {
	if c.Subject == nil {
		c.Subject = func(topic string) string { return topic }
	}
	if c.MsgID == nil {
		c.MsgID = func(_ string, msg *message.Message) string { return msg.UUID }
	}
	return c
}

// Publisher is a Watermill publisher on JetStream. It is safe for concurrent use.
type Publisher struct {
	js     jetstream.JetStream
	cfg    PublisherConfig
	logger *slog.Logger

	// mu is held shared by every Publish and exclusively by Close, so Close waits for publishes
	// in flight.
	mu     sync.RWMutex
	closed bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a publisher on js. The connection stays the caller's.
func NewPublisher(js jetstream.JetStream, cfg PublisherConfig, logger *slog.Logger) (*Publisher, error) {
	if js == nil {
		return nil, errors.New("bus: new publisher: nil JetStream")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Publisher{js: js, cfg: cfg.withDefaults(), logger: logger}, nil
}

// Publish publishes msgs to the subject of topic, one after the other, each waiting for its
// PubAck. The JetStream request uses each message's context (bounded by the JetStream default
// timeout when it has no deadline). The first failure stops the call; messages before it are
// stored. The error wraps the topic, the message UUID and the cause (e.g.
// [jetstream.ErrNoStreamResponse] when no stream stores the subject, [ErrInvalidMetadata],
// [ErrClosed]).
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return fmt.Errorf("publish %s: %w", topic, ErrClosed)
	}
	subject := p.cfg.Subject(topic)
	if subject == "" {
		return fmt.Errorf("publish %s: empty subject", topic)
	}
	for _, msg := range msgs {
		h, err := metadataToHeader(msg.UUID, msg.Metadata)
		if err != nil {
			return fmt.Errorf("publish %s: message %s: %w", topic, msg.UUID, err)
		}
		var opts []jetstream.PublishOpt
		if id := p.cfg.MsgID(topic, msg); id != "" {
			opts = append(opts, jetstream.WithMsgID(headerValue(id)))
		}
		ack, err := p.js.PublishMsg(msg.Context(), &nats.Msg{Subject: subject, Header: h, Data: msg.Payload}, opts...)
		if err != nil {
			return fmt.Errorf("publish %s: message %s: %w", topic, msg.UUID, err)
		}
		if ack.Duplicate {
			p.logger.Debug("bus_publish_duplicate", "topic", topic, "message_id", msg.UUID, "stream", ack.Stream, "stream_seq", ack.Sequence)
		}
	}
	return nil
}

// Close makes later Publish calls fail with [ErrClosed], after the ones in flight returned. It
// does not close the connection. Close is idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return nil
}
