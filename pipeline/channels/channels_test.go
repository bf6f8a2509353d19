package channels

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/pipeline/natstest"
	"github.com/ximd/ximd/subjects"
)

// openRegistry opens a Registry on a fresh bucket xim_channels of an in-process server, its
// watcher running until the test ends.
func openRegistry(t *testing.T) (*Registry, jetstream.JetStream) {
	t.Helper()
	js := natstest.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, b := range []string{subjects.BucketChannels, subjects.BucketBotChannels} {
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, History: 1}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Open(ctx, js, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	return r, js
}

func webhookChannel(id string) adapter.Channel {
	return adapter.Channel{ID: id, Connection: adapter.Connection{TargetType: "im", Profiles: []string{"xagent.im.v2"}},
		Target: adapter.Binding{Adapter: "webhook", Config: json.RawMessage(`{"url":"http://127.0.0.1:9/h","chat_id":"c"}`)}}
}

// ids is the ids of chs, in their order.
func ids(chs []adapter.Channel) []string {
	out := make([]string, len(chs))
	for i, ch := range chs {
		out[i] = ch.ID
	}
	return out
}

// Following next from page to page lists every open channel exactly once, in id order, through
// opens, closes and re-opens, whether they happen here (Put, Delete) or in another process (the
// watcher); List agrees.
func TestPage_FollowingNextListsEveryChannelOnceInOrder(t *testing.T) {
	r, js := openRegistry(t)
	ctx := context.Background()
	want := map[string]bool{}
	for i := range 250 {
		id := fmt.Sprintf("ch-%03d", (i*37)%250) // not opened in id order
		if _, err := r.Put(ctx, webhookChannel(id)); err != nil {
			t.Fatal(err)
		}
		want[id] = true
	}
	for _, id := range []string{"ch-007", "ch-100", "ch-249"} {
		if _, err := r.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		delete(want, id)
	}
	if _, err := r.Put(ctx, webhookChannel("ch-100")); err != nil { // re-opened
		t.Fatal(err)
	}
	want["ch-100"] = true
	// Another process opens one and closes one: the watcher applies it.
	kv, err := js.KeyValue(ctx, subjects.BucketChannels)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(webhookChannel("ch-other"))
	if _, err := kv.Put(ctx, "ch-other", b); err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, "ch-010"); err != nil {
		t.Fatal(err)
	}
	want["ch-other"] = true
	delete(want, "ch-010")
	deadline := time.Now().Add(10 * time.Second)
	for !r.IsOpen("ch-other") || r.IsOpen("ch-010") {
		if time.Now().After(deadline) {
			t.Fatal("the watcher did not apply the other process's changes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	wantIDs := make([]string, 0, len(want))
	for id := range want {
		wantIDs = append(wantIDs, id)
	}
	slices.Sort(wantIDs)

	listAll := func() (got []string, pages int) {
		after := ""
		for {
			page, next := r.Page(after, 100)
			pages++
			got = append(got, ids(page)...)
			if next == "" {
				return got, pages
			}
			if next != page[len(page)-1].ID {
				t.Fatalf("page %d: next %q, last channel %q", pages, next, page[len(page)-1].ID)
			}
			after = next
		}
	}
	if got, pages := listAll(); pages != 3 || !slices.Equal(got, wantIDs) {
		t.Fatalf("%d pages listing %v, want 3 pages listing %v", pages, got, wantIDs)
	}
	if l := ids(r.List()); !slices.Equal(l, wantIDs) {
		t.Fatalf("List: %v, want %v", l, wantIDs)
	}

	// A few changes after a listing (applied in place): one closed, one opened, one opened and
	// closed again, one closed and opened again.
	for _, op := range []struct {
		id   string
		open bool
	}{{"ch-050", false}, {"ch-0505", true}, {"ch-2", true}, {"ch-2", false}, {"ch-200", false}, {"ch-200", true}} {
		var err error
		if op.open {
			_, err = r.Put(ctx, webhookChannel(op.id))
		} else {
			_, err = r.Delete(ctx, op.id)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	wantIDs = slices.DeleteFunc(wantIDs, func(id string) bool { return id == "ch-050" })
	i, _ := slices.BinarySearch(wantIDs, "ch-0505")
	wantIDs = slices.Insert(wantIDs, i, "ch-0505")
	if got, pages := listAll(); pages != 3 || !slices.Equal(got, wantIDs) {
		t.Fatalf("after a few changes: %d pages listing %v, want 3 pages listing %v", pages, got, wantIDs)
	}
}

func TestPage_Bounds(t *testing.T) {
	r, _ := openRegistry(t)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c", "d"} {
		if _, err := r.Put(ctx, webhookChannel(id)); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name     string
		after    string
		limit    int
		want     []string
		wantNext string
	}{
		{"first page", "", 2, []string{"a", "b"}, "b"},
		{"after an open channel", "b", 2, []string{"c", "d"}, ""},
		{"exactly the rest: no next", "a", 3, []string{"b", "c", "d"}, ""},
		{"after a closed or never opened id", "bb", 10, []string{"c", "d"}, ""},
		{"before every id", "0", 1, []string{"a"}, "a"},
		{"after the last", "d", 10, []string{}, ""},
		{"past the end", "zzz", 10, []string{}, ""},
		{"limit larger than the registry", "", 1000, []string{"a", "b", "c", "d"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page, next := r.Page(tt.after, tt.limit)
			if got := ids(page); !slices.Equal(got, tt.want) || next != tt.wantNext {
				t.Fatalf("Page(%q, %d) = %v, %q; want %v, %q", tt.after, tt.limit, got, next, tt.want, tt.wantNext)
			}
		})
	}
}

// filled is a registry holding n channels in memory, as after the initial load of a bucket of n.
func filled(n int) *Registry {
	r := &Registry{byID: make(map[string]entry, n), puts: map[string]struct{}{}, perBot: map[string]int{}, bots: map[string]string{}}
	for i := range n {
		ch := webhookChannel(fmt.Sprintf("cch_%06d", (i*7919)%n))
		r.keep(ch)
		r.added = append(r.added, ch.ID)
	}
	r.reindex()
	return r
}

// One page out of 100,000 channels costs a binary search and the page; the full listing (what
// GET /v1/channels answered before it paged) copies and sorts every channel.
func BenchmarkRegistryListing(b *testing.B) {
	const n = 100_000
	r := filled(n)
	b.Run("page_100_of_100000", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if page, _ := r.Page("cch_050000", 100); len(page) != 100 {
				b.Fatal(len(page))
			}
		}
	})
	b.Run("page_100_after_a_change", func(b *testing.B) {
		b.ReportAllocs()
		extra := webhookChannel("cch_025000x")
		for i := 0; b.Loop(); i++ {
			r.mu.Lock() // a channel in the middle opens, then closes again
			if i%2 == 0 {
				r.keep(extra)
				r.added = append(r.added, extra.ID)
			} else {
				delete(r.byID, extra.ID)
				r.removed = append(r.removed, extra.ID)
			}
			r.mu.Unlock()
			if page, _ := r.Page("cch_050000", 100); len(page) != 100 {
				b.Fatal(len(page))
			}
		}
	})
	b.Run("full_list_sorted_per_call_before", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if all := listSortedPerCall(r); len(all) != n {
				b.Fatal(len(all))
			}
		}
	})
	b.Run("full_list_from_the_index", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if all := r.List(); len(all) != n {
				b.Fatal(len(all))
			}
		}
	})
}

// listSortedPerCall is List as it was before the sorted index: copy every channel, sort them.
func listSortedPerCall(r *Registry) []adapter.Channel {
	r.mu.RLock()
	out := make([]adapter.Channel, 0, len(r.byID))
	for id, e := range r.byID {
		ch := e.channel(id)
		out = append(out, ch)
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// A process that never lists keeps its pending index changes bounded, and a later listing is
// still right.
func TestIndex_ChangesStayBoundedWithoutListing(t *testing.T) {
	r := &Registry{byID: map[string]entry{}, puts: map[string]struct{}{}, perBot: map[string]int{}, bots: map[string]string{}}
	for i := range 5000 {
		id := fmt.Sprintf("c%05d", i%3000)
		if e, open := r.byID[id]; open {
			delete(r.byID, id)
			delete(r.puts, id)
			r.closed(e.channel(id))
		} else {
			r.keep(webhookChannel(id))
			r.opened(webhookChannel(id))
		}
		if n := len(r.added) + len(r.removed); n > max(len(r.ids), 1024) {
			t.Fatalf("after %d changes: %d pending for %d indexed ids", i+1, n, len(r.ids))
		}
	}
	var want []string
	for id := range r.byID {
		want = append(want, id)
	}
	slices.Sort(want)
	if got := ids(r.List()); !slices.Equal(got, want) {
		t.Fatalf("List: %d ids, want %d", len(got), len(want))
	}
}

// A bot's channel is opened once however many callers race (a KV create), is held without its
// bot's settings and completed by the fill at lookup, survives a reload as stored, and is
// announced once.
func TestRegistry_BotChannelOpenedOnceFilledAndAnnounced(t *testing.T) {
	r, js := openRegistry(t)
	ctx := context.Background()
	r.SetFill(func(ch adapter.Channel) (adapter.Channel, bool) {
		if ch.Bot != "b1" {
			return adapter.Channel{}, false
		}
		ch.Target = adapter.Binding{Adapter: "webhook", Config: json.RawMessage(`{"chat_id":"` + ch.Conversation.ID + `"}`)}
		return ch, true
	})
	conv := adapter.Conversation{Kind: adapter.Direct, ID: "ann", Title: "Ann"}
	var mu sync.Mutex
	created := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := conv
			_, ok, err := r.OpenOnce(ctx, adapter.Channel{ID: c.ChannelID("b1"), OpenedAt: 7, Bot: "b1", Conversation: &c})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			if ok {
				created++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if created != 1 {
		t.Fatalf("created %d times, want once", created)
	}
	ch, ok := r.Get("b1-ann")
	if !ok || string(ch.Target.Config) != `{"chat_id":"ann"}` || ch.Conversation.Title != "Ann" || ch.Bot != "b1" || ch.OpenedAt != 7 {
		t.Fatalf("Get = %+v, %v", ch, ok)
	}
	if ids := r.BotChannels("b1"); len(ids) != 1 || ids[0] != "b1-ann" || r.BotChannelCount("b1") != 1 || len(r.ListPut()) != 0 {
		t.Fatalf("BotChannels %v, count %d, put %d", ids, r.BotChannelCount("b1"), len(r.ListPut()))
	}
	if err := r.MarkAnnounced(ctx, "b1-ann"); err != nil {
		t.Fatal(err)
	}
	if ch, _ := r.Get("b1-ann"); !ch.Announced {
		t.Fatal("not announced")
	}
	// Another process loads it as stored.
	other, err := Open(ctx, js, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	raw, ok, _ := other.lookupRaw(ctx, "b1-ann")
	if !ok || !raw.Announced || raw.Conversation.ID != "ann" || raw.Conversation.Kind != adapter.Direct || raw.Bot != "b1" {
		t.Fatalf("reloaded %+v", raw)
	}
	if _, ok := other.Get("b1-ann"); ok {
		t.Fatal("a bot's channel without a fill (its bot unknown) is open")
	}
	if ok, err := r.Delete(ctx, "b1-ann"); !ok || err != nil || r.BotChannelCount("b1") != 0 {
		t.Fatalf("Delete: %v %v, count %d", ok, err, r.BotChannelCount("b1"))
	}
}
