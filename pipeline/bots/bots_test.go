package bots

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/pipeline/natstest"
	"github.com/ximd/ximd/subjects"
)

func openPairings(t *testing.T) (*Pairings, jetstream.JetStream) {
	t.Helper()
	js := natstest.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subjects.BucketPairings, History: 1, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	p, err := OpenPairings(ctx, js, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return p, js
}

// edge-api §4.1: one pending code per person, issued once however many processes ask at once;
// 8 characters of A-Z2-9; listed; taken by its code; gone after approval.
func TestPairings_OneCodePerPersonIssuedOnce(t *testing.T) {
	p, _ := openPairings(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, codes := 0, map[string]bool{}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr, c, err := p.Request(ctx, "b1", "alice", "Alice")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			codes[pr.Code] = true
			if c {
				created++
			}
		}()
	}
	wg.Wait()
	if created != 1 || len(codes) != 1 {
		t.Fatalf("created %d times, codes %v: want one code issued once", created, codes)
	}
	var code string
	for c := range codes {
		code = c
	}
	if !validCode(code) {
		t.Fatalf("code %q is not 8 characters of A-Z2-9", code)
	}
	list, err := p.List(ctx, "b1")
	if err != nil || len(list) != 1 || list[0].User != "alice" || list[0].DisplayName != "Alice" || list[0].Code != code {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if other, _ := p.List(ctx, "b2"); len(other) != 0 {
		t.Fatalf("another bot's list: %+v", other)
	}
	if _, err := p.Take(ctx, "b1", "AAAAAAAA"); !errors.Is(err, ErrNoPairing) {
		t.Fatalf("unknown code: %v", err)
	}
	if _, err := p.Take(ctx, "b2", code); !errors.Is(err, ErrNoPairing) {
		t.Fatalf("another bot's code: %v", err)
	}
	pr, err := p.Take(ctx, "b1", code)
	if err != nil || pr.User != "alice" {
		t.Fatalf("Take = %+v, %v", pr, err)
	}
	if err := p.Done(ctx, "b1", pr); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Take(ctx, "b1", code); !errors.Is(err, ErrNoPairing) {
		t.Fatalf("an approved code again: %v", err)
	}
	if _, c, _ := p.Request(ctx, "b1", "alice", "Alice"); !c {
		t.Fatal("after approval, a new request is a new code")
	}
}

// At most MaxPendingPairings codes a bot.
func TestPairings_BoundedPerBot(t *testing.T) {
	p, _ := openPairings(t)
	ctx := context.Background()
	for i := range MaxPendingPairings {
		if _, c, err := p.Request(ctx, "b1", fmt.Sprint("u", i), ""); err != nil || !c {
			t.Fatalf("request %d: %v %v", i, c, err)
		}
	}
	if _, _, err := p.Request(ctx, "b1", "one-more", ""); !errors.Is(err, ErrTooManyPairings) {
		t.Fatalf("past the bound: %v", err)
	}
	if _, c, err := p.Request(ctx, "b2", "one-more", ""); err != nil || !c {
		t.Fatalf("another bot: %v %v", c, err)
	}
}

// A limiter alone (no KV) passes max_per_minute messages of one conversation a minute, each
// conversation its own.
func TestLimiter_Alone(t *testing.T) {
	l := newLimiter(nil)
	ctx := context.Background()
	for i := range 3 {
		if !l.allow(ctx, "a", 3) {
			t.Fatalf("message %d refused", i)
		}
	}
	if l.allow(ctx, "a", 3) {
		t.Fatal("the 4th message of a minute passed")
	}
	if !l.allow(ctx, "b", 3) {
		t.Fatal("another conversation refused")
	}
	l.local["a"].start = time.Now().Add(-time.Minute)
	if !l.allow(ctx, "a", 3) {
		t.Fatal("a new minute refused")
	}
}

func openRates(t *testing.T, js jetstream.JetStream) jetstream.KeyValue {
	t.Helper()
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: subjects.BucketBotRates, History: 1, TTL: 2 * time.Minute, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// Two processes' limiters (two gateways a platform posts to in turn) hold one conversation to
// max_per_minute together: of 30 messages at once, 20 pass, whichever process takes them.
func TestLimiter_SharedAcrossProcesses(t *testing.T) {
	srv := natstest.Server(t)
	newProcess := func() *limiter {
		js, err := jetstream.New(natstest.Connect(t, srv))
		if err != nil {
			t.Fatal(err)
		}
		return newLimiter(openRates(t, js))
	}
	a, b := newProcess(), newProcess()
	if time.Now().Second() > 55 {
		time.Sleep(6 * time.Second) // all 30 in one clock minute
	}
	var passed atomic.Int32
	var wg sync.WaitGroup
	for i := range 30 {
		l := a
		if i%2 == 1 {
			l = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l.allow(context.Background(), "wb-ann", 20) {
				passed.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := passed.Load(); n != 20 {
		t.Fatalf("%d of 30 passed, want 20 (max_per_minute across both processes)", n)
	}
	if !a.allow(context.Background(), "wb-bo", 20) {
		t.Fatal("another conversation refused")
	}
}

// A limiter whose NATS does not answer counts alone: messages pass up to the limit, no further.
func TestLimiter_CountsAloneWithoutNATS(t *testing.T) {
	srv := natstest.Server(t)
	js, err := jetstream.New(natstest.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(openRates(t, js))
	srv.Shutdown()
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		ok := l.allow(ctx, "wb-ann", 3)
		cancel()
		if ok != (i < 3) {
			t.Fatalf("message %d: passed %v", i, ok)
		}
	}
}

// Registry: a PUT with the same settings changes nothing; Allow adds a person once; Delete
// forgets the bot and its stats.
func TestRegistry_PutAllowDelete(t *testing.T) {
	js := natstest.JetStream(t)
	ctx := context.Background()
	for _, b := range []string{subjects.BucketBots, subjects.BucketBotStats} {
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, History: 1}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Open(ctx, js, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := adapter.ParsePolicy(nil)
	b := adapter.Bot{ID: "b1", Target: adapter.Binding{Adapter: "webhook"}, Conversations: p, OpenedAt: 1}
	first, err := r.Put(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	b.OpenedAt = 2
	again, _ := r.Put(ctx, b)
	if again.Revision != first.Revision || again.OpenedAt != 1 {
		t.Fatalf("the same PUT again: revision %d -> %d, opened_at %d", first.Revision, again.Revision, again.OpenedAt)
	}
	for range 2 {
		if _, err := r.Allow(ctx, "b1", "u1"); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := r.Get("b1")
	if len(got.Conversations.AllowUsers) != 1 || got.Conversations.AllowUsers[0] != "u1" {
		t.Fatalf("allow_users %v", got.Conversations.AllowUsers)
	}
	if err := r.addStats(ctx, "b1", map[adapter.Refusal]uint64{adapter.RefusedNotMentioned: 2}); err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Stats(ctx, "b1"); st[adapter.RefusedNotMentioned] != 2 {
		t.Fatalf("stats %v", st)
	}
	if ok, err := r.Delete(ctx, "b1"); !ok || err != nil {
		t.Fatalf("Delete: %v %v", ok, err)
	}
	if _, ok := r.Get("b1"); ok {
		t.Fatal("a deleted bot is still there")
	}
	if st, _ := r.Stats(ctx, "b1"); len(st) != 0 {
		t.Fatalf("a deleted bot's stats: %v", st)
	}
	if _, err := r.Allow(ctx, "b1", "u2"); !errors.Is(err, ErrNoBot) {
		t.Fatalf("Allow on a deleted bot: %v", err)
	}
}
