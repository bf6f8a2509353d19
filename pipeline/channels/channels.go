// Package channels is the channel registry: open channels and their target bindings live in the
// JetStream KV bucket xim_channels (so they survive restarts and are shared by every gateway and
// worker), mirrored into memory by a watcher for the per-packet "is it open" check. The channels
// bots open live in a bucket of their own, xim_bot_channels: their records hold a conversation,
// never a config or a secret, so the workers that open them (a polled bot) may write that bucket
// and still not the channels' configs.
package channels

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

// Registry is the channel registry. Create it with Open and run it with Run.
type Registry struct {
	kv     jetstream.KeyValue // channels PUT
	botKV  jetstream.KeyValue // channels bots opened
	logger *slog.Logger

	mu       sync.RWMutex
	byID     map[string]entry
	puts     map[string]struct{} // the ids of the channels PUT (ListPut reads these alone)
	perBot   map[string]int      // how many channels each bot opened
	bots     map[string]string   // each bot id once, shared by its channels' entries
	fill     func(adapter.Channel) (adapter.Channel, bool)
	watchers []func(id string, open bool)
	// ids is every open channel's id in order as of the last reindex; added and removed hold the
	// ids opened and closed since (unsorted, maybe twice). A listing reindexes first when either
	// is non-empty: a few changes are inserted or removed in place, many are sorted and merged in
	// one pass; never a sort of every channel per request.
	ids      []string
	added    []string
	removed  []string
	watch    jetstream.KeyWatcher
	botWatch jetstream.KeyWatcher
}

// Open loads every channel and starts watching both buckets (provisioned by pipeline.Provision).
func Open(ctx context.Context, js jetstream.JetStream, logger *slog.Logger) (*Registry, error) {
	kv, err := js.KeyValue(ctx, subjects.BucketChannels)
	if err != nil {
		return nil, fmt.Errorf("channels: %w", err)
	}
	botKV, err := js.KeyValue(ctx, subjects.BucketBotChannels)
	if err != nil {
		return nil, fmt.Errorf("channels: %w", err)
	}
	r := &Registry{kv: kv, botKV: botKV, logger: logger, byID: map[string]entry{}, puts: map[string]struct{}{}, perBot: map[string]int{}, bots: map[string]string{}}
	// Bots' channels first: a channel PUT with the same id then replaces one (it wins).
	if r.botWatch, err = r.load(ctx, botKV); err != nil {
		return nil, err
	}
	if r.watch, err = r.load(ctx, kv); err != nil {
		_ = r.botWatch.Stop()
		return nil, err
	}
	r.mu.Lock()
	r.reindex()
	r.mu.Unlock()
	return r, nil
}

// load watches kv and applies its initial values (they end with a nil entry).
func (r *Registry) load(ctx context.Context, kv jetstream.KeyValue) (jetstream.KeyWatcher, error) {
	w, err := kv.WatchAll(context.Background())
	if err != nil {
		return nil, fmt.Errorf("channels: watch: %w", err)
	}
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				return w, nil
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
	defer r.botWatch.Stop()
	for {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case e, ok = <-r.watch.Updates():
		case e, ok = <-r.botWatch.Updates():
		}
		if !ok {
			return errors.New("channels: watcher closed")
		}
		if e != nil {
			r.apply(e)
		}
	}
}

// OnChange registers fn to be called (from the watcher) when a channel opens, changes or closes.
func (r *Registry) OnChange(fn func(id string, open bool)) {
	r.mu.Lock()
	r.watchers = append(r.watchers, fn)
	r.mu.Unlock()
}

// apply applies a change of either bucket. A channel PUT wins over a bot's channel of the same
// id; revisions are compared within a bucket only.
func (r *Registry) apply(e jetstream.KeyValueEntry) {
	id := e.Key()
	fromBots := e.Bucket() == subjects.BucketBotChannels
	open := e.Operation() == jetstream.KeyValuePut
	r.mu.Lock()
	cur, had := r.byID[id]
	sameBucket := had && (cur.put == nil) == fromBots
	if (had && !sameBucket && fromBots) || (sameBucket && cur.revision() >= e.Revision()) {
		r.mu.Unlock() // a bot's record under a channel PUT, or an older record
		return
	}
	var back bool // a channel PUT deleted: a bot's channel of that id may be there
	if open {
		var ch adapter.Channel
		if err := json.Unmarshal(e.Value(), &ch); err != nil || (fromBots && (ch.Bot == "" || ch.Conversation == nil)) {
			r.mu.Unlock()
			r.logger.Error("channel_record_unreadable", "channel", id, "err", err)
			return
		}
		if !fromBots {
			ch.Bot, ch.Conversation = "", nil // a channel PUT is one whatever its record says
		}
		ch.Revision = e.Revision()
		r.keep(ch)
		r.changed(cur.channel(id), had, ch)
	} else if sameBucket {
		delete(r.byID, id)
		delete(r.puts, id)
		r.closed(cur.channel(id))
		back = !fromBots
	}
	watchers := append([]func(string, bool){}, r.watchers...)
	r.mu.Unlock()
	for _, fn := range watchers {
		fn(id, open)
	}
	if back {
		r.reload(id)
	}
}

// reload reads a bot's channel of id from its bucket again (a channel PUT of that id was deleted).
func (r *Registry) reload(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if e, err := r.botKV.Get(ctx, id); err == nil {
		r.apply(e)
	}
}

// SetFill sets how a bot's channel is completed when it is looked up: its bot's connection and
// target, with its conversation bound (a bot's channel stores neither, so an idle one costs little
// memory and a bot's new settings reach all its channels at once). fill reports false when the
// bot is gone: the channel is then not open. Set it before the registry is used.
func (r *Registry) SetFill(fill func(adapter.Channel) (adapter.Channel, bool)) {
	r.mu.Lock()
	r.fill = fill
	r.mu.Unlock()
}

// Get returns an open channel from memory.
func (r *Registry) Get(id string) (adapter.Channel, bool) {
	r.mu.RLock()
	ch, ok := r.raw(id)
	fill := r.fill
	r.mu.RUnlock()
	if !ok {
		return ch, false
	}
	return r.filled(ch, fill)
}

// filled is ch completed by fill when it is a bot's channel.
func (r *Registry) filled(ch adapter.Channel, fill func(adapter.Channel) (adapter.Channel, bool)) (adapter.Channel, bool) {
	if ch.Bot == "" {
		return ch, true
	}
	if fill == nil {
		return adapter.Channel{}, false
	}
	return fill(ch)
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
	for _, kv := range []jetstream.KeyValue{r.kv, r.botKV} {
		e, err := kv.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return adapter.Channel{}, false, fmt.Errorf("channels: get %s: %w", id, err)
		}
		r.apply(e)
		break
	}
	ch, ok := r.Get(id)
	return ch, ok, nil
}

// List returns every open channel (from memory), sorted by id.
func (r *Registry) List() []adapter.Channel {
	var raw []adapter.Channel
	var fill func(adapter.Channel) (adapter.Channel, bool)
	r.indexed(func(ids []string) {
		raw, fill = make([]adapter.Channel, 0, len(ids)), r.fill
		for _, id := range ids {
			raw = append(raw, r.byID[id].channel(id))
		}
	})
	return r.fillAll(raw, fill)
}

// fillAll completes the bot's channels of raw (outside the lock: a fill may read the bot's
// bucket), leaving out those whose bot is gone.
func (r *Registry) fillAll(raw []adapter.Channel, fill func(adapter.Channel) (adapter.Channel, bool)) []adapter.Channel {
	out := raw[:0]
	for _, ch := range raw {
		if ch, ok := r.filled(ch, fill); ok {
			out = append(out, ch)
		}
	}
	return out
}

// ListPut returns every open channel that was PUT (not opened by a bot), from memory.
func (r *Registry) ListPut() []adapter.Channel {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]adapter.Channel, 0, len(r.puts))
	for id := range r.puts {
		out = append(out, *r.byID[id].put)
	}
	slices.SortFunc(out, func(a, b adapter.Channel) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// BotChannels returns the ids of every open channel bot opened.
func (r *Registry) BotChannels(bot string) []string {
	var out []string
	r.indexed(func(ids []string) {
		start, _ := slices.BinarySearch(ids, bot+"-")
		for _, id := range ids[start:] {
			if !strings.HasPrefix(id, bot+"-") {
				break
			}
			if r.byID[id].bot == bot {
				out = append(out, id)
			}
		}
	})
	return out
}

// BotChannelCount is how many open channels bot opened.
func (r *Registry) BotChannelCount(bot string) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.perBot[bot]
}

// Page returns, from memory and in id order, at most limit open channels whose ids sort after
// after ("": from the first), and next: the id of the page's last channel when more follow it, ""
// on the last page. after need not be open (a channel closed between two pages does not break the
// listing); limit must be positive. It costs a binary search plus the page, not the whole registry.
func (r *Registry) Page(after string, limit int) (page []adapter.Channel, next string) {
	var fill func(adapter.Channel) (adapter.Channel, bool)
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
		page, fill = make([]adapter.Channel, 0, end-start), r.fill
		for _, id := range ids[start:end] {
			page = append(page, r.byID[id].channel(id))
		}
		if end < len(ids) && end > start {
			next = ids[end-1]
		}
	})
	return r.fillAll(page, fill), next
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
func (r *Registry) opened(ch adapter.Channel) {
	r.perBot[ch.Bot]++
	r.added = append(r.added, ch.ID)
	r.bound()
}

func (r *Registry) closed(ch adapter.Channel) {
	if r.perBot[ch.Bot]--; r.perBot[ch.Bot] <= 0 {
		delete(r.perBot, ch.Bot)
	}
	r.removed = append(r.removed, ch.ID)
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
	r.remember(ch)
	return ch, nil
}

// remember puts a record this process stored into memory, unless the watcher has a newer one.
func (r *Registry) remember(ch adapter.Channel) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur, ok := r.byID[ch.ID]
	fromBots := ch.Bot != ""
	switch {
	case !ok, (cur.put == nil) != fromBots && !fromBots: // new, or a channel PUT over a bot's
	case (cur.put == nil) != fromBots: // a bot's under a channel PUT: the PUT wins
		return
	case cur.revision() >= ch.Revision:
		return
	}
	r.keep(ch)
	r.changed(cur.channel(ch.ID), ok, ch)
}

// changed notes that ch replaced cur (had: there was one) in byID (r.mu held for writing).
func (r *Registry) changed(cur adapter.Channel, had bool, ch adapter.Channel) {
	switch {
	case !had:
		r.opened(ch)
	case cur.Bot != ch.Bot: // a bot's channel PUT: it is the PUT's now
		if r.perBot[cur.Bot]--; r.perBot[cur.Bot] <= 0 {
			delete(r.perBot, cur.Bot)
		}
		r.perBot[ch.Bot]++
	}
}

// OpenOnce opens a bot's channel for a conversation unless it is open: created is true for the
// one call, of every process, that opened it (a KV create); the others get the channel as it is
// (filled, see SetFill).
func (r *Registry) OpenOnce(ctx context.Context, ch adapter.Channel) (adapter.Channel, bool, error) {
	if err := subjects.Token(ch.ID); err != nil {
		return adapter.Channel{}, false, fmt.Errorf("channels: %w", err)
	}
	r.mu.RLock()
	cur, ok := r.raw(ch.ID)
	r.mu.RUnlock()
	if ok {
		return cur, false, nil
	}
	// Not in memory: create at once (one write, no read first); a channel another process
	// opened meanwhile makes the create fail, and is read then.
	b, err := json.Marshal(ch)
	if err != nil {
		return adapter.Channel{}, false, fmt.Errorf("channels: encode: %w", err)
	}
	rev, err := r.botKV.Create(ctx, ch.ID, b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		cur, _, err := r.lookupRaw(ctx, ch.ID)
		return cur, false, err
	}
	if err != nil {
		return adapter.Channel{}, false, fmt.Errorf("channels: open %s: %w", ch.ID, err)
	}
	ch.Revision = rev
	r.remember(ch)
	return ch, true, nil
}

// lookupRaw is Lookup without the fill: the stored record.
func (r *Registry) lookupRaw(ctx context.Context, id string) (adapter.Channel, bool, error) {
	if _, _, err := r.Lookup(ctx, id); err != nil {
		return adapter.Channel{}, false, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	ch, ok := r.raw(id)
	return ch, ok, nil
}

// MarkAnnounced records that xAgent acked a user message of a bot's channel sent after its
// channel.opened: later messages go without one. A channel closed meanwhile is left closed.
func (r *Registry) MarkAnnounced(ctx context.Context, id string) error {
	for range 10 {
		e, err := r.botKV.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("channels: get %s: %w", id, err)
		}
		var ch adapter.Channel
		if err := json.Unmarshal(e.Value(), &ch); err != nil {
			return fmt.Errorf("channels: record %s unreadable: %w", id, err)
		}
		if ch.Announced {
			return nil
		}
		ch.Announced = true
		b, _ := json.Marshal(ch)
		rev, err := r.botKV.Update(ctx, id, b, e.Revision())
		if errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return fmt.Errorf("channels: update %s: %w", id, err)
		}
		ch.Revision = rev
		r.remember(ch)
		return nil
	}
	return fmt.Errorf("channels: %s changes too often", id)
}

// Delete closes a channel for good; it reports whether it was open.
func (r *Registry) Delete(ctx context.Context, id string) (bool, error) {
	_, ok, err := r.lookupRaw(ctx, id)
	if err != nil || !ok {
		return false, err
	}
	for _, kv := range []jetstream.KeyValue{r.kv, r.botKV} { // both: no bot's record comes back
		if err := kv.Purge(ctx, id); err != nil {
			return false, fmt.Errorf("channels: delete %s: %w", id, err)
		}
	}
	r.mu.Lock()
	if cur, had := r.raw(id); had {
		delete(r.byID, id)
		delete(r.puts, id)
		r.closed(cur)
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

// entry is a channel as the registry holds it in memory: a channel PUT whole; a bot's channel in a
// few words (its connection and target are its bot's, filled in when it is looked up), so that an
// idle conversation costs little.
type entry struct {
	put       *adapter.Channel // a channel PUT; nil for a bot's channel
	bot       string           // shared by the bot's channels (Registry.bots)
	convID    string           // shares the id's bytes when the key is the conversation's id
	thread    string
	title     string
	kind      adapter.ConversationKind
	announced bool
	openedAt  int64
	rev       uint64
}

// keep puts ch into byID (r.mu held for writing).
func (r *Registry) keep(ch adapter.Channel) {
	if ch.Bot == "" || ch.Conversation == nil {
		c := ch
		r.byID[ch.ID] = entry{put: &c}
		r.puts[ch.ID] = struct{}{}
		return
	}
	delete(r.puts, ch.ID)
	bot, ok := r.bots[ch.Bot]
	if !ok {
		bot = ch.Bot
		r.bots[bot] = bot
	}
	conv := ch.Conversation
	e := entry{bot: bot, convID: conv.ID, thread: conv.Thread, title: conv.Title, announced: ch.Announced,
		openedAt: ch.OpenedAt, rev: ch.Revision}
	if key, ok := strings.CutPrefix(ch.ID, bot+"-"); ok && key == conv.ID {
		e.convID = key // the same bytes as the id: stored once
	}
	switch conv.Kind { // the constants, not a decoded copy each
	case adapter.Direct:
		e.kind = adapter.Direct
	case adapter.Group:
		e.kind = adapter.Group
	case adapter.Thread:
		e.kind = adapter.Thread
	default:
		e.kind = conv.Kind
	}
	r.byID[ch.ID] = e
}

// raw is the channel of id as stored, not filled (r.mu held).
func (r *Registry) raw(id string) (adapter.Channel, bool) {
	e, ok := r.byID[id]
	if !ok {
		return adapter.Channel{}, false
	}
	return e.channel(id), true
}

// revision is the entry's record's revision in its bucket.
func (e entry) revision() uint64 {
	if e.put != nil {
		return e.put.Revision
	}
	return e.rev
}

// channel is the stored record of the entry of id.
func (e entry) channel(id string) adapter.Channel {
	if e.put != nil {
		return *e.put
	}
	return adapter.Channel{ID: id, OpenedAt: e.openedAt, Bot: e.bot, Announced: e.announced, Revision: e.rev,
		Conversation: &adapter.Conversation{Kind: e.kind, ID: e.convID, Thread: e.thread, Title: e.title}}
}
