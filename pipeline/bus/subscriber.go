package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"
)

// Subscriber defaults (see [SubscriberConfig]).
const (
	DefaultAckWait       = 30 * time.Second
	DefaultMaxDeliver    = -1 // unlimited
	DefaultMaxAckPending = 1024
	DefaultNakDelay      = time.Second
	DefaultCloseTimeout  = 30 * time.Second
	DefaultFetchBatch    = 64
	DefaultFetchWait     = time.Second
	// DefaultPinnedTTL is the unpin timeout of a pinned group (see [Consumer.PinnedGroup]).
	DefaultPinnedTTL = 5 * time.Second
	// DefaultMaxLanes bounds the lanes of a subscription with a Lane function that are in
	// handlers at once.
	DefaultMaxLanes = 64
)

// Consumer names the stream and the durable pull consumer that serve a topic.
type Consumer struct {
	// Stream is the stream's name. Required; the stream must exist.
	Stream string
	// Durable is the durable consumer's name. Required. Subscriptions (of any Subscriber, in any
	// process) on the same durable share its messages: the durable is the consumer group.
	Durable string
	// FilterSubjects restricts the consumer to these subjects (none: the whole stream). A single
	// subject is written as the consumer's FilterSubject, as provisioning code usually does.
	FilterSubjects []string
	// Description is the consumer's description.
	Description string
	// PinnedGroup, when set, makes the consumer a pinned priority group of that name: the server
	// delivers to one subscription at a time (the pinned one) and moves the pin to another only
	// after the pinned one stopped pulling for PinnedTTL. Subscriptions in several processes then
	// take turns instead of sharing messages, which keeps the stream's order across processes.
	PinnedGroup string
	// PinnedTTL is the pinned group's unpin timeout (default 5s; must exceed FetchWait).
	PinnedTTL time.Duration
}

// SubscriberConfig configures a [Subscriber]. Consumer is required; a zero field takes its
// default.
//
// Subscribe and SubscribeInitialize write the consumer configuration built from these fields
// with CreateOrUpdateConsumer, replacing what is there: where the consumers are also provisioned
// elsewhere, both must agree.
type SubscriberConfig struct {
	// Consumer maps a topic to the stream and durable pull consumer that serve it. Required.
	Consumer func(topic string) Consumer
	// AckWait is the consumer's ack wait: how long the server waits for an ack before it
	// redelivers. Default 30s. The subscriber sends InProgress for messages held longer than
	// half of it.
	AckWait time.Duration
	// MaxDeliver bounds deliveries of a message, counting in-process redeliveries after Nack
	// (a message Nacked at the bound is terminated). Default -1: unlimited.
	MaxDeliver int
	// MaxAckPending bounds the messages delivered and not yet acked across all subscribers of the
	// consumer. Default 1024; -1 is unlimited. Set 1 for strict order across several processes
	// sharing a durable.
	MaxAckPending int
	// BackOff, when set, is the consumer's redelivery back-off after AckWait expiries (JetStream
	// semantics: it overrides AckWait, its first entry becomes the ack wait).
	BackOff []time.Duration
	// NakDelay is the delay before a Nacked message is delivered again. Default 1s.
	NakDelay time.Duration
	// CloseTimeout bounds how long the end of a subscription waits for the message in the handler
	// to be acked or nacked and for the open pull request to finish. Default 30s.
	CloseTimeout time.Duration
	// FetchBatch is the number of messages one pull request asks for. Default 64. A subscription
	// holds at most MaxHeld messages.
	FetchBatch int
	// FetchWait is how long a pull request waits for messages. It bounds how long ending an idle
	// subscription waits for its pull request. Default 1s.
	FetchWait time.Duration
	// Active, when set, says whether the subscription of topic is meant to serve it now (several
	// processes sharing a pinned group each serve their share of the topics). While it returns
	// false, the subscription delivers what it holds, then stops pulling and hands the group's pin
	// back (Unpin), so that the subscription meant to serve the topic takes it over at once
	// instead of after PinnedTTL. It is asked before each pull and every [ActivePoll] while
	// inactive; it must be fast and safe for concurrent use. nil: always active.
	Active func(topic string) bool
	// Lane, when set, maps a message's stored subject to its lane. The messages of one lane reach
	// the output channel one at a time, in stream order (the next only after the previous one was
	// acked or terminated); messages of different lanes are in handlers at the same time, so a
	// slow lane delays only itself. nil: every message is in one lane (stream order).
	Lane func(subject string) string
	// MaxLanes bounds the lanes in handlers at once. Default 64 with Lane, 1 without.
	MaxLanes int
	// MaxHeld bounds the messages the subscription holds (fetched, not yet acked): it pulls only
	// while at least FetchBatch more fit. Default 4*FetchBatch with Lane, FetchBatch+1 without.
	// It should not exceed the consumer's MaxAckPending.
	MaxHeld int
	// LaneSubjects, when set (with Lane), keeps each lane in stream order even when the server
	// delivers out of it (a message delivered where nobody read it, to a worker that died or
	// left, comes back after its AckWait behind newer ones): it maps a message's stored subject
	// to the stored subjects of its lane's messages in the consumer. The stream must keep only
	// unsettled messages (WorkQueue or Interest retention): a lane's head waits while a message
	// of the lane's subjects earlier than it is stored and not in this subscription's hands.
	// The stream is asked only while the subscription cannot tell from its deliveries alone
	// (see order.go); with nothing out of order it costs one consumer info request after each
	// start, pin or delivery gap.
	LaneSubjects func(subject string) []string
	// OrderWait bounds how long a lane head waits for an earlier message that stays stored and
	// never comes (another consumer with interest in it, a server defect) before it goes on
	// without it, logged as bus_order_wait_expired. Default 1m.
	OrderWait time.Duration
}

// ActivePoll is how often an inactive subscription asks [SubscriberConfig.Active] again.
const ActivePoll = 250 * time.Millisecond

func (c SubscriberConfig) withDefaults() SubscriberConfig {
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = DefaultMaxAckPending
	}
	if c.NakDelay == 0 {
		c.NakDelay = DefaultNakDelay
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.FetchBatch == 0 {
		c.FetchBatch = DefaultFetchBatch
	}
	if c.FetchWait == 0 {
		c.FetchWait = DefaultFetchWait
	}
	switch {
	case c.Lane == nil:
		c.MaxLanes = 1
	case c.MaxLanes == 0:
		c.MaxLanes = DefaultMaxLanes
	}
	switch {
	case c.MaxHeld != 0:
	case c.Lane == nil:
		c.MaxHeld = c.FetchBatch + 1
	default:
		c.MaxHeld = 4 * c.FetchBatch
	}
	c.MaxHeld = max(c.MaxHeld, c.FetchBatch)
	if c.OrderWait == 0 {
		c.OrderWait = DefaultOrderWait
	}
	return c
}

// Validate reports every configuration error at once. Zero fields are valid (they take their
// defaults).
func (c SubscriberConfig) Validate() error {
	var errs []error
	if c.Consumer == nil {
		errs = append(errs, errors.New("consumer mapping is required"))
	}
	if c.AckWait < 0 {
		errs = append(errs, fmt.Errorf("ack wait %s: must not be negative", c.AckWait))
	}
	if c.MaxDeliver < -1 {
		errs = append(errs, fmt.Errorf("max deliver %d: must be -1 (unlimited) or positive", c.MaxDeliver))
	}
	if c.MaxAckPending < -1 {
		errs = append(errs, fmt.Errorf("max ack pending %d: must be -1 (unlimited) or positive", c.MaxAckPending))
	}
	for _, d := range c.BackOff {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("back-off %s: must be positive", d))
		}
	}
	if c.NakDelay < 0 {
		errs = append(errs, fmt.Errorf("nak delay %s: must not be negative", c.NakDelay))
	}
	if c.CloseTimeout < 0 {
		errs = append(errs, fmt.Errorf("close timeout %s: must not be negative", c.CloseTimeout))
	}
	if c.FetchBatch < 0 {
		errs = append(errs, fmt.Errorf("fetch batch %d: must not be negative", c.FetchBatch))
	}
	if c.MaxLanes < 0 {
		errs = append(errs, fmt.Errorf("max lanes %d: must not be negative", c.MaxLanes))
	}
	if c.MaxHeld < 0 {
		errs = append(errs, fmt.Errorf("max held %d: must not be negative", c.MaxHeld))
	}
	if c.LaneSubjects != nil && c.Lane == nil {
		errs = append(errs, errors.New("lane subjects need a lane function"))
	}
	if c.OrderWait < 0 {
		errs = append(errs, fmt.Errorf("order wait %s: must not be negative", c.OrderWait))
	}
	if c.FetchWait < 0 {
		errs = append(errs, fmt.Errorf("fetch wait %s: must not be negative", c.FetchWait))
	}
	return errors.Join(errs...)
}

// consumerConfig is the durable consumer configuration of k.
func (c SubscriberConfig) consumerConfig(k Consumer) jetstream.ConsumerConfig {
	cc := jetstream.ConsumerConfig{
		Durable:       k.Durable,
		Description:   k.Description,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    c.MaxDeliver,
		MaxAckPending: c.MaxAckPending,
		BackOff:       c.BackOff,
	}
	if k.PinnedGroup != "" {
		cc.PriorityGroups = []string{k.PinnedGroup}
		cc.PriorityPolicy = jetstream.PriorityPolicyPinned
		cc.PinnedTTL = k.PinnedTTL
		if cc.PinnedTTL == 0 {
			cc.PinnedTTL = DefaultPinnedTTL
		}
	}
	switch len(k.FilterSubjects) {
	case 0:
	case 1:
		cc.FilterSubject = k.FilterSubjects[0]
	default:
		cc.FilterSubjects = k.FilterSubjects
	}
	return cc
}

// Subscriber is a Watermill subscriber on JetStream durable pull consumers. It is safe for
// concurrent use; each Subscribe call is one subscription with its own goroutine.
type Subscriber struct {
	js     jetstream.JetStream
	cfg    SubscriberConfig
	logger *slog.Logger

	mu     sync.Mutex
	closed bool
	subs   map[*subscription]struct{}
	wg     sync.WaitGroup // one per running subscription
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber validates cfg and returns a subscriber on js. The connection stays the caller's;
// close the Subscriber before it.
func NewSubscriber(js jetstream.JetStream, cfg SubscriberConfig, logger *slog.Logger) (*Subscriber, error) {
	if js == nil {
		return nil, errors.New("bus: new subscriber: nil JetStream")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bus: new subscriber: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Subscriber{
		js:     js,
		cfg:    cfg.withDefaults(),
		logger: logger,
		subs:   make(map[*subscription]struct{}),
	}, nil
}

// SubscribeInitialize creates the durable consumer of topic, or updates it to this Subscriber's
// configuration. It is idempotent.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if s.isClosed() {
		return fmt.Errorf("subscribe initialize %s: %w", topic, ErrClosed)
	}
	if _, _, err := s.consumer(context.Background(), topic); err != nil {
		return fmt.Errorf("subscribe initialize %s: %w", topic, err)
	}
	return nil
}

// Subscribe creates or updates the durable consumer of topic and starts reading it. Messages
// arrive on the returned channel one at a time, in stream order (see the package documentation
// for Ack, Nack and redelivery). The channel is closed when ctx ends or the Subscriber is closed,
// after the subscription handed back every message it held. Message contexts derive from ctx.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if s.isClosed() {
		return nil, fmt.Errorf("subscribe %s: %w", topic, ErrClosed)
	}
	k, cons, err := s.consumer(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", topic, err)
	}
	ackWait := s.cfg.AckWait
	if info := cons.CachedInfo(); info != nil && info.Config.AckWait > 0 {
		ackWait = info.Config.AckWait // the effective one (BackOff overrides AckWait)
	}
	subCtx, cancel := context.WithCancel(ctx)
	pinnedTTL := k.PinnedTTL
	if pinnedTTL == 0 {
		pinnedTTL = DefaultPinnedTTL
	}
	sub := &subscription{
		owner:     s,
		cfg:       s.cfg,
		ackWait:   ackWait,
		cons:      cons,
		topic:     topic,
		stream:    k.Stream,
		group:     k.PinnedGroup,
		pinnedTTL: pinnedTTL,
		ctx:       subCtx,
		cancel:    cancel,
		out:       make(chan *message.Message),
		logger:    s.logger.With("topic", topic, "stream", k.Stream, "consumer", k.Durable),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		return nil, fmt.Errorf("subscribe %s: %w", topic, ErrClosed)
	}
	s.subs[sub] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go sub.run()
	return sub.out, nil
}

// Close ends every subscription (see the package documentation) and waits for their goroutines,
// at most CloseTimeout plus a few seconds for flushing; beyond that it returns [ErrCloseTimeout].
// It never deletes a consumer and does not close the connection. Close is idempotent.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	for sub := range s.subs {
		sub.cancel()
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	bound := time.NewTimer(s.cfg.CloseTimeout + 2*flushTimeout)
	defer bound.Stop()
	select {
	case <-done:
		return nil
	case <-bound.C:
		return fmt.Errorf("close subscriber: %w", ErrCloseTimeout)
	}
}

// Stats returns the load of every running subscription (see [SubscriptionStats]).
func (s *Subscriber) Stats() []SubscriptionStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SubscriptionStats, 0, len(s.subs))
	for sub := range s.subs {
		sub.statsMu.Lock()
		st := sub.stats
		sub.statsMu.Unlock()
		st.Topic = sub.topic
		out = append(out, st)
	}
	return out
}

func (s *Subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// consumer maps topic to its consumer and creates or updates it.
func (s *Subscriber) consumer(ctx context.Context, topic string) (Consumer, jetstream.Consumer, error) {
	k := s.cfg.Consumer(topic)
	if k.Stream == "" || k.Durable == "" {
		return k, nil, fmt.Errorf("consumer mapping: stream %q, durable %q: both are required", k.Stream, k.Durable)
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, k.Stream, s.cfg.consumerConfig(k))
	if err != nil {
		return k, nil, fmt.Errorf("consumer %s on stream %s: %w", k.Durable, k.Stream, err)
	}
	return k, cons, nil
}

// forget removes a finished subscription.
func (s *Subscriber) forget(sub *subscription) {
	s.mu.Lock()
	delete(s.subs, sub)
	s.mu.Unlock()
	s.wg.Done()
}
