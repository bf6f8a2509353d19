// Package bots is the bot registry and what a bot does with the conversations that reach it
// (edge-api §4.1): bots live in KV xim_bots (shared by every gateway and worker, mirrored into
// memory by a watcher), their pending pairing codes in KV xim_pairings (an hour each), and the
// Admitter applies a bot's policy to a platform message, opening the conversation's channel
// exactly once.
package bots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/subjects"
)

// Registry is the bot registry. Create it with Open and run it with Run.
type Registry struct {
	kv     jetstream.KeyValue
	stats  jetstream.KeyValue // each bot's refusal counts
	logger *slog.Logger
	watch  jetstream.KeyWatcher

	mu       sync.RWMutex
	byID     map[string]adapter.Bot
	watchers []func(id string)
}

// Open loads every bot and starts watching the bucket (provisioned by pipeline.Provision).
func Open(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) (*Registry, error) {
	kv, err := js.KeyValue(ctx, subjects.BucketBots)
	if err != nil {
		return nil, fmt.Errorf("bots: %w", err)
	}
	stats, err := js.KeyValue(ctx, subjects.BucketBotStats)
	if err != nil {
		return nil, fmt.Errorf("bots: %w", err)
	}
	w, err := kv.WatchAll(context.Background())
	if err != nil {
		return nil, fmt.Errorf("bots: watch: %w", err)
	}
	r := &Registry{kv: kv, stats: stats, logger: logger, byID: map[string]adapter.Bot{}, watch: w}
	for { // the initial values end with a nil entry
		select {
		case e := <-w.Updates():
			if e == nil {
				return r, nil
			}
			r.apply(e)
		case <-ctx.Done():
			_ = w.Stop()
			return nil, fmt.Errorf("bots: initial load: %w", ctx.Err())
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
				return errors.New("bots: watcher closed")
			}
			if e != nil {
				r.apply(e)
			}
		}
	}
}

// OnChange registers fn to be called (from the watcher, or the process that made the change)
// when a bot is put, changes or is deleted.
func (r *Registry) OnChange(fn func(id string)) {
	r.mu.Lock()
	r.watchers = append(r.watchers, fn)
	r.mu.Unlock()
}

func (r *Registry) apply(e jetstream.KeyValueEntry) {
	id := e.Key()
	r.mu.Lock()
	cur, had := r.byID[id]
	if had && cur.Revision >= e.Revision() {
		r.mu.Unlock()
		return
	}
	if e.Operation() == jetstream.KeyValuePut {
		var b adapter.Bot
		if err := json.Unmarshal(e.Value(), &b); err != nil {
			r.mu.Unlock()
			r.logger.Error("bot_record_unreadable", "bot", id, "err", err)
			return
		}
		b.Revision = e.Revision()
		r.byID[id] = b
	} else {
		delete(r.byID, id)
	}
	r.notify(id)
}

// notify calls the watchers (r.mu held; released here).
func (r *Registry) notify(id string) {
	watchers := slices.Clone(r.watchers)
	r.mu.Unlock()
	for _, fn := range watchers {
		fn(id)
	}
}

// Get returns a bot from memory.
func (r *Registry) Get(id string) (adapter.Bot, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	b, ok := r.byID[id]
	return b, ok
}

// Lookup returns a bot from memory, or, on a miss, from the bucket (a bot put a moment ago
// through another gateway may not have reached this watcher yet).
func (r *Registry) Lookup(ctx context.Context, id string) (adapter.Bot, bool, error) {
	if b, ok := r.Get(id); ok {
		return b, true, nil
	}
	if subjects.Token(id) != nil {
		return adapter.Bot{}, false, nil
	}
	e, err := r.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return adapter.Bot{}, false, nil
	}
	if err != nil {
		return adapter.Bot{}, false, fmt.Errorf("bots: get %s: %w", id, err)
	}
	r.apply(e)
	b, ok := r.Get(id)
	return b, ok, nil
}

// List returns every bot, sorted by id.
func (r *Registry) List() []adapter.Bot {
	r.mu.RLock()
	out := make([]adapter.Bot, 0, len(r.byID))
	for _, b := range r.byID {
		out = append(out, b)
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b adapter.Bot) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Page returns at most limit bots whose ids sort after after, in id order, and the id to list
// the next page after ("" on the last page).
func (r *Registry) Page(after string, limit int) (page []adapter.Bot, next string) {
	all := r.List()
	start, _ := slices.BinarySearchFunc(all, after, func(b adapter.Bot, id string) int { return strings.Compare(b.ID, id) })
	if start < len(all) && all[start].ID == after {
		start++
	}
	end := min(start+max(limit, 0), len(all))
	page = all[start:end]
	if end < len(all) && end > start {
		next = all[end-1].ID
	}
	return page, next
}

// Put stores a bot (a PUT): the same settings again change nothing; other settings replace the
// bot's, keeping the time it was first put.
func (r *Registry) Put(ctx context.Context, b adapter.Bot) (adapter.Bot, error) {
	if err := subjects.Token(b.ID); err != nil {
		return adapter.Bot{}, fmt.Errorf("bots: %w", err)
	}
	cur, ok, err := r.Lookup(ctx, b.ID)
	if err != nil {
		return adapter.Bot{}, err
	}
	if ok {
		b.OpenedAt = cur.OpenedAt
		if same(cur, b) {
			return cur, nil
		}
	}
	return r.store(ctx, b, cur.Revision, ok)
}

// store writes b: created when it was not there (exists false), else updated from revision rev.
func (r *Registry) store(ctx context.Context, b adapter.Bot, rev uint64, exists bool) (adapter.Bot, error) {
	raw, err := json.Marshal(b)
	if err != nil {
		return adapter.Bot{}, fmt.Errorf("bots: encode: %w", err)
	}
	if exists {
		rev, err = r.kv.Update(ctx, b.ID, raw, rev)
	} else {
		rev, err = r.kv.Create(ctx, b.ID, raw)
	}
	if err != nil {
		return adapter.Bot{}, fmt.Errorf("bots: put %s: %w", b.ID, err)
	}
	b.Revision = rev
	r.mu.Lock()
	if cur, ok := r.byID[b.ID]; ok && cur.Revision >= rev {
		r.mu.Unlock()
		return b, nil
	}
	r.byID[b.ID] = b
	r.notify(b.ID)
	return b, nil
}

// Allow adds user to a bot's allow_users (a pairing approved); it changes nothing when the user
// is there already. A bot gone meanwhile is ErrNoBot.
func (r *Registry) Allow(ctx context.Context, id, user string) (adapter.Bot, error) {
	for range 10 {
		e, err := r.kv.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return adapter.Bot{}, ErrNoBot
		}
		if err != nil {
			return adapter.Bot{}, fmt.Errorf("bots: get %s: %w", id, err)
		}
		var b adapter.Bot
		if err := json.Unmarshal(e.Value(), &b); err != nil {
			return adapter.Bot{}, fmt.Errorf("bots: record %s unreadable: %w", id, err)
		}
		b.Revision = e.Revision()
		if slices.Contains(b.Conversations.AllowUsers, user) {
			return b, nil
		}
		b.Conversations.AllowUsers = append(b.Conversations.AllowUsers, user)
		b, err = r.store(ctx, b, e.Revision(), true)
		if errors.Is(err, jetstream.ErrKeyExists) {
			continue // changed meanwhile: read again
		}
		return b, err
	}
	return adapter.Bot{}, fmt.Errorf("bots: %s changes too often to add a user", id)
}

// ErrNoBot: the bot is not (or no longer) there.
var ErrNoBot = errors.New("bots: no such bot")

// Delete removes a bot and its stats; it reports whether it was there.
func (r *Registry) Delete(ctx context.Context, id string) (bool, error) {
	_, ok, err := r.Lookup(ctx, id)
	if err != nil || !ok {
		return false, err
	}
	if err := r.kv.Purge(ctx, id); err != nil {
		return false, fmt.Errorf("bots: delete %s: %w", id, err)
	}
	if err := r.stats.Purge(ctx, id); err != nil {
		r.logger.Warn("bot_stats_purge_failed", "bot", id, "err", err)
	}
	r.mu.Lock()
	if _, had := r.byID[id]; !had {
		r.mu.Unlock()
		return true, nil
	}
	delete(r.byID, id)
	r.notify(id)
	return true, nil
}

func same(a, b adapter.Bot) bool {
	type settings struct {
		C adapter.Connection
		T adapter.Binding
		P adapter.Policy
	}
	ja, _ := json.Marshal(settings{a.Connection, a.Target, a.Conversations})
	jb, _ := json.Marshal(settings{b.Connection, b.Target, b.Conversations})
	return string(ja) == string(jb)
}

// Stats are a bot's refusal counts by reason, every process's (flushed every StatsInterval).
func (r *Registry) Stats(ctx context.Context, id string) (map[adapter.Refusal]uint64, error) {
	out := map[adapter.Refusal]uint64{}
	if err := subjects.Token(id); err != nil {
		return out, err
	}
	e, err := r.stats.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	return out, json.Unmarshal(e.Value(), &out)
}

// StatsInterval is how often a process adds the refusals it counted to the bots' stats.
const StatsInterval = 2 * time.Second

// addStats adds counts to a bot's stats record (compare-and-set).
func (r *Registry) addStats(ctx context.Context, id string, counts map[adapter.Refusal]uint64) error {
	if err := subjects.Token(id); err != nil {
		return err
	}
	key := id
	for range 10 {
		sum := map[adapter.Refusal]uint64{}
		var rev uint64
		e, err := r.stats.Get(ctx, key)
		switch {
		case err == nil:
			rev = e.Revision()
			_ = json.Unmarshal(e.Value(), &sum)
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return err
		}
		for k, n := range counts {
			sum[k] += n
		}
		raw, _ := json.Marshal(sum)
		if rev == 0 {
			_, err = r.stats.Create(ctx, key, raw)
		} else {
			_, err = r.stats.Update(ctx, key, raw, rev)
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
	}
	return errors.New("bots: stats contended")
}
