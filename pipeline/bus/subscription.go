package bus

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
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
	jm   jetstream.Msg
	d    delivery
	lane *lane
	// touched is when the server's AckWait timer of the message last (re)started: its receipt or
	// its last InProgress.
	touched time.Time
	// received is when the subscription fetched it (for Stats).
	received time.Time
	// emits counts the Watermill messages made from it (deliveries to the handler).
	emits int
	// wm is the Watermill message of the current delivery (nil between deliveries).
	wm *message.Message
	// cancel cancels wm's context.
	cancel context.CancelFunc
	// gone: acked or terminated (no longer held).
	gone bool
}

// lane is the FIFO of one lane's held messages, in stream order; msgs[0] is the next to deliver
// (or the one in the handler, or the one waiting for its Nack delay).
type lane struct {
	key     string
	msgs    []*held
	inUse   bool // msgs[0] is with a handler
	waiting bool // msgs[0] was nacked and waits for NakDelay
	ready   bool // in the subscription's ready queue

	// Order (see order.go): verified is a head the stream showed no unsettled earlier message
	// of the lane for; checking: a lookup of the head is under way (or queued); blocked: the
	// head waits for an earlier message, since blockedSince, asking again after backoff.
	verified     *held
	checking     bool
	queued       bool
	blocked      bool
	blockedSince time.Time
	backoff      time.Duration
}

// outcome is what a handler did with a delivered message.
type outcome struct {
	h     *held
	acked bool
}

// subscription reads one durable consumer for one Subscribe call. Its run goroutine owns all of
// its state; only ctx/cancel, out and stats are shared.
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

	statsMu sync.Mutex
	stats   SubscriptionStats
}

// loop is the state of a subscription's run goroutine.
type loop struct {
	all     []*held          // every held message, in stream order (gone ones are compacted away)
	gone    int              // gone entries still in all
	lanes   map[string]*lane // lanes with held messages
	ready   []*lane          // lanes whose head can be delivered, oldest first
	busy    int              // lanes with their head in a handler
	results chan outcome     // handlers' Ack/Nack, reported by watchers
	// direct are messages in handlers whose Ack/Nack the loop's select watches itself (no
	// watcher goroutine): the common case of a few lanes busy at once costs no extra hop.
	direct  [directSlots]*held
	wake    chan *lane    // lanes whose Nack delay passed
	stopped chan struct{} // closed when run returns: watchers and timers give up

	batch    jetstream.MessageBatch
	batchCh  <-chan jetstream.Msg
	pauseC   <-chan time.Time // fetch back-off after an error
	idleC    <-chan time.Time // next look at Active while inactive
	lastPull time.Time
	bo       *backoff.ExponentialBackOff

	order ordering

	closing  bool
	ctxDone  <-chan struct{}
	deadline *time.Timer
	deadC    <-chan time.Time
}

func (l *loop) held() int { return len(l.all) - l.gone }

// directSlots is how many messages in handlers the run loop watches itself.
const directSlots = 2

// run is the subscription's event loop: it fetches while below its bounds, delivers the head of
// each ready lane (at most MaxLanes at once), and settles what the handlers report.
func (sb *subscription) run() {
	defer sb.owner.forget(sb)
	defer close(sb.out)
	defer sb.cancel()

	l := sb.newLoop()
	defer l.stop()
	progress := time.NewTicker(max(sb.ackWait/4, 10*time.Millisecond))
	defer progress.Stop()

	for !sb.closed(l) {
		sb.maybePull(l)
		sb.maybeAskInfo(l)
		if !sb.step(l, sb.nextTurn(l), progress.C) {
			return
		}
	}
}

// turn is what one pass of the run loop offers and watches besides the loop's own channels:
// the message offered to the handlers (outC is nil when there is none) and the Ack and Nack
// channels of the messages in the direct slots (nil for an empty slot).
type turn struct {
	outC        chan<- *message.Message
	outMsg      *message.Message
	d0, d1      *held
	ack0, nack0 <-chan struct{}
	ack1, nack1 <-chan struct{}
}

// nextTurn prepares the next pass of the run loop: it makes the Watermill message of the next
// delivery if there is one to offer, and picks up the direct slots.
func (sb *subscription) nextTurn(l *loop) turn {
	t := turn{d0: l.direct[0], d1: l.direct[1]}
	if t.d0 != nil {
		t.ack0, t.nack0 = t.d0.wm.Acked(), t.d0.wm.Nacked()
	}
	if t.d1 != nil {
		t.ack1, t.nack1 = t.d1.wm.Acked(), t.d1.wm.Nacked()
	}
	if next := sb.next(l); next != nil {
		if next.wm == nil {
			sb.emit(next)
		}
		t.outC, t.outMsg = sb.out, next.wm
	}
	return t
}

// step waits for the next event of the loop (a fetched message, a handler taking or settling a
// message, a timer, the end of the context) and handles it. It reports false when run must
// return: the close deadline passed.
func (sb *subscription) step(l *loop, t turn, tick <-chan time.Time) bool {
	select {
	case m, ok := <-l.batchCh:
		if !ok {
			sb.batchDone(l)
			return true
		}
		if h := sb.accept(m); h != nil {
			sb.add(l, h)
		}

	case t.outC <- t.outMsg:
		sb.handedOut(l, t.outMsg)

	case <-t.ack0:
		l.direct[0] = nil
		sb.settle(l, outcome{h: t.d0, acked: true})
	case <-t.nack0:
		l.direct[0] = nil
		sb.settle(l, outcome{h: t.d0})
	case <-t.ack1:
		l.direct[1] = nil
		sb.settle(l, outcome{h: t.d1, acked: true})
	case <-t.nack1:
		l.direct[1] = nil
		sb.settle(l, outcome{h: t.d1})

	case r := <-l.results:
		sb.settle(l, r)

	case ln := <-l.wake:
		ln.waiting = false
		sb.makeReady(l, ln)

	case r := <-l.order.checks:
		sb.checked(l, r)

	case ln := <-l.order.recheck:
		if ln.blocked {
			ln.blocked = false
			sb.makeReady(l, ln)
		}

	case r := <-l.order.infoC:
		sb.answered(l, r)

	case <-l.order.infoNext:
		l.order.infoNext = nil

	case <-l.pauseC:
		l.pauseC = nil

	case <-l.idleC:
		l.idleC = nil

	case now := <-tick:
		sb.progress(l.all, now)
		sb.pruneSettled(l, now)
		sb.publishStats(l, now)

	case <-l.ctxDone:
		sb.startClosing(l)

	case <-l.deadC:
		sb.closeTimedOut(l)
		return false
	}
	return true
}

// newLoop is the state of a new run.
func (sb *subscription) newLoop() *loop {
	l := &loop{
		lanes:   map[string]*lane{},
		results: make(chan outcome, sb.cfg.MaxLanes),
		wake:    make(chan *lane),
		stopped: make(chan struct{}),
		ctxDone: sb.ctx.Done(),
		order:   newOrdering(sb.cfg.LaneSubjects != nil),
	}
	l.bo = backoff.NewExponentialBackOff()
	l.bo.InitialInterval = 100 * time.Millisecond
	l.bo.MaxInterval = 5 * time.Second
	l.bo.MaxElapsedTime = 0
	return l
}

// stop ends what the loop started: watchers and Nack-delay timers give up, the close deadline
// is stopped.
func (l *loop) stop() {
	close(l.stopped)
	if l.deadline != nil {
		l.deadline.Stop()
	}
}

// closed starts closing once the subscription's context ended, and finishes it (everything held
// handed back in order, acks flushed, the pin given up) once no pull request is open and no
// handler holds a message; it reports whether run should return.
func (sb *subscription) closed(l *loop) bool {
	if !l.closing && sb.ctx.Err() != nil {
		sb.startClosing(l)
	}
	if !l.closing || l.batchCh != nil || l.busy > 0 {
		return false
	}
	sb.release(l.all)
	sb.flush()
	sb.unpin()
	return true
}

// handedOut records that a handler took wm, the head of the oldest ready lane: the loop watches
// its Ack or Nack itself in a free direct slot, or through a watcher goroutine.
func (sb *subscription) handedOut(l *loop, wm *message.Message) {
	ln := l.ready[0]
	l.ready = l.ready[1:]
	ln.ready, ln.inUse = false, true
	l.busy++
	switch h := ln.msgs[0]; {
	case l.direct[0] == nil:
		l.direct[0] = h
	case l.direct[1] == nil:
		l.direct[1] = h
	default:
		go watch(h, wm, l.results, l.stopped)
	}
}

// closeTimedOut gives up closing in order: a handler kept its message (or the pull request
// stayed open) past CloseTimeout, so everything held is handed back, the messages in handlers
// included (their late Acks are ignored).
func (sb *subscription) closeTimedOut(l *loop) {
	sb.logger.Warn("bus_close_timeout", "held", l.held(), "in_handler", l.busy, "fetch_open", l.batchCh != nil)
	sb.release(l.all)
	sb.flush()
}

// watch reports the handler's Ack or Nack of h's delivery wm to the run loop.
func watch(h *held, wm *message.Message, results chan<- outcome, stopped <-chan struct{}) {
	var r outcome
	select {
	case <-wm.Acked():
		r = outcome{h: h, acked: true}
	case <-wm.Nacked():
		r = outcome{h: h}
	case <-stopped:
		return
	}
	select {
	case results <- r:
	case <-stopped:
	}
}

func (sb *subscription) startClosing(l *loop) {
	l.closing = true
	l.ctxDone = nil
	l.deadline = time.NewTimer(sb.cfg.CloseTimeout)
	l.deadC = l.deadline.C
}

// maybePull starts a pull request when none is open and the subscription is below its bounds.
func (sb *subscription) maybePull(l *loop) {
	if l.batchCh != nil || l.pauseC != nil {
		return
	}
	pull := 0
	switch active, room := sb.active(), sb.cfg.MaxHeld-l.held(); {
	case l.closing && !(l.held() > 0 && sb.group != "" && time.Since(l.lastPull) >= sb.pinnedTTL/4):
		return
	case !l.closing && active && room >= sb.cfg.FetchBatch:
		pull = sb.cfg.FetchBatch
	case l.held() > 0 && sb.group != "" && time.Since(l.lastPull) >= sb.pinnedTTL/4:
		// A busy subscription still pulls (one message) now and then, closing included: the
		// server keeps the pin only while its holder pulls, and moving it while this one holds
		// a channel's earlier packets would let another worker deliver its later ones first.
		pull = 1
	case !active && l.held() == 0:
		sb.unpin()
		if l.idleC == nil {
			l.idleC = time.After(ActivePoll)
		}
	}
	if pull == 0 {
		return
	}
	l.lastPull = time.Now()
	opts := []jetstream.FetchOpt{jetstream.FetchMaxWait(sb.cfg.FetchWait)}
	if sb.group != "" {
		opts = append(opts, jetstream.FetchPriorityGroup(sb.group))
	}
	b, err := sb.cons.Fetch(pull, opts...)
	switch {
	case errors.Is(err, nats.ErrConnectionClosed):
		sb.logger.Error("bus_connection_closed", "err", err)
		sb.cancel()
	case err != nil:
		sb.logger.Warn("bus_fetch_failed", "err", err)
		l.pauseC = time.After(l.bo.NextBackOff())
	default:
		l.batch, l.batchCh = b, b.Messages()
	}
}

// batchDone ends the open pull request.
func (sb *subscription) batchDone(l *loop) {
	err := l.batch.Error()
	l.batch, l.batchCh = nil, nil
	if err != nil && !l.closing {
		sb.logger.Warn("bus_fetch_failed", "err", err)
		l.pauseC = time.After(l.bo.NextBackOff())
		return
	}
	l.bo.Reset()
}

// next is the message to offer to the handlers now, or nil: the head of the oldest ready lane,
// while fewer than MaxLanes lanes are in handlers.
func (sb *subscription) next(l *loop) *held {
	if l.closing || len(l.ready) == 0 || l.busy >= sb.cfg.MaxLanes {
		return nil
	}
	return l.ready[0].msgs[0]
}

// add puts a fetched message into its lane, in stream order (a redelivery of an earlier message
// goes before the later ones still waiting).
func (sb *subscription) add(l *loop, h *held) {
	sb.observe(l, h)
	key := ""
	if sb.cfg.Lane != nil {
		key = sb.cfg.Lane(h.jm.Subject())
	}
	ln := l.lanes[key]
	if ln == nil {
		ln = &lane{key: key}
		l.lanes[key] = ln
	}
	h.lane = ln
	if l.order.on && slices.ContainsFunc(ln.msgs, func(x *held) bool { return x.d.seq == h.d.seq }) {
		// A second delivery of a message held here (its AckWait lapsed): the server's count of
		// unacknowledged messages no longer matches what is held.
		l.order.sure, l.order.spoiled = false, true
	}
	lo := 0
	if ln.inUse || ln.waiting {
		lo = 1 // the head is being handled
	}
	i := len(ln.msgs)
	for i > lo && ln.msgs[i-1].d.seq > h.d.seq {
		i--
	}
	ln.msgs = slices.Insert(ln.msgs, i, h)
	l.all = append(l.all, h)
	if i == 0 && len(ln.msgs) > 1 {
		// A new head: whatever the lane waited for as the old one's predecessor may be this.
		ln.blocked, ln.blockedSince, ln.backoff = false, time.Time{}, 0
		if ln.ready && sb.needsCheck(l, ln) {
			ln.ready = false
			l.ready = slices.DeleteFunc(l.ready, func(x *lane) bool { return x == ln })
		}
	}
	sb.makeReady(l, ln)
}

// makeReady queues a lane whose head can be delivered, or has the head looked up first when
// the subscription cannot tell that no earlier message of the lane is elsewhere.
func (sb *subscription) makeReady(l *loop, ln *lane) {
	if ln.ready || ln.inUse || ln.waiting || ln.checking || ln.blocked || len(ln.msgs) == 0 {
		return
	}
	if sb.needsCheck(l, ln) {
		sb.queueCheck(l, ln)
		return
	}
	ln.ready = true
	l.ready = append(l.ready, ln)
}

// settle applies a handler's Ack or Nack of its lane's head.
func (sb *subscription) settle(l *loop, r outcome) {
	h, ln := r.h, r.h.lane
	if h.gone || len(ln.msgs) == 0 || ln.msgs[0] != h {
		return // released at a close timeout
	}
	ln.inUse = false
	l.busy--
	h.cancel()
	if r.acked {
		if err := h.jm.Ack(); err != nil {
			sb.logger.Warn("bus_ack_failed", "stream_seq", h.d.seq, "message_id", h.d.uuid, "err", err)
		}
		sb.drop(l, h)
		sb.makeReady(l, ln)
		return
	}
	h.wm = nil
	if l.closing {
		return // handed back to the server by release, in order
	}
	if sb.cfg.MaxDeliver > 0 && sb.numDelivered(h) >= uint64(sb.cfg.MaxDeliver) {
		sb.logger.Warn("bus_max_deliver_reached", "stream_seq", h.d.seq, "message_id", h.d.uuid, "num_delivered", sb.numDelivered(h))
		sb.term(h, termMaxDeliver)
		sb.drop(l, h)
		sb.makeReady(l, ln)
		return
	}
	ln.waiting = true
	stopped, wake := l.stopped, l.wake
	time.AfterFunc(sb.cfg.NakDelay, func() {
		select {
		case wake <- ln:
		case <-stopped:
		}
	})
}

// drop removes a settled head from its lane and from the held set.
func (sb *subscription) drop(l *loop, h *held) {
	ln := h.lane
	sb.settledHere(l, h)
	ln.msgs[0] = nil
	ln.msgs = ln.msgs[1:]
	if len(ln.msgs) == 0 && !ln.waiting {
		delete(l.lanes, ln.key) // idle lanes are released
	}
	h.gone = true
	l.gone++
	if l.gone > 64 && l.gone > len(l.all)/2 {
		l.all = slices.DeleteFunc(l.all, func(h *held) bool { return h.gone })
		l.gone = 0
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
	now := time.Now()
	return &held{jm: m, d: d, touched: now, received: now}
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
func (sb *subscription) progress(all []*held, now time.Time) {
	due := false
	for _, h := range all {
		due = due || (!h.gone && now.Sub(h.touched) >= sb.ackWait/2)
	}
	if !due {
		return
	}
	var failed error
	n := 0
	for _, h := range all {
		if h.gone {
			continue
		}
		n++
		if err := h.jm.InProgress(); err != nil {
			failed = err
			continue
		}
		h.touched = now
	}
	if failed != nil {
		sb.logger.Warn("bus_in_progress_failed", "held", n, "err", failed)
	}
}

// term terminates h.
func (sb *subscription) term(h *held, reason string) {
	if err := h.jm.TermWithReason(reason); err != nil {
		sb.logger.Warn("bus_term_failed", "stream_seq", h.d.seq, "err", err)
	}
}

// release Naks every held message, in stream order, so the server redelivers them at once, in
// that order.
func (sb *subscription) release(all []*held) {
	closed := sb.owner.js.Conn().IsClosed()
	all = slices.Clone(all)
	slices.SortStableFunc(all, func(a, b *held) int { return cmp.Compare(a.d.seq, b.d.seq) })
	for _, h := range all {
		if h.gone {
			continue
		}
		h.gone = true
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

// SubscriptionStats is a subscription's load, refreshed every AckWait/4.
type SubscriptionStats struct {
	// Topic is the subscription's topic.
	Topic string
	// Held counts the messages it holds (fetched, not yet acked).
	Held int
	// Busy counts its lanes with a message in a handler.
	Busy int
	// Lanes counts its lanes with held messages.
	Lanes int
	// Oldest is when it fetched the oldest message it holds (zero when it holds none).
	Oldest time.Time
}

func (sb *subscription) publishStats(l *loop, now time.Time) {
	s := SubscriptionStats{Topic: sb.topic, Held: l.held(), Busy: l.busy, Lanes: len(l.lanes)}
	for _, h := range l.all {
		if !h.gone {
			s.Oldest = h.received
			break
		}
	}
	sb.statsMu.Lock()
	sb.stats = s
	sb.statsMu.Unlock()
}
