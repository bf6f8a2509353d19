package page

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/webchat"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// RevokeCheck is how often an open event stream checks that its link is still valid.
const RevokeCheck = 250 * time.Millisecond

// events streams a channel's items to a page as Server-Sent Events: first its history (the
// latest state of its last HistoryLimit items), then an `event: ready`, then every change as it
// is written. Each event's id is the item's stream sequence; a reconnecting EventSource sends it
// back as Last-Event-ID and gets only what changed after it.
func (h *Handler) events(w http.ResponseWriter, r *http.Request, ch adapter.Channel) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, profile.CodeInternal, "streaming unsupported")
		return
	}
	release, ok := h.quotas.openStream(ch.ID)
	if !ok {
		tooMany(w, time.Second, "this channel has too many open pages (XIM_WEBCHAT_MAX_STREAMS)")
		return
	}
	defer release()
	filter, err := subjects.WebchatChannel(ch.ID)
	if err != nil {
		writeError(w, http.StatusBadRequest, profile.CodeInvalidChannelID, "bad channel")
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(h.life, cancel)
	defer stop()
	if h.life.Err() != nil {
		writeError(w, http.StatusServiceUnavailable, profile.CodeUnavailable, "gateway shutting down")
		return
	}
	items, ok := h.openItems(ctx, w, ch.ID, filter, r.Header.Get("Last-Event-ID"))
	if !ok {
		return
	}
	defer items.stop()
	s := &pageStream{w: w, flusher: flusher, items: items}
	s.start()
	// The link stays valid only while the channel is open with this secret: a DELETE or a new
	// secret ends the stream within RevokeCheck.
	key := pageKey(r)
	h.serve(ctx, s, ch.ID, func(ctx context.Context) (bool, error) {
		if key == "" { // a bot's visitor: their conversation's channel is still open
			cur, ok, err := h.lookup(ctx, ch.ID)
			return ok && cur.Bot == ch.Bot && cur.OpenedAt == ch.OpenedAt, err
		}
		_, valid, err := h.valid(ctx, ch.ID, key)
		return valid, err
	})
}

// itemFeed is an open event stream's source: the channel's items in stream order, from an
// ordered consumer.
type itemFeed struct {
	msgs    chan jetstream.Msg // closed when the consumer ends or the stream's context does
	stop    func()             // stops the consumer
	pending uint64             // items written before the feed opened: the history replayed first
	resumed bool               // the page sent Last-Event-ID: it gets what changed after it, whole
}

// openItems opens the feed of filter's items, after lastEventID when it is a stream sequence
// (a reconnecting page's Last-Event-ID). When the webchat store is unavailable it answers w
// with 503 and reports false.
func (h *Handler) openItems(ctx context.Context, w http.ResponseWriter, channel, filter, lastEventID string) (*itemFeed, bool) {
	occ := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy}
	feed := &itemFeed{msgs: make(chan jetstream.Msg, 64)}
	if last, err := strconv.ParseUint(lastEventID, 10, 64); err == nil && last > 0 {
		occ.DeliverPolicy, occ.OptStartSeq, feed.resumed = jetstream.DeliverByStartSequencePolicy, last+1, true
	}
	js := h.store.JetStream()
	cons, err := js.OrderedConsumer(ctx, subjects.StreamWebchat, occ)
	if err != nil {
		h.logger.Warn("webchat_events_failed", "channel", channel, "err", err)
		writeError(w, http.StatusServiceUnavailable, profile.CodeUnavailable, "webchat store unavailable")
		return nil, false
	}
	info, err := cons.Info(ctx)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, profile.CodeUnavailable, "webchat store unavailable")
		return nil, false
	}
	feed.pending = info.NumPending
	it, err := cons.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, profile.CodeUnavailable, "webchat store unavailable")
		return nil, false
	}
	go pump(ctx, it, feed.msgs)
	feed.stop = it.Stop
	return feed, true
}

// pump moves the consumer's messages to msgs until it or ctx ends, then closes msgs.
func pump(ctx context.Context, it jetstream.MessagesContext, msgs chan<- jetstream.Msg) {
	defer close(msgs)
	for {
		m, err := it.Next()
		if err != nil {
			return
		}
		select {
		case msgs <- m:
		case <-ctx.Done():
			return
		}
	}
}

// pageStream is the writing side of an open event stream.
type pageStream struct {
	w       http.ResponseWriter
	flusher http.Flusher
	items   *itemFeed
	// ready: the history is replayed and `event: ready` sent; items are live from here on.
	ready bool
}

// start answers the request with the event-stream headers and the client's retry interval, and
// sends `event: ready` at once when there is no history to replay.
func (s *pageStream) start() {
	hd := s.w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprint(s.w, "retry: 2000\n\n")
	if s.items.pending == 0 {
		s.ready = true
		_, _ = fmt.Fprint(s.w, "event: ready\ndata: {}\n\n")
	}
	s.flusher.Flush()
}

// serve writes the stream's items as they come, with a keep-alive comment every Heartbeat,
// until the request or the gateway ends, the feed ends, a write fails, or the page's link (its
// secret key) is no longer valid for channel, checked every RevokeCheck.
func (h *Handler) serve(ctx context.Context, s *pageStream, channel string, valid func(context.Context) (bool, error)) {
	heartbeat := time.NewTicker(h.cfg.Heartbeat)
	defer heartbeat.Stop()
	revoke := time.NewTicker(RevokeCheck)
	defer revoke.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-revoke.C:
			if ok, err := valid(ctx); err == nil && !ok {
				_, _ = fmt.Fprint(s.w, "event: revoked\ndata: {}\n\n")
				s.flusher.Flush()
				h.logger.Info("webchat_stream_revoked", "channel", channel)
				return
			}
		case <-heartbeat.C:
			if _, err := fmt.Fprint(s.w, ": keep-alive\n\n"); err != nil {
				return
			}
			s.flusher.Flush()
		case m, ok := <-s.items.msgs:
			if !ok || !h.item(s, m) {
				return
			}
		}
	}
}

// item writes one item m as an `event: item` (unless show holds a replayed one back) and
// `event: ready` after the last of the history. It reports false when the write failed.
//
// The item is sent as webchat.PageData makes it: an assistant message with its Markdown
// rendered (the html field, the only markup the page ever sets), everything else without markup.
// An item that cannot be decoded is not sent.
func (h *Handler) item(s *pageStream, m jetstream.Msg) bool {
	md, err := m.Metadata()
	if err != nil {
		return true
	}
	replay := !s.ready
	it, data, err := webchat.PageData(m.Data())
	if err != nil {
		h.logger.Warn("webchat_item_unreadable", "subject", m.Subject(), "err", err)
	} else if h.show(it.Kind, md, replay, s.items.resumed) {
		if _, err := fmt.Fprintf(s.w, "id: %d\nevent: item\ndata: %s\n\n", md.Sequence.Stream, data); err != nil {
			return false
		}
	}
	if !s.ready && md.NumPending == 0 {
		s.ready = true
		_, _ = fmt.Fprint(s.w, "event: ready\ndata: {}\n\n")
	}
	if s.ready || len(s.items.msgs) == 0 {
		s.flusher.Flush()
	}
	return true
}

// show decides whether a replayed item of kind is sent: of the history only the last
// HistoryLimit items, and a status only while it is recent.
func (h *Handler) show(kind string, md *jetstream.MsgMetadata, replay, resumed bool) bool {
	if !replay || resumed {
		return true
	}
	if md.NumPending >= uint64(h.cfg.HistoryLimit) {
		return false
	}
	if kind == webchat.KindStatus {
		return time.Since(md.Timestamp) < h.cfg.StatusMaxAge
	}
	return true
}
