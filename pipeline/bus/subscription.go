package bus

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// flushTimeout bounds the connection flush at the end of a subscription.
const flushTimeout = 2 * time.Second

// Termination reasons sent with TermWithReason (visible in the server's advisories).
const (
	termUnconvertible = "ximd bus: unconvertible message"
	termMaxDeliver    = "ximd bus: max deliveries reached"
)

// held is a JetStream message the subscription holds: fetched and not yet acked, nacked back to
// the server or terminated.
type held struct {
	jm jetstream.Msg
	d  delivery
	// touched is when the server's AckWait timer of the message last (re)started: its receipt or
	// its last InProgress.
	touched time.Time
	// emits counts the Watermill messages made from it (deliveries to the handler).
	emits int
	// wm is the Watermill message of the current delivery (nil between deliveries).
	wm *message.Message
	// cancel cancels wm's context.
	cancel context.CancelFunc
}

// subscription reads one durable consumer for one Subscribe call. Its run goroutine owns all of
// its state; only ctx/cancel and out are shared.
type subscription struct {
	owner     *Subscriber
	cfg       SubscriberConfig
	ackWait   time.Duration
	cons      jetstream.Consumer
	topic     string
	stream    string
	group     string        // pinned priority group ("" for none)
	pinnedTTL time.Duration // the group's unpin timeout
	// pinID is the pin of the group this subscription was last delivered under (header
	// Nats-Pin-Id); "" when it holds none. Owned by run.
	pinID  string
	ctx    context.Context // ends the subscription; parent of message contexts
	cancel context.CancelFunc
	out    chan *message.Message
	logger *slog.Logger
}

// run is the subscription's event loop. queue[0] is the current message (in the handler, waiting
// for its Nack delay, or about to be sent); the rest follow in stream order.
func (sb *subscription) run() {
	defer sb.owner.forget(sb)
	defer close(sb.out)
	defer sb.cancel()

	var (
		queue    []*held
		batch    jetstream.MessageBatch
		batchCh  <-chan jetstream.Msg
		inUse    bool // queue[0].wm is with the handler
		retry    *time.Timer
		retryC   <-chan time.Time
		pauseC   <-chan time.Time // fetch back-off after an error
		idleC    <-chan time.Time // next look at Active while inactive
		lastPull time.Time
		closing  bool
		ctxDone  = sb.ctx.Done()
		deadline *time.Timer
		deadC    <-chan time.Time
	)
	defer func() {
		if retry != nil {
			retry.Stop()
		}
		if deadline != nil {
			deadline.Stop()
		}
	}()
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	bo.MaxElapsedTime = 0
	progress := time.NewTicker(max(sb.ackWait/4, 10*time.Millisecond))
	defer progress.Stop()

	startClosing := func() {
		closing = true
		ctxDone = nil
		deadline = time.NewTimer(sb.cfg.CloseTimeout)
		deadC = deadline.C
		if retry != nil {
			retry.Stop()
			retryC = nil
		}
	}

	for {
		if !closing && sb.ctx.Err() != nil {
			startClosing()
		}
		if closing && batchCh == nil && !inUse {
			sb.release(queue)
			sb.flush()
			sb.unpin()
			return
		}
		pull := 0
		if !closing && batchCh == nil && pauseC == nil {
			switch active := sb.active(); {
			case active && len(queue) <= 1:
				pull = sb.cfg.FetchBatch
			case len(queue) > 0 && sb.group != "" && time.Since(lastPull) >= sb.pinnedTTL/4:
				// A busy handler still pulls (one message) now and then: the server keeps the
				// pin only while its holder pulls, and moving it now would break the order.
				pull = 1
			case !active && len(queue) == 0:
				sb.unpin()
				if idleC == nil {
					idleC = time.After(ActivePoll)
				}
			}
		}
		if pull > 0 {
			lastPull = time.Now()
			opts := []jetstream.FetchOpt{jetstream.FetchMaxWait(sb.cfg.FetchWait)}
			if sb.group != "" {
				opts = append(opts, jetstream.FetchPriorityGroup(sb.group))
			}
			b, err := sb.cons.Fetch(pull, opts...)
			switch {
			case errors.Is(err, nats.ErrConnectionClosed):
				sb.logger.Error("bus_connection_closed", "err", err)
				sb.cancel()
				continue
			case err != nil:
				sb.logger.Warn("bus_fetch_failed", "err", err)
				pauseC = time.After(bo.NextBackOff())
			default:
				batch, batchCh = b, b.Messages()
			}
		}

		var (
			outC          chan<- *message.Message
			outMsg        *message.Message
			ackedC, nackC <-chan struct{}
		)
		if len(queue) > 0 {
			cur := queue[0]
			switch {
			case inUse:
				ackedC, nackC = cur.wm.Acked(), cur.wm.Nacked()
			case !closing && retryC == nil:
				if cur.wm == nil {
					sb.emit(cur)
				}
				outC, outMsg = sb.out, cur.wm
			}
		}

		select {
		case m, ok := <-batchCh:
			if !ok {
				err := batch.Error()
				batch, batchCh = nil, nil
				if err != nil && !closing {
					sb.logger.Warn("bus_fetch_failed", "err", err)
					pauseC = time.After(bo.NextBackOff())
				} else {
					bo.Reset()
				}
				continue
			}
			if h := sb.accept(m); h != nil {
				queue = append(queue, h)
			}

		case outC <- outMsg:
			inUse = true

		case <-ackedC:
			cur := queue[0]
			inUse = false
			cur.cancel()
			if err := cur.jm.Ack(); err != nil {
				sb.logger.Warn("bus_ack_failed", "stream_seq", cur.d.seq, "message_id", cur.d.uuid, "err", err)
			}
			queue[0] = nil
			queue = queue[1:]

		case <-nackC:
			cur := queue[0]
			inUse = false
			cur.cancel()
			cur.wm = nil
			if closing {
				continue // handed back to the server by release, in order
			}
			if sb.cfg.MaxDeliver > 0 && sb.numDelivered(cur) >= uint64(sb.cfg.MaxDeliver) {
				sb.logger.Warn("bus_max_deliver_reached", "stream_seq", cur.d.seq, "message_id", cur.d.uuid, "num_delivered", sb.numDelivered(cur))
				sb.term(cur, termMaxDeliver)
				queue[0] = nil
				queue = queue[1:]
				continue
			}
			retry = time.NewTimer(sb.cfg.NakDelay)
			retryC = retry.C

		case <-retryC:
			retry, retryC = nil, nil

		case <-pauseC:
			pauseC = nil

		case <-idleC:
			idleC = nil

		case now := <-progress.C:
			sb.progress(queue, now)

		case <-ctxDone:
			startClosing()

		case <-deadC:
			// The handler kept its message (or the pull request stayed open) too long: hand back
			// everything held, the message in the handler included (its late Ack is ignored).
			sb.logger.Warn("bus_close_timeout", "held", len(queue), "in_handler", inUse, "fetch_open", batchCh != nil)
			sb.release(queue)
			sb.flush()
			return
		}
	}
}

// accept converts a fetched message. An unconvertible one is logged and terminated, and nil
// returned.
func (sb *subscription) accept(m jetstream.Msg) *held {
	d, err := convert(m)
	if err != nil {
		sb.logger.Error("bus_message_unconvertible", "stream_seq", d.seq, "subject", m.Subject(), "err", err)
		if terr := m.TermWithReason(termUnconvertible); terr != nil {
			sb.logger.Warn("bus_term_failed", "stream_seq", d.seq, "err", terr)
		}
		return nil
	}
	if id := m.Headers().Get(pinIDHeader); id != "" {
		sb.pinID = id
	}
	return &held{jm: m, d: d, touched: time.Now()}
}

// pinIDHeader carries the pin of a pinned group on each message delivered under it.
const pinIDHeader = "Nats-Pin-Id"

// active reports whether the subscription is meant to serve its topic now.
func (sb *subscription) active() bool {
	return sb.cfg.Active == nil || sb.cfg.Active(sb.topic)
}

// unpin hands the group's pin back once the subscription holds nothing, so the subscription meant
// to serve the topic takes it at once. It unpins only the pin this subscription was delivered
// under (still current), never another holder's.
func (sb *subscription) unpin() {
	if sb.pinID == "" || sb.group == "" {
		return
	}
	id := sb.pinID
	sb.pinID = ""
	if sb.owner.js.Conn().IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*flushTimeout)
	defer cancel()
	// The server handles acks and naks apart from API requests: wait until it has taken every
	// ack and nak sent, or the next holder could be handed a message while an earlier one is
	// still counted in this subscription's hands (and redelivered after it: out of order).
	for {
		info, err := sb.cons.Info(ctx)
		if err != nil {
			sb.logger.Warn("bus_unpin_failed", "err", err)
			return
		}
		pinned := false
		for _, g := range info.PriorityGroups {
			pinned = pinned || (g.Group == sb.group && g.PinnedClientID == id)
		}
		if !pinned {
			return // the pin already lapsed or moved
		}
		if info.NumAckPending == 0 {
			break
		}
		select {
		case <-ctx.Done():
			sb.logger.Warn("bus_unpin_failed", "err", "acks still pending", "ack_pending", info.NumAckPending)
			return // the pin lapses after PinnedTTL instead
		case <-time.After(10 * time.Millisecond):
		}
	}
	st, err := sb.owner.js.Stream(ctx, sb.stream)
	if err == nil {
		err = st.UnpinConsumer(ctx, sb.cons.CachedInfo().Name, sb.group)
	}
	if err != nil {
		sb.logger.Warn("bus_unpin_failed", "err", err)
		return
	}
	sb.logger.Debug("bus_unpinned", "group", sb.group)
}

// numDelivered is how many times h was delivered to a handler (see MetaNumDelivered).
func (sb *subscription) numDelivered(h *held) uint64 {
	return h.d.numDelivered + uint64(max(h.emits-1, 0))
}

// emit makes the Watermill message of the next delivery of h.
func (sb *subscription) emit(h *held) {
	h.emits++
	payload := h.d.payload
	if h.emits > 1 {
		payload = slices.Clone(payload) // the previous handler may have kept or changed it
	}
	wm := message.NewMessage(h.d.uuid, payload)
	for k, v := range h.d.metadata {
		wm.Metadata[k] = v
	}
	wm.Metadata[MetaNumDelivered] = strconv.FormatUint(sb.numDelivered(h), 10)
	ctx, cancel := context.WithCancel(context.WithoutCancel(sb.ctx))
	wm.SetContext(ctx)
	h.wm, h.cancel = wm, cancel
}

// progress sends InProgress for every held message, in stream order, once one of them is past
// half its AckWait. Refreshing all of them at once keeps the server's timers in stream order: if
// this process dies, its messages expire, and so are redelivered, in the order they were
// delivered (a later message refreshed less recently than an earlier one would come back
// first).
func (sb *subscription) progress(queue []*held, now time.Time) {
	due := false
	for _, h := range queue {
		due = due || now.Sub(h.touched) >= sb.ackWait/2
	}
	if !due {
		return
	}
	var failed error
	for _, h := range queue {
		if err := h.jm.InProgress(); err != nil {
			failed = err
			continue
		}
		h.touched = now
	}
	if failed != nil {
		sb.logger.Warn("bus_in_progress_failed", "held", len(queue), "err", failed)
	}
}

// term terminates h.
func (sb *subscription) term(h *held, reason string) {
	if err := h.jm.TermWithReason(reason); err != nil {
		sb.logger.Warn("bus_term_failed", "stream_seq", h.d.seq, "err", err)
	}
}

// release Naks every held message, in stream order, so the server redelivers them at once.
func (sb *subscription) release(queue []*held) {
	closed := sb.owner.js.Conn().IsClosed()
	for _, h := range queue {
		if h.cancel != nil {
			h.cancel()
		}
		if closed {
			continue // nothing can reach the server: JetStream redelivers after AckWait
		}
		if err := h.jm.Nak(); err != nil {
			sb.logger.Warn("bus_nak_failed", "stream_seq", h.d.seq, "err", err)
		}
	}
}

// flush makes sure the acks and naks sent so far reached the server.
func (sb *subscription) flush() {
	nc := sb.owner.js.Conn()
	if nc.IsClosed() {
		return
	}
	if err := nc.FlushTimeout(flushTimeout); err != nil {
		sb.logger.Warn("bus_flush_failed", "err", err)
	}
}
