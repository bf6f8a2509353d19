package edge

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/pipeline/channels"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// Receivers serves POST /v1/targets/{adapter}/{channel}/{path...} (edge-api §7.1, §7.2): the
// route by which a platform posts its users' messages, handed to the adapter (a
// adapter.Receiver) with the inboxes of the adapter's channels. No bearer token: the adapter checks the platform's
// signature; a channel that is not open on that adapter is answered like a bad signature.
type Receivers struct {
	maxBody  int64
	reg      *channels.Registry
	bots     BotSource
	adapters *adapter.Registry
	admit    adapter.Admitter
	inbox    func(channel string) adapter.Inbox
	received *prometheus.CounterVec
	logger   *slog.Logger
}

// BotSource is the bots the receive routes serve, and how their arrivals are admitted.
type BotSource interface {
	List() []adapter.Bot
	Lookup(ctx context.Context, id string) (adapter.Bot, bool, error)
}

// NewReceivers returns the route. maxBody bounds a request body (XIM_MAX_PACKET_BYTES).
func NewReceivers(maxBody int64, reg *channels.Registry, bots BotSource, admit adapter.Admitter, adapters *adapter.Registry, inbox func(channel string) adapter.Inbox, prom prometheus.Registerer, logger *slog.Logger) *Receivers {
	if maxBody <= 0 {
		maxBody = 1 << 20
	}
	rc := &Receivers{maxBody: maxBody, reg: reg, bots: bots, admit: admit, adapters: adapters, inbox: inbox, logger: logger,
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_target_messages_total", Help: "User messages posted by targets to the inbound route, by adapter and outcome (accepted, duplicate, or the error code).",
		}, []string{"adapter", "outcome"})}
	if prom != nil {
		prom.MustRegister(rc.received)
	}
	return rc
}

// ServeHTTP handles the route: POST /v1/targets/{adapter}/{channel}/{path...}, and
// POST /v1/targets/{adapter}/bots/{bot}/{path...} for an adapter.BotReceiver.
func (rc *Receivers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, id, bot := r.PathValue("adapter"), r.PathValue("channel"), r.PathValue("bot")
	a, ok := rc.adapters.Lookup(name)
	recv, receives := a.(adapter.Receiver)
	if !ok || !receives {
		WriteError(w, profile.Errorf(profile.CodeNotFound, "no route %s %s: adapter %q takes no posts", r.Method, r.URL.Path, name))
		return
	}
	var outcome adapter.Received
	var err error
	if r.PathValue("bot") != "" || id == "" {
		outcome, err = rc.receiveBot(w, r, a, recv, name, bot)
		id = bot
	} else {
		outcome, err = rc.receive(w, r, recv, name, id)
	}
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

func (rc *Receivers) receiveBot(w http.ResponseWriter, r *http.Request, a adapter.Opener, recv adapter.Receiver, name, id string) (adapter.Received, error) {
	br, takes := a.(adapter.BotReceiver)
	if !takes {
		return "", profile.Errorf(profile.CodeNotFound, "no route %s %s: adapter %q takes no bots' posts", r.Method, r.URL.Path, name)
	}
	if rc.bots == nil || subjects.Token(id) != nil {
		return "", recv.Refusal()
	}
	b, ok, err := rc.bots.Lookup(r.Context(), id)
	if err != nil {
		return "", profile.Errorf(profile.CodeUnavailable, "bot registry unavailable")
	}
	if !ok || b.Target.Adapter != name {
		return "", recv.Refusal()
	}
	r.Body = http.MaxBytesReader(w, r.Body, rc.maxBody)
	return br.ReceiveBot(w, r, b, adapterInboxes{rc, name})
}

// adapterInboxes are the open channels PUT on one adapter and its bots, for a Receiver.
type adapterInboxes struct {
	rc      *Receivers
	adapter string
}

func (a adapterInboxes) Channels() []adapter.Channel {
	var out []adapter.Channel
	for _, ch := range a.rc.reg.ListPut() {
		if ch.Target.Adapter == a.adapter {
			out = append(out, ch)
		}
	}
	return out
}

func (a adapterInboxes) Bots() []adapter.Bot {
	var out []adapter.Bot
	if a.rc.bots == nil {
		return nil
	}
	for _, b := range a.rc.bots.List() {
		if b.Target.Adapter == a.adapter {
			out = append(out, b)
		}
	}
	return out
}

func (a adapterInboxes) Admit(ctx context.Context, b adapter.Bot, in adapter.Arrival) (adapter.Admission, error) {
	if a.rc.admit == nil {
		return adapter.Admission{}, profile.Errorf(profile.CodeUnavailable, "bots are not served here")
	}
	return a.rc.admit.Admit(ctx, b, in)
}

func (a adapterInboxes) Inbox(channel string) adapter.Inbox { return a.rc.inbox(channel) }
