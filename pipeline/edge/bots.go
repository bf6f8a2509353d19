package edge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/pipeline/bots"
	"github.com/ximd/ximd/profile"
)

// BotsAPI serves /v1/bots (edge-api §4.1): bots, their pairings, and, through the channels API,
// their channels.
type BotsAPI struct {
	channels *ChannelsAPI
	bots     *bots.Registry
	pairings *bots.Pairings
	// purgePairings removes a deleted bot's pending codes.
	purgePairings func(ctx context.Context, bot string) error
}

// NewBotsAPI returns the bots API over the channels API (its registry, adapters and state).
func NewBotsAPI(ch *ChannelsAPI, reg *bots.Registry, pairings *bots.Pairings, purgePairings func(ctx context.Context, bot string) error) *BotsAPI {
	return &BotsAPI{channels: ch, bots: reg, pairings: pairings, purgePairings: purgePairings}
}

var botIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,48}$`)

var invalidBotID = profile.Errorf(profile.CodeInvalidBotID, "bot_id must match ^[A-Za-z0-9_-]{1,48}$")

func (a *BotsAPI) register(mux *http.ServeMux, auth func(http.Handler) http.Handler) {
	mux.Handle("GET /v1/bots", auth(http.HandlerFunc(a.list)))
	mux.Handle("PUT /v1/bots/{id}", auth(http.HandlerFunc(a.put)))
	mux.Handle("GET /v1/bots/{id}", auth(http.HandlerFunc(a.get)))
	mux.Handle("DELETE /v1/bots/{id}", auth(http.HandlerFunc(a.delete)))
	mux.Handle("GET /v1/bots/{id}/pairings", auth(http.HandlerFunc(a.listPairings)))
	mux.Handle("POST /v1/bots/{id}/pairings/{code}", auth(http.HandlerFunc(a.approve)))
}

// botBody is the body of PUT /v1/bots/{id}.
type botBody struct {
	Connection    *adapter.Connection `json:"connection"`
	Target        *adapter.Binding    `json:"target"`
	Conversations json.RawMessage     `json:"conversations"`
}

type botView struct {
	ID            string             `json:"bot_id"`
	Status        string             `json:"status"`
	Connection    adapter.Connection `json:"connection"`
	Target        targetView         `json:"target"`
	Conversations adapter.Policy     `json:"conversations"`
	Stats         *botStats          `json:"stats,omitempty"`
}

type botStats struct {
	Channels int                        `json:"channels"`
	Refused  map[adapter.Refusal]uint64 `json:"refused"`
}

func (a *BotsAPI) put(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !botIDPattern.MatchString(id) {
		WriteError(w, invalidBotID)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		WriteError(w, profile.Errorf(profile.CodeInvalidDescriptor, "body: %v", err))
		return
	}
	var d botBody
	if err := decodeStrict(body, &d); err != nil {
		WriteError(w, err)
		return
	}
	ad, perr := a.channels.checkDescriptor(descriptor{Connection: d.Connection, Target: d.Target})
	if perr != nil {
		WriteError(w, perr)
		return
	}
	b, perr := a.check(r.Context(), id, ad, d)
	if perr != nil {
		a.channels.logger.Info("bot_config_refused", "bot", id, "adapter", d.Target.Adapter, "err", perr.Message)
		WriteError(w, perr)
		return
	}
	b, err = a.bots.Put(r.Context(), b)
	if err != nil {
		a.channels.logger.Error("bot_put_failed", "bot", id, "err", err)
		WriteError(w, profile.Errorf(profile.CodeUnavailable, "bot could not be stored"))
		return
	}
	a.channels.logger.Info("bot_put", "bot", id, "adapter", b.Target.Adapter)
	v, err := a.view(b)
	if err != nil {
		WriteError(w, asDescriptorError(err))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// check validates a bot's PUT body: its adapter takes bots, its config names no conversation and
// opens as a channel's would, its policy parses, and its account answers the adapter's probe.
func (a *BotsAPI) check(ctx context.Context, id string, ad adapter.Opener, d botBody) (adapter.Bot, *profile.Error) {
	taker, ok := ad.(adapter.BotTaker)
	if !ok {
		return adapter.Bot{}, profile.Errorf(profile.CodeInvalidDescriptor, "target.adapter %q takes no bots", d.Target.Adapter)
	}
	if key := adapter.NamedConversationKey(d.Target.Config, taker.ConversationKeys()); key != "" {
		return adapter.Bot{}, profile.Errorf(profile.CodeInvalidDescriptor, "target.config.%s: a bot's config names no conversation (a bot serves every conversation of its account)", key)
	}
	bound, err := taker.Bind(d.Target.Config, adapter.Conversation{})
	if err == nil {
		_, err = ad.Open(bound)
	}
	if err != nil {
		return adapter.Bot{}, asDescriptorError(err)
	}
	policy, err := adapter.ParsePolicy(d.Conversations)
	if err != nil {
		return adapter.Bot{}, asDescriptorError(err)
	}
	if pc, ok := ad.(adapter.PolicyChecker); ok {
		if err := pc.CheckPolicy(policy); err != nil {
			return adapter.Bot{}, asDescriptorError(err)
		}
	}
	b := adapter.Bot{ID: id, Connection: *d.Connection, Target: *d.Target, Conversations: policy, OpenedAt: time.Now().UnixMilli()}
	if p, ok := ad.(adapter.BotProber); ok {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := p.ProbeBot(pctx, b)
		cancel()
		if err != nil {
			var pe *profile.Error
			if !errors.As(err, &pe) || pe.Code != profile.CodeTargetConfigInvalid {
				pe = profile.Errorf(profile.CodeTargetConfigInvalid, "%v", err)
			}
			return adapter.Bot{}, pe
		}
	}
	return b, nil
}

// view is a bot's representation: its public config without the placeholder conversation.
func (a *BotsAPI) view(b adapter.Bot) (botView, error) {
	ad, ok := a.channels.adapters.Lookup(b.Target.Adapter)
	taker, takes := ad.(adapter.BotTaker)
	if !ok || !takes {
		return botView{}, profile.Errorf(profile.CodeUnknownAdapter, "adapter %q not available", b.Target.Adapter)
	}
	bound, err := taker.Bind(b.Target.Config, adapter.Conversation{})
	if err != nil {
		return botView{}, err
	}
	t, err := ad.Open(bound)
	if err != nil {
		return botView{}, err
	}
	pub, err := ad.Public(bound)
	if err != nil {
		return botView{}, err
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(pub, &obj) == nil {
		for _, k := range taker.ConversationKeys() {
			delete(obj, k)
		}
		pub, _ = json.Marshal(obj)
	}
	return botView{ID: b.ID, Status: "open", Connection: b.Connection, Conversations: b.Conversations,
		Target: targetView{Adapter: b.Target.Adapter, Capabilities: t.Capabilities(), Config: pub}}, nil
}

// lookup answers 400 or 404 itself when the URL's bot is not there.
func (a *BotsAPI) lookup(w http.ResponseWriter, r *http.Request) (adapter.Bot, bool) {
	id := r.PathValue("id")
	if !botIDPattern.MatchString(id) {
		WriteError(w, invalidBotID)
		return adapter.Bot{}, false
	}
	b, ok, err := a.bots.Lookup(r.Context(), id)
	if err != nil {
		WriteError(w, profile.Errorf(profile.CodeUnavailable, "bot registry unavailable"))
		return adapter.Bot{}, false
	}
	if !ok {
		WriteError(w, profile.Errorf(profile.CodeBotNotFound, "bot %s does not exist", id))
		return adapter.Bot{}, false
	}
	return b, true
}

func (a *BotsAPI) get(w http.ResponseWriter, r *http.Request) {
	b, ok := a.lookup(w, r)
	if !ok {
		return
	}
	v, err := a.view(b)
	if err != nil {
		WriteError(w, asDescriptorError(err))
		return
	}
	refused, err := a.bots.Stats(r.Context(), b.ID)
	if err != nil {
		a.channels.logger.Warn("bot_stats_failed", "bot", b.ID, "err", err)
	}
	v.Stats = &botStats{Channels: a.channels.reg.BotChannelCount(b.ID), Refused: refused}
	writeJSON(w, http.StatusOK, v)
}

type botList struct {
	Bots []botView `json:"bots"`
	Next *string   `json:"next"`
}

func (a *BotsAPI) list(w http.ResponseWriter, r *http.Request) {
	limit, after, perr := pageOf(r, botIDPattern.MatchString, invalidBotID)
	if perr != nil {
		WriteError(w, perr)
		return
	}
	page, next := a.bots.Page(after, limit)
	out := botList{Bots: make([]botView, 0, len(page))}
	for _, b := range page {
		if v, err := a.view(b); err == nil {
			out.Bots = append(out.Bots, v)
		}
	}
	if next != "" {
		out.Next = &next
	}
	writeJSON(w, http.StatusOK, out)
}

// delete closes a bot and every channel it opened (each purged as DELETE /v1/channels/{id}
// purges), and forgets its pending codes. The client leaving stops none of it; a DELETE of a bot
// already gone whose channels are left (an earlier DELETE cut off by a crash) closes them.
func (a *BotsAPI) delete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !botIDPattern.MatchString(id) {
		WriteError(w, invalidBotID)
		return
	}
	ctx := context.WithoutCancel(r.Context())
	deleted, err := a.bots.Delete(ctx, id)
	if err != nil {
		WriteError(w, profile.Errorf(profile.CodeUnavailable, "bot registry unavailable"))
		return
	}
	left := a.channels.reg.BotChannels(id)
	if !deleted && len(left) == 0 {
		WriteError(w, profile.Errorf(profile.CodeBotNotFound, "bot %s does not exist", id))
		return
	}
	start := time.Now()
	closed := a.closeChannels(ctx, id, left)
	if a.purgePairings != nil {
		if err := a.purgePairings(ctx, id); err != nil {
			a.channels.logger.Warn("bot_pairings_purge_failed", "bot", id, "err", err)
		}
	}
	a.channels.logger.Info("bot_deleted", "bot", id, "channels", closed, "left_by_an_earlier_delete", !deleted, "took", time.Since(start))
	w.WriteHeader(http.StatusNoContent)
}

// closeChannels deletes and purges the channels ids of bot, closeWorkers at a time; it returns
// how many it deleted.
func (a *BotsAPI) closeChannels(ctx context.Context, bot string, ids []string) int {
	var closed atomic.Int64
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(closeWorkers, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				ok, err := a.channels.reg.Delete(ctx, id)
				if err != nil {
					a.channels.logger.Error("bot_channel_delete_failed", "bot", bot, "channel", id, "err", err)
					continue
				}
				if ok {
					closed.Add(1)
				}
				if err := a.channels.state.Purge(ctx, id); err != nil {
					a.channels.logger.Error("channel_purge_failed", "channel", id, "err", err)
				}
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	return int(closed.Load())
}

// closeWorkers is how many of a deleted bot's channels are closed at once.
const closeWorkers = 16

func (a *BotsAPI) listPairings(w http.ResponseWriter, r *http.Request) {
	b, ok := a.lookup(w, r)
	if !ok {
		return
	}
	list, err := a.pairings.List(r.Context(), b.ID)
	if err != nil {
		WriteError(w, profile.Errorf(profile.CodeUnavailable, "pairings unavailable"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"pairings": list})
}

// approve adds the person of a pending code to the bot's allow_users.
func (a *BotsAPI) approve(w http.ResponseWriter, r *http.Request) {
	b, ok := a.lookup(w, r)
	if !ok {
		return
	}
	code := r.PathValue("code")
	pr, err := a.pairings.Take(r.Context(), b.ID, code)
	if errors.Is(err, bots.ErrNoPairing) {
		WriteError(w, profile.Errorf(profile.CodePairingNotFound, "bot %s has no pending pairing code %q", b.ID, code))
		return
	}
	if err != nil {
		WriteError(w, profile.Errorf(profile.CodeUnavailable, "pairings unavailable"))
		return
	}
	if _, err := a.bots.Allow(r.Context(), b.ID, pr.User); errors.Is(err, bots.ErrNoBot) {
		WriteError(w, profile.Errorf(profile.CodeBotNotFound, "bot %s does not exist", b.ID))
		return
	} else if err != nil {
		WriteError(w, profile.Errorf(profile.CodeUnavailable, "bot registry unavailable"))
		return
	}
	if err := a.pairings.Done(r.Context(), b.ID, pr); err != nil {
		a.channels.logger.Warn("bot_pairing_cleanup_failed", "bot", b.ID, "err", err)
	}
	a.channels.logger.Info("bot_pairing_approved", "bot", b.ID)
	w.WriteHeader(http.StatusNoContent)
}
