package edge

import (
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/pipeline/channels"
	"github.com/ximd/ximd/profile"
)

// Receivers serves POST /v1/targets/{adapter}/{channel}/{path...} (edge-api §7.1, §7.2): the
// route by which a platform posts its users' messages, handed to the adapter (a
// adapter.Receiver) with the inboxes of the adapter's channels. No bearer token: the adapter checks the platform's
// signature; a channel that is not open on that adapter is answered like a bad signature.
type Receivers struct {
	maxBody  int64
	reg      *channels.Registry
	adapters *adapter.Registry
	inbox    func(channel string) adapter.Inbox
	received *prometheus.CounterVec
	logger   *slog.Logger
}

// NewReceivers returns the route. maxBody bounds a request body (XIM_MAX_PACKET_BYTES).
func NewReceivers(maxBody int64, reg *channels.Registry, adapters *adapter.Registry, inbox func(channel string) adapter.Inbox, prom prometheus.Registerer, logger *slog.Logger) *Receivers {
	if maxBody <= 0 {
		maxBody = 1 << 20
	}
	rc := &Receivers{maxBody: maxBody, reg: reg, adapters: adapters, inbox: inbox, logger: logger,
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_target_messages_total", Help: "User messages posted by targets to the inbound route, by adapter and outcome (accepted, duplicate, or the error code).",
		}, []string{"adapter", "outcome"})}
	if prom != nil {
		prom.MustRegister(rc.received)
	}
	return rc
}

// ServeHTTP handles the route.
func (rc *Receivers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, id := r.PathValue("adapter"), r.PathValue("channel")
	a, ok := rc.adapters.Lookup(name)
	recv, receives := a.(adapter.Receiver)
	if !ok || !receives {
		WriteError(w, profile.Errorf(profile.CodeNotFound, "no route %s %s: adapter %q takes no posts", r.Method, r.URL.Path, name))
		return
	}
	outcome, err := rc.receive(w, r, recv, name, id)
	if err != nil {
		pe := profile.AsError(err)
		outcome = adapter.Received(pe.Code)
		if pe.Code == profile.CodeInternal || pe.Code == profile.CodeUnavailable {
			rc.logger.Error("target_message_failed", "adapter", name, "channel", id, "err", err)
		}
		WriteError(w, pe)
	}
	rc.received.WithLabelValues(name, string(outcome)).Inc()
}

func (rc *Receivers) receive(w http.ResponseWriter, r *http.Request, recv adapter.Receiver, name, id string) (adapter.Received, error) {
	if !profile.ValidChannelID(id) {
		return "", invalidID
	}
	ch, ok, err := rc.reg.Lookup(r.Context(), id)
	if err != nil {
		return "", profile.Errorf(profile.CodeUnavailable, "channel registry unavailable")
	}
	if !ok || ch.Target.Adapter != name {
		return "", recv.Refusal()
	}
	r.Body = http.MaxBytesReader(w, r.Body, rc.maxBody)
	return recv.Receive(w, r, ch, adapterInboxes{rc, name})
}

// adapterInboxes are the open channels of one adapter, for a Receiver.
type adapterInboxes struct {
	rc      *Receivers
	adapter string
}

func (a adapterInboxes) Channels() []adapter.Channel {
	var out []adapter.Channel
	for _, ch := range a.rc.reg.List() {
		if ch.Target.Adapter == a.adapter {
			out = append(out, ch)
		}
	}
	return out
}

func (a adapterInboxes) Inbox(channel string) adapter.Inbox { return a.rc.inbox(channel) }
