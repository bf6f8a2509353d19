package bus_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ximd/ximd/pipeline/bus"
)

// A pinned group delivers to one subscription at a time, across processes (connections): the
// second gets nothing while the first pulls, and everything left once the first is gone.
func TestSubscriberPinnedGroupServesOneSubscriptionAtATime(t *testing.T) {
	f := newFixture(t)
	pinned := func(topic string) bus.Consumer {
		return bus.Consumer{Stream: testStream, Durable: testDurable, FilterSubjects: []string{topic}, Description: "test",
			PinnedGroup: "workers", PinnedTTL: 2 * time.Second}
	}
	first := f.subscriber(t, bus.SubscriberConfig{Consumer: pinned, FetchWait: 200 * time.Millisecond}, nil)
	ch1, err := first.Subscribe(context.Background(), testTopic)
	if err != nil {
		t.Fatal(err)
	}
	f.publish(t, 1, 4)
	m := receive(t, ch1, 5*time.Second) // the first pull pins the group to first
	wantMsg(t, m, "m1", "1")
	m.Ack()

	second := f.subscriber(t, bus.SubscriberConfig{Consumer: pinned, FetchWait: 200 * time.Millisecond}, nil)
	ch2, err := second.Subscribe(context.Background(), testTopic)
	if err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 3; i++ {
		m := receive(t, ch1, 5*time.Second)
		wantMsg(t, m, fmt.Sprintf("m%d", i), "1")
		m.Ack()
	}
	select {
	case m := <-ch2:
		t.Fatalf("the unpinned subscription got %s", m.Payload)
	case <-time.After(500 * time.Millisecond):
	}
	t0 := time.Now()
	if err := first.Close(); err != nil { // hands m4 back; the pin moves after PinnedTTL
		t.Fatal(err)
	}
	t.Logf("closed in %s", time.Since(t0))
	m = receive(t, ch2, 10*time.Second)
	t.Logf("taken over in %s", time.Since(t0))
	if m.UUID != "m4" {
		t.Fatalf("after the take-over got %s, want m4", m.UUID)
	}
	m.Ack()
}

// Active moves a pinned topic between subscriptions at once (not after PinnedTTL), in order: the
// subscription that turns inactive delivers what it holds, then hands the pin back.
func TestSubscriberActiveHandsThePinOverInOrder(t *testing.T) {
	f := newFixture(t)
	pinned := func(topic string) bus.Consumer {
		return bus.Consumer{Stream: testStream, Durable: testDurable, FilterSubjects: []string{topic}, Description: "test",
			PinnedGroup: "workers", PinnedTTL: time.Minute} // only a hand-over can move it within the test
	}
	var firstActive atomic.Bool
	firstActive.Store(true)
	first := f.subscriber(t, bus.SubscriberConfig{Consumer: pinned, FetchWait: 200 * time.Millisecond,
		Active: func(string) bool { return firstActive.Load() }}, nil)
	second := f.subscriber(t, bus.SubscriberConfig{Consumer: pinned, FetchWait: 200 * time.Millisecond,
		Active: func(string) bool { return !firstActive.Load() }}, nil)
	ch1, err := first.Subscribe(context.Background(), testTopic)
	if err != nil {
		t.Fatal(err)
	}
	ch2, err := second.Subscribe(context.Background(), testTopic)
	if err != nil {
		t.Fatal(err)
	}
	f.publish(t, 1, 10)
	for i := 1; i <= 3; i++ {
		m := receive(t, ch1, 5*time.Second)
		wantMsg(t, m, fmt.Sprintf("m%d", i), "1")
		m.Ack()
	}
	firstActive.Store(false)
	// The first delivers what it fetched, the second the rest, as one sequence; messages
	// published after the flip reach the second well within PinnedTTL.
	deadline := time.After(10 * time.Second)
	fromSecond := 0
	for next := 4; fromSecond < 3; next++ {
		if next > 10 {
			f.publish(t, next, next)
		}
		select {
		case m := <-ch1:
			if fromSecond > 0 || m.UUID != fmt.Sprintf("m%d", next) {
				t.Fatalf("first got %s, want m%d from the first (second served %d)", m.UUID, next, fromSecond)
			}
			m.Ack()
		case m := <-ch2:
			if m.UUID != fmt.Sprintf("m%d", next) {
				t.Fatalf("second got %s, want m%d", m.UUID, next)
			}
			m.Ack()
			fromSecond++
		case <-deadline:
			t.Fatalf("nothing after m%d: the pin was not handed over", next-1)
		}
	}
}

// A subscription whose handler holds a message longer than PinnedTTL keeps the pin: it still
// pulls while busy, so the server does not hand the partition's next messages to another
// subscription while this one works on the earlier ones.
func TestSubscriberBusyHandlerKeepsThePin(t *testing.T) {
	f := newFixture(t)
	const ttl = 1500 * time.Millisecond
	pinned := func(topic string) bus.Consumer {
		return bus.Consumer{Stream: testStream, Durable: testDurable, FilterSubjects: []string{topic}, Description: "test",
			PinnedGroup: "workers", PinnedTTL: ttl}
	}
	first := f.subscriber(t, bus.SubscriberConfig{Consumer: pinned, FetchWait: 300 * time.Millisecond, AckWait: 2 * time.Second}, nil)
	ch1, err := first.Subscribe(context.Background(), testTopic)
	if err != nil {
		t.Fatal(err)
	}
	f.publish(t, 1, 3)
	busy := receive(t, ch1, 5*time.Second) // pins the group to first, then holds m1 with m2, m3 queued
	pin := func() string {
		for _, g := range f.consumerInfo(t).PriorityGroups {
			return g.PinnedClientID
		}
		return ""
	}
	held := pin()
	if held == "" {
		t.Fatal("no pin after the first delivery")
	}
	for end := time.Now().Add(4 * ttl); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if got := pin(); got != held {
			t.Fatalf("the busy subscription lost its pin (now %q)", got)
		}
	}
	busy.Ack()
	for i := 2; i <= 3; i++ {
		m := receive(t, ch1, 5*time.Second)
		wantMsg(t, m, fmt.Sprintf("m%d", i), "1")
		m.Ack()
	}
}
