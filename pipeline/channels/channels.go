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
	"slices"
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
	// ids is every open channel's id in order as of the last reindex; added and removed hold the
	// ids opened and closed since (unsorted, maybe twice). A listing reindexes first when either
	// is non-empty: a few changes are inserted or removed in place, many are sorted and merged in
	// one pass; never a sort of every channel per request.
	ids     []string
	added   []string
	removed []string
	watch   jetstream.KeyWatcher
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
				r.mu.Lock()
				r.reindex()
				r.mu.Unlock()
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
		if !had {
			r.opened(id)
		}
	} else if had {
		delete(r.byID, id)
		r.closed(id)
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

// List returns every open channel (from memory), sorted by id.
func (r *Registry) List() []adapter.Channel {
	var out []adapter.Channel
	r.indexed(func(ids []string) {
		out = make([]adapter.Channel, len(ids))
		for i, id := range ids {
			out[i] = r.byID[id]
		}
	})
	return out
}

// Page returns, from memory and in id order, at most limit open channels whose ids sort after
// after ("": from the first), and next: the id of the page's last channel when more follow it, ""
// on the last page. after need not be open (a channel closed between two pages does not break the
// listing); limit must be positive. It costs a binary search plus the page, not the whole registry.
func (r *Registry) Page(after string, limit int) (page []adapter.Channel, next string) {
	r.indexed(func(ids []string) {
		start := 0
		if after != "" {
			i, found := slices.BinarySearch(ids, after)
			if found {
				i++
			}
			start = i
		}
		end := min(start+max(limit, 0), len(ids))
		page = make([]adapter.Channel, 0, end-start)
		for _, id := range ids[start:end] {
			page = append(page, r.byID[id])
		}
		if end < len(ids) && end > start {
			next = ids[end-1]
		}
	})
	return page, next
}

// indexed calls fn with the sorted ids of every open channel, under the lock (fn may read byID).
func (r *Registry) indexed(fn func(ids []string)) {
	r.mu.RLock()
	if len(r.added) == 0 && len(r.removed) == 0 {
		defer r.mu.RUnlock()
		fn(r.ids)
		return
	}
	r.mu.RUnlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reindex()
	fn(r.ids)
}

// opened and closed note a change of the set of open channels for the next reindex (r.mu held for
// writing). In a process that never lists, the changes are folded in once they outnumber the
// indexed ids (and 1024), so they stay bounded at an amortized O(1) a change.
func (r *Registry) opened(id string) {
	r.added = append(r.added, id)
	r.bound()
}

func (r *Registry) closed(id string) {
	r.removed = append(r.removed, id)
	r.bound()
}

func (r *Registry) bound() {
	if len(r.added)+len(r.removed) > max(len(r.ids), 1024) {
		r.reindex()
	}
}

// reindexInPlace is the number of changes up to which reindex edits ids in place (a binary search
// and a copy each) rather than merging.
const reindexInPlace = 64

// reindex folds the ids opened and closed since the last one into ids (r.mu held for writing).
func (r *Registry) reindex() {
	switch {
	case len(r.added) == 0 && len(r.removed) == 0:
		return
	case len(r.added)+len(r.removed) <= reindexInPlace:
		for _, id := range r.removed {
			if _, open := r.byID[id]; !open {
				if i, found := slices.BinarySearch(r.ids, id); found {
					r.ids = slices.Delete(r.ids, i, i+1)
				}
			}
		}
		for _, id := range r.added {
			if _, open := r.byID[id]; open {
				if i, found := slices.BinarySearch(r.ids, id); !found {
					r.ids = slices.Insert(r.ids, i, id)
				}
			}
		}
	default:
		r.ids = r.merged()
	}
	r.added, r.removed = nil, nil
}

// merged is ids with the added ids merged in, each once, and the ids no longer open left out.
func (r *Registry) merged() []string {
	slices.Sort(r.added)
	filter := len(r.removed) > 0
	out := make([]string, 0, len(r.ids)+len(r.added))
	i, j := 0, 0
	for i < len(r.ids) || j < len(r.added) {
		var id string
		switch {
		case j == len(r.added) || (i < len(r.ids) && r.ids[i] < r.added[j]):
			id, i = r.ids[i], i+1
		case i == len(r.ids) || r.added[j] < r.ids[i]:
			id, j = r.added[j], j+1
		default: // re-opened: in both
			id, i, j = r.ids[i], i+1, j+1
		}
		if n := len(out); n > 0 && out[n-1] == id {
			continue // opened twice since the last reindex
		}
		if _, open := r.byID[id]; filter && !open {
			continue
		}
		out = append(out, id)
	}
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
		if !ok {
			r.opened(ch.ID)
		}
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
	if _, had := r.byID[id]; had {
		delete(r.byID, id)
		r.closed(id)
	}
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
