package page

import (
	"context"
	"encoding/json"
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
	occ := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy}
	resumed := false
	if last, err := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64); err == nil && last > 0 {
		occ.DeliverPolicy, occ.OptStartSeq, resumed = jetstream.DeliverByStartSequencePolicy, last+1, true
	}
	js := h.store.JetStream()
	cons, err := js.OrderedConsumer(ctx, subjects.StreamWebchat, occ)
	if err != nil {
		h.logger.Warn("webchat_events_failed", "channel", ch.ID, "err", err)
		writeError(w, http.StatusServiceUnavailable, profile.CodeUnavailable, "webchat store unavailable")
		return
	}
	info, err := cons.Info(ctx)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, profile.CodeUnavailable, "webchat store unavailable")
		return
	}
	pending := info.NumPending

	msgs := make(chan jetstream.Msg, 64)
	it, err := cons.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, profile.CodeUnavailable, "webchat store unavailable")
		return
	}
	go func() {
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
	}()
	defer it.Stop()

	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprint(w, "retry: 2000\n\n")
	ready := false
	if pending == 0 {
		ready = true
		_, _ = fmt.Fprint(w, "event: ready\ndata: {}\n\n")
	}
	flusher.Flush()

	heartbeat := time.NewTicker(h.cfg.Heartbeat)
	defer heartbeat.Stop()
	// The link stays valid only while the channel is open with this secret: a DELETE or a new
	// secret ends the stream within RevokeCheck.
	key := pageKey(r)
	revoke := time.NewTicker(RevokeCheck)
	defer revoke.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-revoke.C:
			if _, valid, err := h.valid(ctx, ch.ID, key); err == nil && !valid {
				_, _ = fmt.Fprint(w, "event: revoked\ndata: {}\n\n")
				flusher.Flush()
				h.logger.Info("webchat_stream_revoked", "channel", ch.ID)
				return
			}
		case <-heartbeat.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case m, ok := <-msgs:
			if !ok {
				return
			}
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			replay := !ready
			if h.show(m.Data(), md, replay, resumed) {
				if _, err := fmt.Fprintf(w, "id: %d\nevent: item\ndata: %s\n\n", md.Sequence.Stream, m.Data()); err != nil {
					return
				}
			}
			if !ready && md.NumPending == 0 {
				ready = true
				_, _ = fmt.Fprint(w, "event: ready\ndata: {}\n\n")
			}
			if ready || len(msgs) == 0 {
				flusher.Flush()
			}
		}
	}
}

// show decides whether a replayed item is sent: of the history only the last HistoryLimit
// items, and a status only while it is recent.
func (h *Handler) show(data []byte, md *jetstream.MsgMetadata, replay, resumed bool) bool {
	if !replay || resumed {
		return true
	}
	if md.NumPending >= uint64(h.cfg.HistoryLimit) {
		return false
	}
	var it struct {
		Kind string `json:"kind"`
	}
	if json.Unmarshal(data, &it) == nil && it.Kind == webchat.KindStatus {
		return time.Since(md.Timestamp) < h.cfg.StatusMaxAge
	}
	return true
}
