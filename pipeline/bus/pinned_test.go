package bus_test

import (
	"context"
	"fmt"
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
