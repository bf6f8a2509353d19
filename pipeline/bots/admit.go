package bots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/pipeline/channels"
)

// AdmitterDeps are what an Admitter opens channels in and submits through.
type AdmitterDeps struct {
	Bots     *Registry
	Pairings *Pairings
	Channels *channels.Registry
	Adapters *adapter.Registry
	// Inbox is the inbox of a channel; opened, when not nil, is the payload of the channel.opened
	// packet every user message submitted through it is sent after (edge-api §4.1).
	Inbox func(channel string, opened json.RawMessage) adapter.Inbox
	// Rates is KV xim_bot_rates, where every process counts the conversations' messages of the
	// minute (nil: this process counts alone).
	Rates jetstream.KeyValue
	// Registerer takes the bots' metrics (nil: not registered).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Admitter applies bots' policies to what reaches them (adapter.Bots's Admit): it refuses
// (counted by reason, in ximd_bot_refused_total and, every StatsInterval, the bot's stats),
// answers a stranger under pairing with a code, holds a conversation to its bot's max_per_minute,
// and opens a conversation's channel exactly once. Run it with Run (it flushes the counts).
type Admitter struct {
	deps    AdmitterDeps
	refused *prometheus.CounterVec
	opened  *prometheus.CounterVec
	rate    *limiter

	mu     sync.Mutex
	counts map[string]map[adapter.Refusal]uint64 // not yet flushed, by bot
}

// NewAdmitter returns the admitter; it fills the channel registry's bot channels (SetFill).
func NewAdmitter(deps AdmitterDeps) (*Admitter, error) {
	a := &Admitter{deps: deps, rate: newLimiter(deps.Rates), counts: map[string]map[adapter.Refusal]uint64{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ximd_bot_refused_total",
			Help: "Platform messages a bot's policy did not pass on, by bot and reason (edge-api §4.1)."}, []string{"bot", "reason"}),
		opened: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ximd_bot_channels_opened_total",
			Help: "Channels bots opened for conversations that reached them, by bot."}, []string{"bot"}),
	}
	if deps.Registerer != nil {
		for _, c := range []prometheus.Collector{a.refused, a.opened} {
			if err := deps.Registerer.Register(c); err != nil {
				return nil, err
			}
		}
	}
	deps.Channels.SetFill(a.fill)
	return a, nil
}

// fill completes a bot's channel from its bot: connection, and target with the conversation
// bound. false when the bot is gone or its adapter takes no bots.
func (a *Admitter) fill(ch adapter.Channel) (adapter.Channel, bool) {
	b, ok := a.deps.Bots.Get(ch.Bot)
	if !ok {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if b, ok, _ = a.deps.Bots.Lookup(ctx, ch.Bot); !ok {
			return adapter.Channel{}, false
		}
	}
	cfg, err := a.bind(b, ch.Conversation)
	if err != nil {
		return adapter.Channel{}, false
	}
	ch.Connection = b.Connection
	ch.Target = adapter.Binding{Adapter: b.Target.Adapter, Config: cfg}
	ch.BotRevision = b.Revision
	return ch, true
}

// bind is the channel config of a conversation of b.
func (a *Admitter) bind(b adapter.Bot, c *adapter.Conversation) (json.RawMessage, error) {
	op, ok := a.deps.Adapters.Lookup(b.Target.Adapter)
	taker, takes := op.(adapter.BotTaker)
	if !ok || !takes {
		return nil, fmt.Errorf("bots: adapter %q takes no bots", b.Target.Adapter)
	}
	var conv adapter.Conversation
	if c != nil {
		conv = *c
	}
	return taker.Bind(b.Target.Config, conv)
}

// Admit implements adapter.Bots for every poll loop and receive route.
func (a *Admitter) Admit(ctx context.Context, b adapter.Bot, in adapter.Arrival) (adapter.Admission, error) {
	if cur, ok := a.deps.Bots.Get(b.ID); ok && cur.Revision > b.Revision {
		b = cur // the bot's policy as it is now (an approval, a PUT), whatever the caller read it as
	}
	d := b.Conversations.Decide(in)
	if d.Pair {
		if err := a.pair(ctx, b, in); err != nil {
			return adapter.Admission{}, err
		}
	}
	if d.Refused != "" {
		return a.refuse(b, d.Refused), nil
	}
	conv := in.Conversation
	id := conv.ChannelID(b.ID)
	if !a.rate.allow(ctx, id, b.Conversations.MaxPerMinute) {
		return a.refuse(b, adapter.RefusedRateLimited), nil
	}
	ch, created, err := a.deps.Channels.OpenOnce(ctx, adapter.Channel{ID: id, OpenedAt: time.Now().UnixMilli(), Bot: b.ID, Conversation: &conv})
	if err != nil {
		return adapter.Admission{}, err
	}
	if ch.Bot != b.ID {
		a.deps.Logger.Error("bot_channel_id_taken", "bot", b.ID, "channel", id)
		return a.refuse(b, adapter.RefusedNotAllowed), nil
	}
	if created {
		a.opened.WithLabelValues(b.ID).Inc()
		a.deps.Logger.Info("bot_channel_opened", "bot", b.ID, "channel", id, "kind", conv.Kind)
	}
	filled, ok := a.fill(ch)
	if !ok {
		return adapter.Admission{}, fmt.Errorf("bots: channel %s of bot %s cannot be bound", id, b.ID)
	}
	var opened json.RawMessage
	if !ch.Announced {
		if opened, err = a.openedPayload(b, filled); err != nil {
			return adapter.Admission{}, err
		}
	}
	return adapter.Admission{Channel: filled, Inbox: a.deps.Inbox(id, opened)}, nil
}

// openedPayload is the payload of a bot's channel's channel.opened packet: no platform id of a
// person or conversation (P-ID-2), a title at most.
func (a *Admitter) openedPayload(b adapter.Bot, ch adapter.Channel) (json.RawMessage, error) {
	op, _ := a.deps.Adapters.Lookup(ch.Target.Adapter)
	t, err := op.Open(ch.Target.Config)
	if err != nil {
		return nil, err
	}
	conv := struct {
		Kind  adapter.ConversationKind `json:"kind"`
		Title string                   `json:"title,omitempty"`
	}{ch.Conversation.Kind, ch.Conversation.Title}
	type target struct {
		Adapter      string               `json:"adapter"`
		Capabilities adapter.Capabilities `json:"capabilities"`
	}
	return json.Marshal(struct {
		BotID        string             `json:"bot_id"`
		Conversation any                `json:"conversation"`
		Connection   adapter.Connection `json:"connection"`
		Target       target             `json:"target"`
	}{b.ID, conv, ch.Connection, target{ch.Target.Adapter, t.Capabilities()}})
}

// pair issues a stranger's pairing code and, the first time, answers them with it from the bot
// itself. An answer that could not be sent withdraws the code (their next message asks again)
// and is the error.
func (a *Admitter) pair(ctx context.Context, b adapter.Bot, in adapter.Arrival) error {
	pr, created, err := a.deps.Pairings.Request(ctx, b.ID, in.Author.ID, in.Author.DisplayName)
	if errors.Is(err, ErrTooManyPairings) {
		a.deps.Logger.Warn("bot_pairings_full", "bot", b.ID, "pending", MaxPendingPairings)
		return nil
	}
	if err != nil || !created {
		return err
	}
	conv := in.Conversation
	cfg, err := a.bind(b, &conv)
	if err == nil {
		op, _ := a.deps.Adapters.Lookup(b.Target.Adapter)
		var t adapter.Target
		if t, err = op.Open(cfg); err == nil {
			_, err = t.Send(ctx, adapter.Message{Text: b.Conversations.PairingAnswer(pr.Code), Final: true, System: true,
				IdempotencyKey: b.ID + ":pairing:" + pr.Code})
		}
	}
	if err != nil {
		a.deps.Pairings.Withdraw(context.WithoutCancel(ctx), b.ID, pr)
		return fmt.Errorf("bots: pairing answer of %s: %w", b.ID, err)
	}
	a.deps.Logger.Info("bot_pairing_issued", "bot", b.ID, "expires_at", pr.ExpiresAt)
	return nil
}

func (a *Admitter) refuse(b adapter.Bot, why adapter.Refusal) adapter.Admission {
	a.refused.WithLabelValues(b.ID, string(why)).Inc()
	a.mu.Lock()
	m := a.counts[b.ID]
	if m == nil {
		m = map[adapter.Refusal]uint64{}
		a.counts[b.ID] = m
	}
	m[why]++
	a.mu.Unlock()
	return adapter.Admission{Refused: why}
}

// Run adds the refusals counted to the bots' stats every StatsInterval until ctx ends, then once
// more.
func (a *Admitter) Run(ctx context.Context) error {
	t := time.NewTicker(StatsInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			a.Flush(fctx)
			cancel()
			return nil
		case <-t.C:
			a.Flush(ctx)
		}
	}
}

// Flush adds the refusals counted since the last flush to the bots' stats; counts that could not
// be added are kept for the next.
func (a *Admitter) Flush(ctx context.Context) {
	a.mu.Lock()
	counts := a.counts
	a.counts = map[string]map[adapter.Refusal]uint64{}
	a.mu.Unlock()
	for bot, m := range counts {
		if _, ok := a.deps.Bots.Get(bot); !ok {
			continue // deleted
		}
		if err := a.deps.Bots.addStats(ctx, bot, m); err != nil {
			a.deps.Logger.Warn("bot_stats_flush_failed", "bot", bot, "err", err)
			a.mu.Lock()
			for k, n := range m {
				if a.counts[bot] == nil {
					a.counts[bot] = map[adapter.Refusal]uint64{}
				}
				a.counts[bot][k] += n
			}
			a.mu.Unlock()
		}
	}
}
