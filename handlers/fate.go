package handlers

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Fate is what becomes of a work item a plain JetStream consumer of the stages (outbound,
// replies) handled: done (acked), again after Delay (nacked with that delay: the item's
// redelivery is its timer, durable across restarts), or dropped for good (terminated, Reason in
// the server's advisory). The handlers return a Fate; settle alone applies it. (The stage
// consumers read through the Watermill router instead, whose middleware decides: an error is
// retried with back-off, then poisoned and, for a final, answered.)
type Fate struct {
	again  bool
	delay  time.Duration
	reason string // dropped when not ""
}

var done = Fate{}

func again(d time.Duration) Fate { return Fate{again: true, delay: d} }

func dropped(reason string) Fate { return Fate{reason: reason} }

// settle applies f to m. A failed ack or nak only delays the item: JetStream redelivers it after
// AckWait, and every handler is idempotent.
func settle(m jetstream.Msg, f Fate, logger *slog.Logger) {
	var err error
	switch {
	case f.again:
		err = m.NakWithDelay(f.delay)
	case f.reason != "":
		err = m.TermWithReason(f.reason)
	default:
		err = m.Ack()
	}
	if err != nil {
		logger.Debug("work_item_settle_failed", "subject", m.Subject(), "err", err)
	}
}

// consumeWorkItems runs a plain durable consumer of stream until ctx ends: each work item goes to
// handle, and settle applies its fate; at most pull items are buffered. Ending it drains the
// consumer (items in flight finish first).
func consumeWorkItems(ctx context.Context, js jetstream.JetStream, stream, consumer string, pull int,
	handle func(context.Context, jetstream.Msg) Fate, logger *slog.Logger) error {
	cons, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		return fmt.Errorf("%s: %w", consumer, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { settle(m, handle(ctx, m), logger) }, jetstream.PullMaxMessages(pull))
	if err != nil {
		return fmt.Errorf("%s: consume: %w", consumer, err)
	}
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return nil
}
