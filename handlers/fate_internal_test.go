package handlers

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/pipeline/natstest"
)

// A plain consumer's work item is settled as its handler's outcome says: done is acked and not
// seen again, a retry comes back after its delay, a rejection and a poisoning are terminated with
// their reason (which the server's advisory carries) and never come back.
func TestConsumeWorkItemsSettlesOutcomes(t *testing.T) {
	js := natstest.JetStream(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "WORK", Subjects: []string{"work.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, "WORK", jetstream.ConsumerConfig{Durable: "items", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute}); err != nil {
		t.Fatal(err)
	}
	terminated := make(chan string, 8)
	advisories, err := js.Conn().Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.WORK.items", func(m *nats.Msg) { terminated <- string(m.Data) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = advisories.Unsubscribe() }()

	const retryDelay = 100 * time.Millisecond
	var mu sync.Mutex
	seen := map[string][]time.Time{}
	handle := func(_ context.Context, m jetstream.Msg) Outcome {
		mu.Lock()
		seen[m.Subject()] = append(seen[m.Subject()], time.Now())
		n := len(seen[m.Subject()])
		mu.Unlock()
		switch m.Subject() {
		case "work.retry":
			if n == 1 {
				return RetryAfter(retryDelay)
			}
		case "work.reject":
			return Reject("the item is not valid")
		case "work.poison":
			return Poison("the item cannot be handled")
		}
		return Done()
	}
	errc := make(chan error, 1)
	go func() { errc <- consumeWorkItems(ctx, js, "WORK", "items", 8, handle, slog.New(slog.DiscardHandler)) }()
	for _, s := range []string{"work.done", "work.retry", "work.reject", "work.poison"} {
		if _, err := js.Publish(ctx, s, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}

	var reasons []string
	deadline := time.After(10 * time.Second)
	for len(reasons) < 2 {
		select {
		case a := <-terminated:
			reasons = append(reasons, a)
		case <-deadline:
			t.Fatalf("terminated advisories: %q, want 2", reasons)
		}
	}
	for _, want := range []string{"the item is not valid", "the item cannot be handled"} {
		found := false
		for _, a := range reasons {
			found = found || strings.Contains(a, want)
		}
		if !found {
			t.Errorf("no termination advisory with reason %q: %q", want, reasons)
		}
	}
	cons, err := js.Consumer(ctx, "WORK", "items")
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream == 4 {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("consumer not settled: %d ack pending, %d pending, ack floor %d", info.NumAckPending, info.NumPending, info.AckFloor.Stream)
		case <-time.After(10 * time.Millisecond):
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for s, want := range map[string]int{"work.done": 1, "work.retry": 2, "work.reject": 1, "work.poison": 1} {
		if got := len(seen[s]); got != want {
			t.Errorf("%s handled %d times, want %d", s, got, want)
		}
	}
	if r := seen["work.retry"]; len(r) == 2 && r[1].Sub(r[0]) < retryDelay {
		t.Errorf("retry came back after %s, want at least %s", r[1].Sub(r[0]), retryDelay)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// The outcome vocabulary's accessors: what a retry waits for and why, a rejection's reason.
func TestOutcomeAccessors(t *testing.T) {
	tests := []struct {
		name       string
		o          Outcome
		kind       OutcomeKind
		delay      time.Duration
		reason     string
		kindString string
	}{
		{"zero is done", Outcome{}, OutcomeDone, 0, "", "done"},
		{"done", Done(), OutcomeDone, 0, "", "done"},
		{"retry after", RetryAfter(time.Second), OutcomeRetry, time.Second, "", "retry"},
		{"retry of an error", Retry(errContention), OutcomeRetry, 0, errContention.Error(), "retry"},
		{"reject", Reject("bad"), OutcomeReject, 0, "bad", "reject"},
		{"poison", Poison("gave up"), OutcomePoison, 0, "gave up", "poison"},
		{"stage error", outcomeOf(errContention), OutcomeRetry, 0, errContention.Error(), "retry"},
		{"stage success", outcomeOf(nil), OutcomeDone, 0, "", "done"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.o.Kind() != tt.kind || tt.o.Delay() != tt.delay || tt.o.Reason() != tt.reason || tt.o.Kind().String() != tt.kindString {
				t.Errorf("got %v %s %q, want %v %s %q", tt.o.Kind(), tt.o.Delay(), tt.o.Reason(), tt.kind, tt.delay, tt.reason)
			}
		})
	}
}
