// Package channels is the channel registry: open channels and their target bindings live in the
// JetStream KV bucket xim_channels (so they survive restarts and are shared by every gateway and
// worker), mirrored into memory by a watcher for the per-packet "is it open" check.
package channels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/subjects"
)

// Registry is the channel registry. Create it with Open and run it with Run.
type Registry struct {
	kv     jetstream.KeyValue
	logger *slog.Logger

	mu       sync.RWMutex
	byID     map[string]adapter.Channel
	watchers []func(id string, open bool)
	watch    jetstream.KeyWatcher
}

// Open loads every channel and starts watching the bucket (provisioned by pipeline.Provision).
func Open(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) (*Registry, error) {
	kv, err := js.KeyValue(ctx, subjects.BucketChannels)
	if err != nil {
		return nil, fmt.Errorf("channels: %w", err)
	}
	w, err := kv.WatchAll(context.Background())
	if err != nil {
		return nil, fmt.Errorf("channels: watch: %w", err)
	}
	r := &Registry{kv: kv, logger: logger, byID: map[string]adapter.Channel{}, watch: w}
	// The initial values end with a nil entry.
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				return r, nil
			}
			r.apply(e)
		case <-ctx.Done():
			_ = w.Stop()
			return nil, fmt.Errorf("channels: initial load: %w", ctx.Err())
		}
	}
}

// Run applies changes from other processes until ctx ends.
func (r *Registry) Run(ctx context.Context) error {
	defer r.watch.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-r.watch.Updates():
			if !ok {
				return errors.New("channels: watcher closed")
			}
			if e != nil {
				r.apply(e)
			}
		}
	}
}

// OnChange registers fn to be called (from the watcher) when a channel opens, changes or closes.
func (r *Registry) OnChange(fn func(id string, open bool)) {
	r.mu.Lock()
	r.watchers = append(r.watchers, fn)
	r.mu.Unlock()
}

func (r *Registry) apply(e jetstream.KeyValueEntry) {
	id := e.Key()
	open := e.Operation() == jetstream.KeyValuePut
	r.mu.Lock()
	cur, had := r.byID[id]
	if had && cur.Revision >= e.Revision() {
		r.mu.Unlock()
		return
	}
	if open {
		var ch adapter.Channel
		if err := json.Unmarshal(e.Value(), &ch); err != nil {
			r.mu.Unlock()
			r.logger.Error("channel_record_unreadable", "channel", id, "err", err)
			return
		}
		ch.Revision = e.Revision()
		r.byID[id] = ch
	} else {
		delete(r.byID, id)
	}
	watchers := append([]func(string, bool){}, r.watchers...)
	r.mu.Unlock()
	for _, fn := range watchers {
		fn(id, open)
	}
}

// Get returns an open channel from memory.
func (r *Registry) Get(id string) (adapter.Channel, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ch, ok := r.byID[id]
	return ch, ok
}

// IsOpen reports whether id is open (from memory).
func (r *Registry) IsOpen(id string) bool {
	_, ok := r.Get(id)
	return ok
}

// Lookup returns the channel from memory, or, on a miss, from the bucket itself (a channel opened
// a moment ago through another gateway may not have reached this watcher yet).
func (r *Registry) Lookup(ctx context.Context, id string) (adapter.Channel, bool, error) {
	if ch, ok := r.Get(id); ok {
		return ch, true, nil
	}
	if subjects.Token(id) != nil {
		return adapter.Channel{}, false, nil
	}
	e, err := r.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return adapter.Channel{}, false, nil
	}
	if err != nil {
		return adapter.Channel{}, false, fmt.Errorf("channels: get %s: %w", id, err)
	}
	r.apply(e)
	ch, ok := r.Get(id)
	return ch, ok, nil
}

// List returns every open channel, sorted by id.
func (r *Registry) List() []adapter.Channel {
	r.mu.RLock()
	out := make([]adapter.Channel, 0, len(r.byID))
	for _, ch := range r.byID {
		out = append(out, ch)
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Put opens or re-opens a channel. It returns the stored record (with its revision) and whether
// anything changed: the same PUT twice is a no-op.
func (r *Registry) Put(ctx context.Context, ch adapter.Channel) (adapter.Channel, error) {
	if err := subjects.Token(ch.ID); err != nil {
		return adapter.Channel{}, fmt.Errorf("channels: %w", err)
	}
	if cur, ok, err := r.Lookup(ctx, ch.ID); err != nil {
		return adapter.Channel{}, err
	} else if ok && same(cur, ch) {
		return cur, nil
	} else if ok {
		ch.OpenedAt = cur.OpenedAt
	}
	b, err := json.Marshal(ch)
	if err != nil {
		return adapter.Channel{}, fmt.Errorf("channels: encode: %w", err)
	}
	rev, err := r.kv.Put(ctx, ch.ID, b)
	if err != nil {
		return adapter.Channel{}, fmt.Errorf("channels: put %s: %w", ch.ID, err)
	}
	ch.Revision = rev
	r.mu.Lock()
	if cur, ok := r.byID[ch.ID]; !ok || cur.Revision < rev {
		r.byID[ch.ID] = ch
	}
	r.mu.Unlock()
	return ch, nil
}

// Delete closes a channel for good; it reports whether it was open.
func (r *Registry) Delete(ctx context.Context, id string) (bool, error) {
	_, ok, err := r.Lookup(ctx, id)
	if err != nil || !ok {
		return false, err
	}
	if err := r.kv.Purge(ctx, id); err != nil {
		return false, fmt.Errorf("channels: delete %s: %w", id, err)
	}
	r.mu.Lock()
	delete(r.byID, id)
	watchers := append([]func(string, bool){}, r.watchers...)
	r.mu.Unlock()
	for _, fn := range watchers {
		fn(id, false)
	}
	return true, nil
}

func same(a, b adapter.Channel) bool {
	ja, _ := json.Marshal(struct {
		C adapter.Connection
		T adapter.Binding
	}{a.Connection, a.Target})
	jb, _ := json.Marshal(struct {
		C adapter.Connection
		T adapter.Binding
	}{b.Connection, b.Target})
	return string(ja) == string(jb)
}
