package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"
)

// OutcomeKind names what becomes of a work item.
type OutcomeKind int

// The outcomes of a work item.
const (
	// OutcomeDone: handled; the item is acked.
	OutcomeDone OutcomeKind = iota
	// OutcomeRetry: handle it again, after Delay (0: after the transport's own back-off).
	OutcomeRetry
	// OutcomeReject: dropped for good, with a reason; never handled again.
	OutcomeReject
	// OutcomePoison: given up on, with a reason; a stage packet goes to XIM_POISON, where the
	// poison handler answers it.
	OutcomePoison
)

var outcomeNames = [...]string{OutcomeDone: "done", OutcomeRetry: "retry", OutcomeReject: "reject", OutcomePoison: "poison"}

func (k OutcomeKind) String() string {
	if k < 0 || int(k) >= len(outcomeNames) {
		return fmt.Sprintf("OutcomeKind(%d)", int(k))
	}
	return outcomeNames[k]
}

// Outcome is what a work-item handler returns: every consumer's handler (the stage consumers,
// the poison consumer, the outbound and replies consumers) returns one, and settle alone applies
// it, through the transport the item came by. The zero Outcome is Done.
type Outcome struct {
	kind   OutcomeKind
	delay  time.Duration
	reason string
	cause  error
}

// Done: the item is handled.
func Done() Outcome { return Outcome{} }

// RetryAfter: handle the item again after d (a plain consumer's NakWithDelay: the item's
// redelivery is its timer, durable across restarts). A stage packet has no timer of its own: the
// router's back-off paces its retries, as for Retry.
func RetryAfter(d time.Duration) Outcome { return Outcome{kind: OutcomeRetry, delay: d} }

// Retry: handle the item again because of err (an infrastructure failure), after the
// transport's back-off. On the stage consumers that is the router's bounded retry with back-off,
// after which the packet is poisoned with err's text as its reason (pipeline.NewRouter).
func Retry(err error) Outcome { return Outcome{kind: OutcomeRetry, cause: err} }

// Reject: drop the item for good, for reason (a plain consumer terminates it, reason in the
// server's advisory; a stage packet is acked: XIM_IN is a work queue, so it is gone).
func Reject(reason string) Outcome { return Outcome{kind: OutcomeReject, reason: reason} }

// Poison: give the item up at once, for reason, without the retries (a stage packet goes to
// XIM_POISON with the reason; a plain consumer, which has no poison stream, terminates it).
func Poison(reason string) Outcome { return Outcome{kind: OutcomePoison, reason: reason} }

// outcomeOf is the one mapping of a stage's error to its packet's outcome: nil is done, any
// other error an infrastructure failure, retried (protocol outcomes are replies, not errors).
func outcomeOf(err error) Outcome {
	if err == nil {
		return Done()
	}
	return Retry(err)
}

// Kind is what becomes of the item.
func (o Outcome) Kind() OutcomeKind { return o.kind }

// Delay is a retry's delay (0: the transport's back-off).
func (o Outcome) Delay() time.Duration { return o.delay }

// Reason is a rejection's or a poisoning's reason, or a retry's cause.
func (o Outcome) Reason() string {
	if o.cause != nil {
		return o.cause.Error()
	}
	return o.reason
}

// settler is how a transport settles one work item: jetstream.Msg is one (the plain consumers);
// routed is the stage consumers' (the Watermill router's middleware applies what it returns).
type settler interface {
	Ack() error
	NakWithDelay(time.Duration) error
	TermWithReason(string) error
}

// poisoner is a settler with a poison stream.
type poisoner interface {
	Poison(reason string) error
}

// settle is the one place a work item's fate is decided: it applies o through s. A retry of a
// cause with no delay of its own is a nak with none (the transport's back-off); a poisoning
// where s has no poison stream terminates the item.
func settle(s settler, o Outcome) error {
	switch o.kind {
	case OutcomeRetry:
		return s.NakWithDelay(o.delay)
	case OutcomeReject:
		return s.TermWithReason(o.reason)
	case OutcomePoison:
		if p, ok := s.(poisoner); ok {
			return p.Poison(o.reason)
		}
		return s.TermWithReason(o.reason)
	default:
		return s.Ack()
	}
}

// PoisonError is what a stage handler routed by Route returns for a poisoned packet: the
// router's retry skips it (pipeline.NewRouter) and its poison queue publishes the packet to
// XIM_POISON with Reason as its reason.
type PoisonError struct{ Reason string }

func (e *PoisonError) Error() string { return e.Reason }

// routed settles a stage packet: the Watermill router acks the message when its handler returns
// nil, and its middleware retries an error with back-off, then poisons it (pipeline.NewRouter).
type routed struct{ cause error }

var _ poisoner = routed{}

// Ack: done, nil.
func (routed) Ack() error { return nil }

// NakWithDelay: the cause, which the router's retry retries after its own back-off.
func (r routed) NakWithDelay(time.Duration) error { return r.cause }

// TermWithReason: nil, so the router acks it: XIM_IN is a work queue and the packet is gone.
func (routed) TermWithReason(string) error { return nil }

// Poison: a *PoisonError, which the router poisons without retrying.
func (routed) Poison(reason string) error { return &PoisonError{Reason: reason} }

// Route turns a stage handler into the router's: the stage consumers' one runner. What the
// handler returns is settled by settle through the router (see routed).
func Route(h func(*message.Message) Outcome) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		o := h(msg)
		if o.kind == OutcomeRetry && o.cause == nil {
			o.cause = errRetry
		}
		return settle(routed{cause: o.cause}, o)
	}
}

// errRetry is the cause of a stage packet's retry that names none.
var errRetry = errors.New("retry requested")

// settleItem applies a plain consumer's outcome to its item. A failed ack or nak only delays the
// item: JetStream redelivers it after AckWait, and every handler is idempotent.
func settleItem(m jetstream.Msg, o Outcome, logger *slog.Logger) {
	if err := settle(m, o); err != nil {
		logger.Debug("work_item_settle_failed", "subject", m.Subject(), "err", err)
	}
}

// consumeWorkItems runs a plain durable consumer of stream until ctx ends: each work item goes to
// handle, and settle applies its outcome; at most pull items are buffered. Ending it drains the
// consumer (items in flight finish first).
func consumeWorkItems(ctx context.Context, js jetstream.JetStream, stream, consumer string, pull int,
	handle func(context.Context, jetstream.Msg) Outcome, logger *slog.Logger) error {
	cons, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		return fmt.Errorf("%s: %w", consumer, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { settleItem(m, handle(ctx, m), logger) }, jetstream.PullMaxMessages(pull))
	if err != nil {
		return fmt.Errorf("%s: consume: %w", consumer, err)
	}
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return nil
}
