// Package relay is the node's adapter.Relay over core NATS: the process whose poll loop holds an
// account's one connection (a WeCom robot's long connection) serves the calls other processes
// make for that account on subjects.Relay(key), in queue group subjects.RelayQueue, so one holder
// runs each call even while a poll loop moves between workers. A call made in the holding
// process runs there directly, without a round trip.
//
// A call's reply carries its result, or its error as headers: the ack code and message
// (Xim-Error-Code, Xim-Error-Message), the platform's retry-after (Xim-Retry-After-Ms) and
// whether the outcome is in doubt (Xim-Ambiguous), so the caller's delivery stage treats a
// relayed failure exactly as a local one. The caller's deadline travels in Xim-Deadline-Ms.
package relay

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// Headers of a relayed call and its reply.
const (
	hdrDeadline   = "Xim-Deadline-Ms"
	hdrCode       = "Xim-Error-Code"
	hdrMessage    = "Xim-Error-Message"
	hdrRetryAfter = "Xim-Retry-After-Ms"
	hdrAmbiguous  = "Xim-Ambiguous"
)

// MaxWait bounds how long a holder works on one call when its caller set no deadline.
const MaxWait = 2 * time.Minute

// Relay serves and makes relayed calls on one NATS connection. Release every Hold before the
// connection closes: each waits for its calls in flight.
type Relay struct {
	nc    *nats.Conn
	log   *slog.Logger
	calls *prometheus.CounterVec

	mu   sync.Mutex
	held map[string][]*hold // key -> its holds in this process, the latest last
}

var _ adapter.Relay = (*Relay)(nil)

// New returns a Relay on nc, counting its calls in ximd_relayed_calls_total{way}: "sent" (to the
// process holding the key), "served" (for another process), "not_held" (no process held it).
func New(nc *nats.Conn, reg prometheus.Registerer, log *slog.Logger) (*Relay, error) {
	r := &Relay{nc: nc, log: log, held: map[string][]*hold{},
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ximd_relayed_calls_total",
			Help: "Calls of an account held by another process (a WeCom robot's connection), by way: sent, served, not_held."}, []string{"way"})}
	if err := reg.Register(r.calls); err != nil {
		return nil, err
	}
	return r, nil
}

// hold is one Hold: its serve function, subscription and calls in flight.
type hold struct {
	serve  adapter.RelayFunc
	sub    *nats.Subscription
	ctx    context.Context
	cancel context.CancelFunc
	calls  sync.WaitGroup
}

// Hold implements adapter.Relay. While a process holds key twice (a poll loop started again
// before the last one ended) the latest Hold serves its local calls.
func (r *Relay) Hold(key string, serve adapter.RelayFunc) (release func()) {
	ctx, cancel := context.WithCancel(context.Background())
	h := &hold{serve: serve, ctx: ctx, cancel: cancel}
	subject, err := subjects.Relay(key)
	if err == nil {
		h.sub, err = r.nc.QueueSubscribe(subject, subjects.RelayQueue, func(m *nats.Msg) {
			h.calls.Add(1)
			go func() { defer h.calls.Done(); r.answer(h, m) }()
		})
	}
	if err == nil {
		err = r.nc.Flush() // the server knows the holder before Hold returns
	}
	if err != nil {
		// Local calls still run; other processes see no holder and retry.
		r.log.Error("relay_hold_failed", "key", key, "err", err)
	}
	r.mu.Lock()
	r.held[key] = append(r.held[key], h)
	r.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { r.release(key, h) }) }
}

// Release bounds: how long the server may take to stop sending a released hold's calls, and how
// long the calls in flight may go on before their context ends.
const (
	drainWait = 5 * time.Second
	callGrace = 5 * time.Second
)

// release ends h: no further local call reaches it, the server sends it no more calls (those
// already sent to it are served), and the calls in flight finish within callGrace.
func (r *Relay) release(key string, h *hold) {
	r.mu.Lock()
	hs := r.held[key]
	for i, x := range hs {
		if x == h {
			hs = append(hs[:i:i], hs[i+1:]...)
			break
		}
	}
	if len(hs) == 0 {
		delete(r.held, key)
	} else {
		r.held[key] = hs
	}
	r.mu.Unlock()
	if h.sub != nil {
		closed := h.sub.StatusChanged(nats.SubscriptionClosed)
		if err := h.sub.Drain(); err == nil {
			select {
			case <-closed:
			case <-time.After(drainWait):
				r.log.Warn("relay_drain_slow", "key", key)
			}
		}
	}
	done := make(chan struct{})
	go func() { h.calls.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(callGrace):
		h.cancel()
		<-done
	}
	h.cancel()
}

// Call implements adapter.Relay.
func (r *Relay) Call(ctx context.Context, key string, req []byte) ([]byte, error) {
	r.mu.Lock()
	var local *hold
	if hs := r.held[key]; len(hs) > 0 {
		local = hs[len(hs)-1]
	}
	r.mu.Unlock()
	if local != nil {
		return local.serve(ctx, req)
	}
	subject, err := subjects.Relay(key)
	if err != nil {
		return nil, profile.Errorf(profile.CodeInternal, "relay key: %v", err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = req
	if d, ok := ctx.Deadline(); ok {
		msg.Header.Set(hdrDeadline, strconv.FormatInt(time.Until(d).Milliseconds(), 10))
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, MaxWait)
		defer cancel()
	}
	reply, err := r.nc.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		r.calls.WithLabelValues("not_held").Inc()
		return nil, errors.Join(adapter.ErrNotHeld, profile.Errorf(profile.CodeTargetUnavailable, "no process holds the account's connection (%s)", key))
	case err != nil:
		return nil, &adapter.AmbiguousError{Err: profile.Errorf(profile.CodeTargetUnavailable, "relayed call: %v", err)}
	}
	r.calls.WithLabelValues("sent").Inc()
	return reply.Data, errorOf(reply.Header)
}

// answer runs one call of another process and replies with its result or error.
func (r *Relay) answer(h *hold, m *nats.Msg) {
	wait := MaxWait
	if ms, err := strconv.ParseInt(m.Header.Get(hdrDeadline), 10, 64); err == nil {
		// A tenth less than the caller's: the caller hears how the call ended.
		wait = min(max(time.Duration(ms)*time.Millisecond*9/10, 0), MaxWait)
	}
	ctx, cancel := context.WithTimeout(h.ctx, wait)
	defer cancel()
	out, err := h.serve(ctx, m.Data)
	if err != nil && ctx.Err() != nil && profile.AsError(err).Code == profile.CodeInternal {
		// Ended by the deadline (or the hold's release) without the call saying how: it may
		// have been applied.
		err = &adapter.AmbiguousError{Err: profile.Errorf(profile.CodeTargetUnavailable, "relayed call: %v", err)}
	}
	r.calls.WithLabelValues("served").Inc()
	reply := nats.NewMsg(m.Reply)
	reply.Data = out
	if err != nil {
		reply.Data = nil
		putError(reply.Header, err)
	}
	if rerr := m.RespondMsg(reply); rerr != nil {
		r.log.Warn("relay_reply_failed", "subject", m.Subject, "err", rerr)
	}
}

// putError writes err into h as its ack code, message, retry-after and doubt.
func putError(h nats.Header, err error) {
	pe := profile.AsError(err)
	h.Set(hdrCode, pe.Code)
	h.Set(hdrMessage, pe.Message)
	if after, ok := adapter.RetryAfterOf(err); ok {
		h.Set(hdrRetryAfter, strconv.FormatInt(after.Milliseconds(), 10))
	}
	if adapter.IsAmbiguous(err) {
		h.Set(hdrAmbiguous, "1")
	}
}

// errorOf is the error putError wrote into h, nil when there is none.
func errorOf(h nats.Header) error {
	code := h.Get(hdrCode)
	if code == "" {
		return nil
	}
	var err error = profile.Errorf(code, "%s", h.Get(hdrMessage))
	if ms, perr := strconv.ParseInt(h.Get(hdrRetryAfter), 10, 64); perr == nil && ms > 0 {
		err = &adapter.RetryAfterError{After: time.Duration(ms) * time.Millisecond, Err: err}
	}
	if h.Get(hdrAmbiguous) == "1" {
		err = &adapter.AmbiguousError{Err: err}
	}
	return err
}
