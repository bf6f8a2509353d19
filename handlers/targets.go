package handlers

import (
	"context"
	"fmt"
	"sync"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// ChannelSource looks channels up (the channel registry).
type ChannelSource interface {
	Lookup(ctx context.Context, id string) (adapter.Channel, bool, error)
}

// Bound is a channel's open adapter.
type Bound struct {
	Channel string
	Adapter string
	Target  adapter.Target
}

// Targets resolves a channel to its bound target, opening each binding once per channel revision.
type Targets struct {
	channels ChannelSource
	adapters *adapter.Registry

	mu    sync.Mutex
	cache map[string]cachedTarget
}

type cachedTarget struct {
	rev, botRev uint64
	bound       Bound
}

// NewTargets returns a resolver over the registry and adapters.
func NewTargets(ch ChannelSource, adapters *adapter.Registry) *Targets {
	return &Targets{channels: ch, adapters: adapters, cache: map[string]cachedTarget{}}
}

// Resolve returns the channel's target, or a *profile.Error channel_not_open.
func (t *Targets) Resolve(ctx context.Context, channel string) (Bound, error) {
	ch, ok, err := t.channels.Lookup(ctx, channel)
	if err != nil {
		return Bound{}, err
	}
	if !ok {
		return Bound{}, profile.Errorf(profile.CodeChannelNotOpen, "channel %s is not open", channel)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.cache[channel]; ok && c.rev == ch.Revision && c.botRev == ch.BotRevision {
		return c.bound, nil
	}
	a, ok := t.adapters.Lookup(ch.Target.Adapter)
	if !ok {
		return Bound{}, fmt.Errorf("channel %s: adapter %q not available in this worker", channel, ch.Target.Adapter)
	}
	tg, err := a.Open(ch.Target.Config)
	if err != nil {
		return Bound{}, fmt.Errorf("channel %s: open target: %w", channel, err)
	}
	b := Bound{Channel: channel, Adapter: a.Name(), Target: tg}
	t.cache[channel] = cachedTarget{rev: ch.Revision, botRev: ch.BotRevision, bound: b}
	return b, nil
}

// Forget drops a channel's cached target (channel closed).
func (t *Targets) Forget(channel string) {
	t.mu.Lock()
	delete(t.cache, channel)
	t.mu.Unlock()
}
