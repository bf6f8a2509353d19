package bus_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/ximd/ximd/pipeline/bus"
)

// laneOf is the lane of a subject orders.<lane>.
func laneOf(subject string) string { return strings.TrimPrefix(subject, "orders.") }

// laneSubscription subscribes to every lane of ORDERS ("orders.*").
func laneSubscription(t *testing.T, f *fixture, cfg bus.SubscriberConfig) <-chan *message.Message {
	t.Helper()
	cfg.Lane = laneOf
	cfg.Consumer = func(string) bus.Consumer {
		return bus.Consumer{Stream: testStream, Durable: testDurable, FilterSubjects: []string{"orders.*"}, Description: "lanes"}
	}
	ch, err := f.subscriber(t, cfg, nil).Subscribe(context.Background(), "lanes")
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// publishLane publishes <lane>-<from>..<lane>-<to> on orders.<lane>.
func publishLane(t *testing.T, f *fixture, lane string, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		if err := f.pub.Publish("orders."+lane, message.NewMessage(fmt.Sprintf("%s-%d", lane, i), nil)); err != nil {
			t.Fatal(err)
		}
	}
}

// A lane whose handler is stuck holds up only itself: every message of the other lanes, published
// after it, is delivered and acked meanwhile, and the stuck lane's later messages wait their turn.
func TestSubscriberLaneDelaysOnlyItself(t *testing.T) {
	f := newFixture(t)
	publishLane(t, f, "slow", 1, 3)
	publishLane(t, f, "fast", 1, 20)
	ch := laneSubscription(t, f, bus.SubscriberConfig{})

	var stuck *message.Message
	fast := 0
	deadline := time.After(10 * time.Second)
	for fast < 20 {
		select {
		case m := <-ch:
			switch {
			case strings.HasPrefix(m.UUID, "slow-"):
				if stuck != nil {
					t.Fatalf("%s delivered while %s of its lane is still in the handler", m.UUID, stuck.UUID)
				}
				stuck = m // held, neither acked nor nacked
			default:
				fast++
				if want := fmt.Sprintf("fast-%d", fast); m.UUID != want {
					t.Fatalf("got %s, want %s", m.UUID, want)
				}
				m.Ack()
			}
		case <-deadline:
			t.Fatalf("only %d of 20 messages of the free lane delivered while the other lane is stuck", fast)
		}
	}
	if stuck == nil || stuck.UUID != "slow-1" {
		t.Fatalf("stuck lane's head %v, want slow-1", stuck)
	}
	stuck.Ack()
	for i := 2; i <= 3; i++ {
		m := receive(t, ch, 5*time.Second)
		wantMsg(t, m, fmt.Sprintf("slow-%d", i), "1")
		m.Ack()
	}
}

// A Nack delays its lane only: the nacked message comes back before the later messages of its
// lane, while other lanes go on.
func TestSubscriberLaneNackKeepsItsOrder(t *testing.T) {
	f := newFixture(t)
	for i := 1; i <= 10; i++ {
		publishLane(t, f, "a", i, i)
		publishLane(t, f, "b", i, i)
	}
	ch := laneSubscription(t, f, bus.SubscriberConfig{NakDelay: 50 * time.Millisecond})
	next := map[string]int{"a": 1, "b": 1}
	for next["a"] <= 10 || next["b"] <= 10 {
		m := receive(t, ch, 5*time.Second)
		lane, _, _ := strings.Cut(m.UUID, "-")
		if want := fmt.Sprintf("%s-%d", lane, next[lane]); m.UUID != want {
			t.Fatalf("lane %s: got %s, want %s", lane, m.UUID, want)
		}
		if lane == "a" && next["a"]%3 == 0 && m.Metadata.Get(bus.MetaNumDelivered) == "1" {
			m.Nack()
			continue
		}
		m.Ack()
		next[lane]++
	}
}

// MaxLanes bounds the lanes in handlers at once.
func TestSubscriberMaxLanes(t *testing.T) {
	f := newFixture(t)
	for _, l := range []string{"a", "b", "c", "d", "e"} {
		publishLane(t, f, l, 1, 2)
	}
	ch := laneSubscription(t, f, bus.SubscriberConfig{MaxLanes: 2})
	var held []*message.Message
	for len(held) < 2 {
		held = append(held, receive(t, ch, 5*time.Second))
	}
	select {
	case m := <-ch:
		t.Fatalf("%s delivered with 2 lanes already in handlers (MaxLanes 2)", m.UUID)
	case <-time.After(300 * time.Millisecond):
	}
	seen, received := map[string]bool{}, 2
	for len(held) > 0 {
		m := held[0]
		held = held[1:]
		seen[m.UUID] = true
		m.Ack()
		if received < 10 {
			held = append(held, receive(t, ch, 5*time.Second))
			received++
		}
	}
	if len(seen) != 10 {
		t.Fatalf("delivered %d of 10", len(seen))
	}
}

// Closing hands every held message back in stream order, so the next subscriber gets each lane's
// messages in order, the unacked head first.
func TestSubscriberLanesCloseHandsBackInOrder(t *testing.T) {
	f := newFixture(t)
	publishLane(t, f, "a", 1, 5)
	publishLane(t, f, "b", 1, 5)
	sub := f.subscriber(t, bus.SubscriberConfig{Lane: laneOf, Consumer: func(string) bus.Consumer {
		return bus.Consumer{Stream: testStream, Durable: testDurable, FilterSubjects: []string{"orders.*"}, Description: "lanes"}
	}}, nil)
	ch, err := sub.Subscribe(context.Background(), "lanes")
	if err != nil {
		t.Fatal(err)
	}
	// a-1 acked, b-1 in a handler (acked after Close began): both lanes hold the rest.
	var inHandler *message.Message
	for inHandler == nil {
		m := receive(t, ch, 5*time.Second)
		switch m.UUID {
		case "a-1":
			m.Ack()
		case "b-1":
			inHandler = m
		default:
			m.Nack()
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = sub.Close() }()
	time.Sleep(50 * time.Millisecond)
	inHandler.Ack()
	wg.Wait()

	ch2 := laneSubscription(t, f, bus.SubscriberConfig{})
	next := map[string]int{"a": 2, "b": 2}
	for next["a"] <= 5 || next["b"] <= 5 {
		m := receive(t, ch2, 5*time.Second)
		lane, _, _ := strings.Cut(m.UUID, "-")
		if want := fmt.Sprintf("%s-%d", lane, next[lane]); m.UUID != want {
			t.Fatalf("after the hand-back, lane %s: got %s, want %s", lane, m.UUID, want)
		}
		m.Ack()
		next[lane]++
	}
}
