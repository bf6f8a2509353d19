package bus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/pipeline/bus"
)

// orderFixture is a WorkQueue stream "WQ" on wq.<lane> (a stored message is an unsettled one)
// with durable "work", and a subscriber config whose lanes are the subjects' last token.
type orderFixture struct {
	*fixture
	cfg bus.SubscriberConfig
}

const orderAckWait = time.Second

func newOrderFixture(t *testing.T, guarded bool) *orderFixture {
	t.Helper()
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      "WQ",
		Subjects:  []string{"wq.*"},
		Retention: jetstream.WorkQueuePolicy,
		Storage:   jetstream.FileStorage,
	}); err != nil {
		t.Fatal(err)
	}
	cfg := bus.SubscriberConfig{
		Consumer: func(string) bus.Consumer {
			return bus.Consumer{Stream: "WQ", Durable: "work", FilterSubjects: []string{"wq.*"}}
		},
		AckWait:   orderAckWait,
		FetchWait: 200 * time.Millisecond,
		Lane:      func(subject string) string { return strings.TrimPrefix(subject, "wq.") },
	}
	if guarded {
		cfg.LaneSubjects = func(subject string) []string { return []string{subject} }
	}
	return &orderFixture{fixture: f, cfg: cfg}
}

// publishWQ publishes one message per id ("<lane>-<n>") on wq.<lane>.
func (f *orderFixture) publishWQ(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		lane, _, _ := strings.Cut(id, "-")
		if err := f.pub.Publish("wq."+lane, message.NewMessage(id, nil)); err != nil {
			t.Fatal(err)
		}
	}
}

// steal fetches the next message of the durable outside the subscriber and never acks it: the
// server redelivers it after AckWait, behind the newer messages the subscriber got meanwhile. It
// returns the stolen message.
func (f *orderFixture) steal(t *testing.T) jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cons, err := connect(t, f.srv).Consumer(ctx, "WQ", "work")
	if err != nil {
		t.Fatal(err)
	}
	b, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		return m
	}
	t.Fatalf("nothing to steal: %v", b.Error())
	return nil
}

// handle acks every message from ch and records its UUID, until n were handled.
func handle(t *testing.T, ch <-chan *message.Message, n int, within time.Duration) []string {
	t.Helper()
	var got []string
	deadline := time.After(within)
	for len(got) < n {
		select {
		case m := <-ch:
			got = append(got, m.UUID)
			m.Ack()
		case <-deadline:
			t.Fatalf("handled %v, want %d messages within %s", got, n, within)
		}
	}
	return got
}

// indexOf is the position of id in ids (-1: absent).
func indexOf(ids []string, id string) int {
	for i, x := range ids {
		if x == id {
			return i
		}
	}
	return -1
}

// A message delivered where nobody reads it comes back after AckWait behind its lane's newer
// messages. Without LaneSubjects the lane is handled out of stream order; with them the lane
// waits for it (and only that lane: another lane goes on meanwhile), then the subscription
// becomes sure again.
func TestSubscriberLaneOrderSurvivesALostDelivery(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		name := map[bool]string{false: "unguarded", true: "guarded"}[guarded]
		t.Run(name, func(t *testing.T) {
			logs := &logBuffer{}
			f := newOrderFixture(t, guarded)
			sub := f.subscriber(t, f.cfg, logs.logger())
			if err := sub.SubscribeInitialize("wq"); err != nil {
				t.Fatal(err)
			}
			f.publishWQ(t, "a-1", "b-1", "a-2", "a-3")
			if stolen := f.steal(t); stolen.Headers().Get(bus.HeaderUUID) != "a-1" {
				t.Fatalf("stole %s, want a-1", stolen.Headers().Get(bus.HeaderUUID))
			}
			ch, err := sub.Subscribe(context.Background(), "wq")
			if err != nil {
				t.Fatal(err)
			}
			got := handle(t, ch, 4, 10*orderAckWait)
			inOrder := indexOf(got, "a-1") < indexOf(got, "a-2") && indexOf(got, "a-2") < indexOf(got, "a-3")
			if guarded != inOrder {
				t.Fatalf("lane a handled as %v (guarded %v)", got, guarded)
			}
			if guarded && indexOf(got, "b-1") > indexOf(got, "a-1") {
				t.Fatalf("lane b waited for lane a's lost delivery: %v", got)
			}
			if guarded {
				eventually(t, 5*time.Second, "the subscription to become sure", func() bool {
					return strings.Contains(logs.String(), "bus_order_sure")
				})
			}
		})
	}
}

// A lane head waits while an earlier message of its lane is in other hands, and goes on as soon
// as those hands settle it (it is not redelivered here).
func TestSubscriberLaneWaitsForEarlierSettledElsewhere(t *testing.T) {
	logs := &logBuffer{}
	f := newOrderFixture(t, true)
	f.cfg.AckWait = 30 * time.Second // no redelivery within the test
	sub := f.subscriber(t, f.cfg, logs.logger())
	if err := sub.SubscribeInitialize("wq"); err != nil {
		t.Fatal(err)
	}
	f.publishWQ(t, "a-1", "a-2", "b-1")
	stolen := f.steal(t)
	ch, err := sub.Subscribe(context.Background(), "wq")
	if err != nil {
		t.Fatal(err)
	}
	if got := handle(t, ch, 1, 5*time.Second); got[0] != "b-1" {
		t.Fatalf("first handled %s, want b-1 (a-2 must wait for a-1)", got[0])
	}
	select {
	case m := <-ch:
		t.Fatalf("%s handled while a-1 is unsettled in other hands", m.UUID)
	case <-time.After(500 * time.Millisecond):
	}
	if err := stolen.DoubleAck(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := handle(t, ch, 1, 5*time.Second); got[0] != "a-2" {
		t.Fatalf("handled %s after a-1 was settled elsewhere, want a-2", got[0])
	}
	if !strings.Contains(logs.String(), "bus_lane_waits_for_earlier") {
		t.Fatal("the wait was not logged")
	}
}
