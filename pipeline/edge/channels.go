package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/ximd/ximd/handlers"
	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/pipeline/channels"
	"github.com/ximd/ximd/profile"
)

// Stats are a channel's counters in GET /v1/channels/{id}.
type Stats struct {
	PendingOutbound  int    `json:"pending_outbound"`
	OpenDeltaBuffers int    `json:"open_delta_buffers"`
	CompletedIDs     uint64 `json:"completed_ids"`
}

// Failure is one recent terminal failure of a channel (a user message xAgent refused for good,
// or that expired).
type Failure = handlers.Failure

// ChannelState supplies the live parts of a channel's representation and purges its state.
type ChannelState interface {
	Stats(ctx context.Context, channel string) (Stats, error)
	Failures(ctx context.Context, channel string) ([]Failure, error)
	// Purge removes every piece of the channel's temporary state (P-STATE-7).
	Purge(ctx context.Context, channel string) error
}

// ChannelsAPI serves /v1/channels (edge-api §4).
type ChannelsAPI struct {
	reg      *channels.Registry
	adapters *adapter.Registry
	state    ChannelState
	logger   *slog.Logger
}

// NewChannelsAPI returns the channels API.
func NewChannelsAPI(reg *channels.Registry, adapters *adapter.Registry, state ChannelState, logger *slog.Logger) *ChannelsAPI {
	return &ChannelsAPI{reg: reg, adapters: adapters, state: state, logger: logger}
}

// invalidID is the answer to a channel id in a URL that cannot be one (edge-api §4).
var invalidID = profile.Errorf(profile.CodeInvalidChannelID, "connector_channel_id must match ^[A-Za-z0-9_-]{1,128}$")

func (a *ChannelsAPI) register(mux *http.ServeMux, auth func(http.Handler) http.Handler) {
	mux.Handle("GET /v1/channels", auth(http.HandlerFunc(a.list)))
	mux.Handle("PUT /v1/channels/{id}", auth(http.HandlerFunc(a.put)))
	mux.Handle("GET /v1/channels/{id}", auth(http.HandlerFunc(a.get)))
	mux.Handle("DELETE /v1/channels/{id}", auth(http.HandlerFunc(a.delete)))
}

type descriptor struct {
	Connection *adapter.Connection `json:"connection"`
	Target     *adapter.Binding    `json:"target"`
}

type channelView struct {
	ID         string             `json:"connector_channel_id"`
	Status     string             `json:"status"`
	Connection adapter.Connection `json:"connection"`
	Target     targetView         `json:"target"`
	// Bot and Conversation: a channel a bot opened (edge-api §4.1).
	Bot          string                `json:"bot,omitempty"`
	Conversation *adapter.Conversation `json:"conversation,omitempty"`
	Stats        *Stats                `json:"stats,omitempty"`
	Failures     *[]Failure            `json:"failures,omitempty"`
}

type targetView struct {
	Adapter      string               `json:"adapter"`
	Capabilities adapter.Capabilities `json:"capabilities"`
	Config       json.RawMessage      `json:"config,omitempty"`
}

func (a *ChannelsAPI) put(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !profile.ValidChannelID(id) {
		WriteError(w, invalidID)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		WriteError(w, profile.Errorf(profile.CodeInvalidDescriptor, "body: %v", err))
		return
	}
	var d descriptor
	if err := decodeStrict(body, &d); err != nil {
		WriteError(w, err)
		return
	}
	ad, perr := a.checkDescriptor(d)
	if perr != nil {
		WriteError(w, perr)
		return
	}
	if _, err := ad.Open(d.Target.Config); err != nil {
		WriteError(w, asDescriptorError(err))
		return
	}
	if p, ok := ad.(adapter.Prober); ok {
		pctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
		err := p.Probe(pctx, adapter.Channel{ID: id, Connection: *d.Connection, Target: *d.Target})
		cancel()
		if err != nil {
			var pe *profile.Error
			if !errors.As(err, &pe) || pe.Code != profile.CodeTargetConfigInvalid {
				pe = profile.Errorf(profile.CodeTargetConfigInvalid, "%v", err)
			}
			a.logger.Info("channel_config_refused", "channel", id, "adapter", d.Target.Adapter, "err", pe.Message)
			WriteError(w, pe)
			return
		}
	}
	ch, err := a.reg.Put(r.Context(), adapter.Channel{ID: id, Connection: *d.Connection, Target: *d.Target, OpenedAt: time.Now().UnixMilli()})
	if err != nil {
		a.logger.Error("channel_put_failed", "channel", id, "err", err)
		WriteError(w, profile.Errorf(profile.CodeUnavailable, "channel could not be stored"))
		return
	}
	a.logger.Info("channel_opened", "channel", id, "adapter", ch.Target.Adapter)
	v, err := a.view(ch)
	if err != nil {
		WriteError(w, asDescriptorError(err))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// decodeStrict decodes a request body into v: one JSON object with no unknown field.
func decodeStrict(body []byte, v any) *profile.Error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return profile.Errorf(profile.CodeInvalidDescriptor, "body: %v", err)
	}
	if dec.More() {
		return profile.Errorf(profile.CodeInvalidDescriptor, "body: trailing data")
	}
	return nil
}

// checkDescriptor checks a channel's or a bot's connection and target (not yet its config) and
// returns its adapter; an empty config becomes {}.
func (a *ChannelsAPI) checkDescriptor(d descriptor) (adapter.Opener, *profile.Error) {
	switch {
	case d.Connection == nil || d.Target == nil:
		return nil, profile.Errorf(profile.CodeInvalidDescriptor, "connection and target are required")
	case d.Connection.TargetType == "":
		return nil, profile.Errorf(profile.CodeInvalidDescriptor, "connection.target_type is required")
	case d.Target.Adapter == "":
		return nil, profile.Errorf(profile.CodeInvalidDescriptor, "target.adapter is required")
	case d.Connection.TargetType != "im":
		return nil, profile.Errorf(profile.CodeTargetTypeNotSupported, "connection.target_type %q: only \"im\" is supported", d.Connection.TargetType)
	case len(d.Connection.Profiles) == 0:
		return nil, profile.Errorf(profile.CodeInvalidDescriptor, "connection.profiles must not be empty")
	}
	for _, p := range d.Connection.Profiles {
		if !slices.Contains(cardProfiles(), p) {
			return nil, profile.Errorf(profile.CodeProfileNotSupported, "connection.profiles: %q is not in the Card", p)
		}
	}
	ad, ok := a.adapters.Lookup(d.Target.Adapter)
	if !ok {
		return nil, profile.Errorf(profile.CodeUnknownAdapter, "target.adapter %q: known adapters are %v", d.Target.Adapter, a.adapters.Names())
	}
	if len(d.Target.Config) == 0 {
		d.Target.Config = json.RawMessage("{}")
	}
	return ad, nil
}

// probeTimeout bounds an adapter's check of a config against its platform at PUT.
const probeTimeout = 10 * time.Second

func (a *ChannelsAPI) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !profile.ValidChannelID(id) {
		WriteError(w, invalidID)
		return
	}
	ch, ok, err := a.reg.Lookup(r.Context(), id)
	if err != nil {
		WriteError(w, profile.Errorf(profile.CodeUnavailable, "channel registry unavailable"))
		return
	}
	if !ok {
		WriteError(w, profile.Errorf(profile.CodeChannelNotOpen, "channel %s is not open", id))
		return
	}
	v, err := a.view(ch)
	if err != nil {
		WriteError(w, asDescriptorError(err))
		return
	}
	st, err := a.state.Stats(r.Context(), id)
	if err != nil {
		a.logger.Warn("channel_stats_failed", "channel", id, "err", err)
	}
	fs, err := a.state.Failures(r.Context(), id)
	if err != nil {
		a.logger.Warn("channel_failures_failed", "channel", id, "err", err)
	}
	if fs == nil {
		fs = []Failure{}
	}
	v.Stats, v.Failures = &st, &fs
	writeJSON(w, http.StatusOK, v)
}

// GET /v1/channels answers a page of channels (edge-api §4.1): ?limit= of them, DefaultListLimit
// when absent, at most MaxListLimit.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// pageOf reads a listing's ?limit= (DefaultListLimit when absent; a whole number from 1 to
// MaxListLimit, else 400 bad_request) and ?after= (an id valid says is one, else badAfter). A
// parameter given empty counts as given.
func pageOf(r *http.Request, valid func(string) bool, badAfter *profile.Error) (limit int, after string, _ *profile.Error) {
	q := r.URL.Query()
	limit = DefaultListLimit
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > MaxListLimit {
			return 0, "", profile.Errorf(profile.CodeBadRequest, "limit must be a whole number from 1 to %d", MaxListLimit)
		}
		limit = n
	}
	after = q.Get("after")
	if q.Has("after") && !valid(after) {
		return 0, "", badAfter
	}
	return limit, after, nil
}

// channelList is the body of GET /v1/channels. Next is the id to pass as ?after= for the following
// page; null on the last one.
type channelList struct {
	Channels []channelView `json:"channels"`
	Next     *string       `json:"next"`
}

// list answers one page of channels in id order: those after ?after= (a channel id; it need not
// be open any more), at most ?limit=. A limit that is not a whole number from 1 to MaxListLimit
// is 400 bad_request; an after that cannot be a channel id is 400 invalid_channel_id. A parameter
// given empty counts as given.
func (a *ChannelsAPI) list(w http.ResponseWriter, r *http.Request) {
	limit, after, perr := pageOf(r, profile.ValidChannelID,
		profile.Errorf(profile.CodeInvalidChannelID, "after must be a connector_channel_id (^[A-Za-z0-9_-]{1,128}$)"))
	if perr != nil {
		WriteError(w, perr)
		return
	}
	page, next := a.reg.Page(after, limit)
	out := channelList{Channels: make([]channelView, 0, len(page))}
	for _, ch := range page {
		v, err := a.view(ch)
		if err != nil {
			continue // its adapter is gone from this build: not listed, next still follows it
		}
		out.Channels = append(out.Channels, v)
	}
	if next != "" {
		out.Next = &next
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *ChannelsAPI) delete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !profile.ValidChannelID(id) {
		WriteError(w, invalidID)
		return
	}
	ok, err := a.reg.Delete(r.Context(), id)
	if err != nil {
		WriteError(w, profile.Errorf(profile.CodeUnavailable, "channel registry unavailable"))
		return
	}
	if !ok {
		WriteError(w, profile.Errorf(profile.CodeChannelNotOpen, "channel %s is not open", id))
		return
	}
	if err := a.state.Purge(r.Context(), id); err != nil {
		a.logger.Error("channel_purge_failed", "channel", id, "err", err)
	}
	a.logger.Info("channel_deleted", "channel", id)
	w.WriteHeader(http.StatusNoContent)
}

// view is the API representation: never a secret (edge-api §2).
func (a *ChannelsAPI) view(ch adapter.Channel) (channelView, error) {
	ad, ok := a.adapters.Lookup(ch.Target.Adapter)
	if !ok {
		return channelView{}, profile.Errorf(profile.CodeUnknownAdapter, "adapter %q not available", ch.Target.Adapter)
	}
	t, err := ad.Open(ch.Target.Config)
	if err != nil {
		return channelView{}, err
	}
	pub, err := ad.Public(ch.Target.Config)
	if err != nil {
		return channelView{}, err
	}
	return channelView{ID: ch.ID, Status: "open", Connection: ch.Connection, Bot: ch.Bot, Conversation: ch.Conversation,
		Target: targetView{Adapter: ch.Target.Adapter, Capabilities: t.Capabilities(), Config: pub}}, nil
}

func asDescriptorError(err error) *profile.Error {
	var pe *profile.Error
	if errors.As(err, &pe) {
		return pe
	}
	return profile.Errorf(profile.CodeInvalidDescriptor, "target.config: %v", err)
}
