package bus

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Lane order against out-of-order deliveries.
//
// The server delivers new messages in stream order, but a message delivered where nobody reads
// it (a pull request the client stopped waiting for, a worker that left or died holding it) comes
// back only after its AckWait, behind newer ones. A lane must then wait for it. The subscription
// knows when that cannot happen: while every delivery of the consumer reached it (its delivery
// sequences have no gap) since a moment when the consumer's unacknowledged messages were all in
// its hands, every unacknowledged message earlier than one it holds is one it holds too, and
// lanes are kept in stream order. It is then "sure" and delivers heads at once. Otherwise (a
// fresh subscription, a new pin, a gap) it asks the stream, for each lane head, for the first
// stored message of the lane's subjects: on a stream that keeps only unsettled messages
// (WorkQueue or Interest retention) one earlier than the head is an unsettled earlier message of
// the lane, and the head waits until it is delivered here (it then sorts before the head) or
// settled elsewhere. Meanwhile it polls the consumer's info until the unacknowledged count shows
// nothing outside its hands: sure again.

// Order settings.
const (
	// maxOrderChecks bounds a subscription's stream lookups in flight.
	maxOrderChecks = 8
	// orderRecheckMin and orderRecheckMax bound how often a waiting lane asks the stream again.
	orderRecheckMin = 50 * time.Millisecond
	orderRecheckMax = time.Second
	// orderInfoPoll is how often a subscription that is not sure asks the consumer's info.
	orderInfoPoll = 100 * time.Millisecond
	// orderLookupTimeout bounds one lookup.
	orderLookupTimeout = 5 * time.Second
	// DefaultOrderWait is how long a lane waits for an earlier message that stays stored and
	// undelivered before it goes on without it (see [SubscriberConfig.OrderWait]).
	DefaultOrderWait = time.Minute
)

// settledSeq is a stream sequence the subscription acked or terminated, kept until the server
// surely processed the ack (its removal from the stream may lag behind the ack).
type settledSeq struct {
	seq uint64
	at  time.Time
}

// checkResult is a stream lookup for a lane's head.
type checkResult struct {
	ln      *lane
	h       *held
	earlier uint64 // the first unsettled earlier message of the lane; 0: none
	stream  jetstream.Stream
	err     error
}

// infoResult is a consumer info lookup.
type infoResult struct {
	info *jetstream.ConsumerInfo
	err  error
}

// ordering is the order state of a subscription's run loop (used only with LaneSubjects).
type ordering struct {
	on       bool
	stream   jetstream.Stream // fetched at the first lookup
	sure     bool
	lastCseq uint64
	lastPin  string
	settled  map[string][]settledSeq // per lane key

	checks  chan checkResult
	queue   []*lane // lanes waiting for a lookup slot
	running int
	recheck chan *lane

	infoC     chan infoResult
	infoBusy  bool
	infoHeld  int      // held when the info request left
	infoDrops int      // messages settled since
	infoRecv  []uint64 // delivery sequences received since
	spoiled   bool     // a gap or a new pin since
	infoNext  <-chan time.Time
}

func newOrdering(on bool) ordering {
	return ordering{
		on:      on,
		sure:    !on,
		settled: map[string][]settledSeq{},
		checks:  make(chan checkResult, maxOrderChecks),
		recheck: make(chan *lane),
		infoC:   make(chan infoResult, 1),
	}
}

// observe notes a delivery: a fresh subscription, a new pin or a gap in the consumer's delivery
// sequence mean some message may be in other hands.
func (sb *subscription) observe(l *loop, h *held) {
	o := &l.order
	if !o.on {
		return
	}
	if o.lastCseq == 0 || h.d.cseq != o.lastCseq+1 || sb.pinID != o.lastPin {
		if o.sure {
			sb.logger.Debug("bus_order_unsure", "consumer_seq", h.d.cseq, "last_consumer_seq", o.lastCseq)
		}
		o.sure = false
		o.spoiled = true
	}
	o.lastCseq = max(o.lastCseq, h.d.cseq)
	if o.infoBusy {
		o.infoRecv = append(o.infoRecv, h.d.cseq)
	}
	o.lastPin = sb.pinID
}

// needsCheck reports whether ln's head must be looked up before it is delivered.
func (sb *subscription) needsCheck(l *loop, ln *lane) bool {
	return !l.order.sure && ln.verified != ln.msgs[0]
}

// queueCheck looks ln's head up in the stream, now or when a lookup slot frees.
func (sb *subscription) queueCheck(l *loop, ln *lane) {
	o := &l.order
	if ln.checking {
		return
	}
	ln.checking = true
	if o.running >= maxOrderChecks {
		ln.queued = true
		o.queue = append(o.queue, ln)
		return
	}
	sb.startCheck(l, ln)
}

func (sb *subscription) startCheck(l *loop, ln *lane) {
	o := &l.order
	o.running++
	h := ln.msgs[0]
	subjects := sb.cfg.LaneSubjects(h.jm.Subject())
	var skip []uint64
	for _, s := range o.settled[ln.key] {
		skip = append(skip, s.seq)
	}
	stream := o.stream
	checks, stopped := o.checks, l.stopped
	go func() {
		r := checkResult{ln: ln, h: h}
		r.earlier, r.stream, r.err = sb.firstEarlier(stream, subjects, h.d.seq, skip)
		select {
		case checks <- r:
		case <-stopped:
		}
	}()
}

// firstEarlier is the first message stored on subjects before seq that is not in skip (0: none).
func (sb *subscription) firstEarlier(stream jetstream.Stream, subjects []string, seq uint64, skip []uint64) (uint64, jetstream.Stream, error) {
	ctx, cancel := context.WithTimeout(sb.ctx, orderLookupTimeout)
	defer cancel()
	if stream == nil {
		s, err := sb.owner.js.Stream(ctx, sb.stream)
		if err != nil {
			return 0, nil, err
		}
		stream = s
	}
	first := uint64(0)
	for _, subj := range subjects {
		from := uint64(1)
		for {
			m, err := stream.GetMsg(ctx, from, jetstream.WithGetMsgSubject(subj))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return 0, stream, err
			}
			if m.Sequence >= seq {
				break
			}
			if slices.Contains(skip, m.Sequence) {
				from = m.Sequence + 1
				continue
			}
			if first == 0 || m.Sequence < first {
				first = m.Sequence
			}
			break
		}
	}
	return first, stream, nil
}

// checked applies a lookup: the head goes on, or waits for the earlier message.
func (sb *subscription) checked(l *loop, r checkResult) {
	o := &l.order
	o.running--
	if o.stream == nil {
		o.stream = r.stream
	}
	for o.running < maxOrderChecks && len(o.queue) > 0 {
		next := o.queue[0]
		o.queue = o.queue[1:]
		next.queued = false
		if len(next.msgs) == 0 || next.msgs[0].gone {
			next.checking = false
			continue
		}
		sb.startCheck(l, next)
	}
	ln := r.ln
	ln.checking = false
	if l.closing || r.h.gone || len(ln.msgs) == 0 || ln.msgs[0] != r.h {
		sb.makeReady(l, ln) // the head changed meanwhile: look the new one up
		return
	}
	now := time.Now()
	switch {
	case o.sure:
	case r.err != nil:
		sb.logger.Warn("bus_order_lookup_failed", "stream_seq", r.h.d.seq, "err", r.err)
		sb.waitEarlier(l, ln, now)
		return
	case r.earlier != 0:
		if ln.blockedSince.IsZero() {
			ln.blockedSince = now
			sb.logger.Info("bus_lane_waits_for_earlier", "lane", ln.key, "stream_seq", r.h.d.seq, "earlier_seq", r.earlier)
		}
		if now.Sub(ln.blockedSince) < sb.cfg.OrderWait {
			sb.waitEarlier(l, ln, now)
			return
		}
		sb.logger.Error("bus_order_wait_expired", "lane", ln.key, "stream_seq", r.h.d.seq, "earlier_seq", r.earlier,
			"waited", now.Sub(ln.blockedSince).Round(time.Millisecond))
	}
	ln.verified = r.h
	ln.blockedSince = time.Time{}
	ln.backoff = 0
	sb.makeReady(l, ln)
}

// waitEarlier asks the stream again about ln's head a little later (sooner if an earlier
// message arrives and becomes the head).
func (sb *subscription) waitEarlier(l *loop, ln *lane, now time.Time) {
	if ln.blockedSince.IsZero() {
		ln.blockedSince = now
	}
	ln.backoff = min(max(2*ln.backoff, orderRecheckMin), orderRecheckMax)
	ln.blocked = true
	recheck, stopped := l.order.recheck, l.stopped
	time.AfterFunc(ln.backoff, func() {
		select {
		case recheck <- ln:
		case <-stopped:
		}
	})
}

// settledHere notes a message acked or terminated by this subscription.
func (sb *subscription) settledHere(l *loop, h *held) {
	o := &l.order
	if !o.on {
		return
	}
	o.infoDrops++
	key := h.lane.key
	o.settled[key] = append(o.settled[key], settledSeq{seq: h.d.seq, at: time.Now()})
}

// pruneSettled forgets settled sequences whose acks the server has long processed.
func (sb *subscription) pruneSettled(l *loop, now time.Time) {
	for key, s := range l.order.settled {
		s = slices.DeleteFunc(s, func(x settledSeq) bool { return now.Sub(x.at) > 2*sb.ackWait })
		if len(s) == 0 {
			delete(l.order.settled, key)
			continue
		}
		l.order.settled[key] = s
	}
}

// maybeAskInfo starts a consumer info request when the subscription is not sure and holds
// messages or serves the consumer (holds its group's pin, or the consumer has no group), so that
// it is sure before the next messages come.
func (sb *subscription) maybeAskInfo(l *loop) {
	o := &l.order
	if o.sure || o.infoBusy || o.infoNext != nil || l.closing || (l.held() == 0 && sb.group != "" && sb.pinID == "") {
		return
	}
	o.infoBusy, o.infoHeld, o.infoDrops, o.infoRecv, o.spoiled = true, l.held(), 0, o.infoRecv[:0], false
	infoC, stopped := o.infoC, l.stopped
	go func() {
		ctx, cancel := context.WithTimeout(sb.ctx, orderLookupTimeout)
		defer cancel()
		info, err := sb.cons.Info(ctx)
		select {
		case infoC <- infoResult{info: info, err: err}:
		case <-stopped:
		}
	}()
}

// answered applies a consumer info: sure when every unacknowledged message is in this
// subscription's hands. When the server took its snapshot, at least these were unacknowledged
// and here: those held when the request left and those received since that it had delivered
// by then, less any settled since (their acks may have been processed first). If the server
// counts no more than that, and delivered nothing that did not arrive here, nothing is
// elsewhere.
func (sb *subscription) answered(l *loop, r infoResult) {
	o := &l.order
	o.infoBusy = false
	if o.sure {
		return
	}
	if r.err == nil && !o.spoiled && r.info.Delivered.Consumer <= o.lastCseq && sb.pinnedBy(r.info, sb.pinID) {
		here := o.infoHeld - o.infoDrops
		for _, c := range o.infoRecv {
			if c <= r.info.Delivered.Consumer {
				here++
			}
		}
		if r.info.NumAckPending <= here {
			sb.becomeSure(l)
			return
		}
	}
	o.infoNext = time.After(orderInfoPoll)
}

// pinnedBy reports whether the consumer's group is pinned to id (true without a group).
func (sb *subscription) pinnedBy(info *jetstream.ConsumerInfo, id string) bool {
	if sb.group == "" {
		return true
	}
	for _, g := range info.PriorityGroups {
		if g.Group == sb.group {
			return id != "" && g.PinnedClientID == id
		}
	}
	return false
}

// becomeSure lets every lane waiting for a lookup go on.
func (sb *subscription) becomeSure(l *loop) {
	o := &l.order
	o.sure = true
	for _, ln := range o.queue {
		ln.queued, ln.checking = false, false
	}
	o.queue = o.queue[:0]
	sb.logger.Debug("bus_order_sure", "held", l.held())
	for _, ln := range l.lanes {
		ln.blocked, ln.blockedSince, ln.backoff = false, time.Time{}, 0
		if ln.checking {
			continue // its lookup is under way; its result lets it go
		}
		sb.makeReady(l, ln)
	}
}
